/**
 * The metal inventory: the static list of an on-premises cluster's hosts and the instance group each
 * belongs to, kept in the state store at `<configBase>/metal/inventory.yaml`. With no cloud API to
 * ask, this file written by the operator is the source of truth; a node that is not in it has no
 * identity. Validated strictly (unknown fields, duplicates and malformed addresses are errors), and
 * re-read when its version in the store changes.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { parseYamlText } from '../../config/loader.ts';
import { isDnsName } from '../../dns-name.ts';
import { ConfigError, NotFoundError } from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { describeIssue } from '../../parse-problems.ts';
import { OlderCopyGuard } from '../../statestore/older-copy.ts';
import type { Vfs } from '../../statestore/types.ts';
import { monotonicMs, youngerThan } from '../age.ts';

/** Where the inventory lives, relative to the cluster's configBase. */
export const inventoryPath = 'metal/inventory.yaml';
export const inventoryApiVersion = 'kops-controller.k8s.io/v1alpha1';
export const inventoryKind = 'MetalInventory';

const hostSchema = z.strictObject({
  name: z.string().refine(isDnsName, 'must be a lower-case DNS name (the Kubernetes node name)'),
  instanceGroup: z
    .string()
    .regex(/^[a-z0-9](?:[-a-z0-9.]{0,61}[a-z0-9])?$/, 'must be the name of a kops instance group'),
  addresses: z
    .array(
      // All-numeric dotted names are mistyped IPs (no top-level domain is numeric), not DNS names.
      z.string().refine((a) => isIP(a) !== 0 || (isDnsName(a) && !/^[0-9.]+$/.test(a)), {
        message: 'must be an IPv4 or IPv6 address or a DNS name',
      }),
    )
    .min(1, 'list at least one address of the host'),
  providerID: z
    .string()
    .regex(/^metal:\/\/[^\s/]+$/, 'must be metal://<id>')
    .optional(),
  mac: z
    .string()
    .regex(/^[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}$/, 'must be a MAC address such as 52:54:00:12:34:56')
    .transform((mac) => mac.toLowerCase())
    .optional(),
  sshHostKeyFingerprint: z
    .string()
    .regex(
      /^SHA256:[A-Za-z0-9+/]{43}$/,
      'must be an OpenSSH SHA256 fingerprint (ssh-keygen -lf), SHA256:<43 chars>',
    )
    .optional(),
});

const inventorySchema = z
  .strictObject({
    apiVersion: z.literal(inventoryApiVersion).optional(),
    kind: z.literal(inventoryKind).optional(),
    hosts: z.array(hostSchema),
  })
  .superRefine((inventory, ctx) => {
    const seen = new Map<string, string>();
    inventory.hosts.forEach((host, i) => {
      const claims: Array<[string, string, PropertyKey[]]> = [
        ['name', host.name, ['hosts', i, 'name']],
        ['providerID', host.providerID ?? `metal://${host.name}`, ['hosts', i, 'providerID']],
        ...host.addresses.map((a, j): [string, string, PropertyKey[]] => [
          'address',
          a,
          ['hosts', i, 'addresses', j],
        ]),
        ...(host.mac ? [['mac', host.mac, ['hosts', i, 'mac']] as [string, string, PropertyKey[]]] : []),
      ];
      for (const [what, value, path] of claims) {
        const owner = seen.get(`${what}=${value}`);
        if (owner !== undefined && owner !== host.name) {
          ctx.addIssue({
            code: 'custom',
            path,
            message: `${what} ${value} is also claimed by host ${owner}`,
          });
        } else if (owner !== undefined) {
          ctx.addIssue({ code: 'custom', path, message: `duplicate ${what} ${value}` });
        }
        seen.set(`${what}=${value}`, host.name);
      }
    });
  });

/** One host of the inventory. */
export type MetalHost = z.output<typeof hostSchema> & { providerID: string };

/** A validated inventory with lookups by name, providerID and address. */
export class MetalInventory {
  readonly hosts: readonly MetalHost[];
  readonly #byName = new Map<string, MetalHost>();
  readonly #byProviderID = new Map<string, MetalHost>();
  readonly #byAddress = new Map<string, MetalHost>();

  constructor(hosts: MetalHost[]) {
    this.hosts = hosts;
    for (const host of hosts) {
      this.#byName.set(host.name, host);
      this.#byProviderID.set(host.providerID, host);
      for (const address of host.addresses) this.#byAddress.set(address, host);
    }
  }

  /** The host a node names by providerID (`metal://…`) or, lacking one, by node name. */
  lookup(providerIDOrName: string): MetalHost | undefined {
    return this.#byProviderID.get(providerIDOrName) ?? this.#byName.get(providerIDOrName);
  }

  /** The host with this address (IP or DNS name), e.g. the source address of a bootstrap request. */
  findByAddress(address: string): MetalHost | undefined {
    return this.#byAddress.get(address);
  }
}

/** Parses and validates inventory YAML; errors name the source, the field path and what to write. */
export function parseInventory(text: string, source: string): MetalInventory {
  const raw = parseYamlText(text, source);
  if (!isJsonObject(raw)) {
    throw new ConfigError(`${source}: expected a mapping with a "hosts" list`);
  }
  const result = inventorySchema.safeParse(raw);
  if (!result.success) {
    throw new ConfigError(`${source}: ${result.error.issues.map(describeIssue).join('; ')}`);
  }
  return new MetalInventory(
    result.data.hosts.map((host) => ({ ...host, providerID: host.providerID ?? `metal://${host.name}` })),
  );
}

/**
 * There is no inventory in the state store. A typed error of its own because only the `metal` policy
 * needs one: on kops metal, whose machines are enrolled with Host objects, its absence is the normal
 * state (the renewal policy then reads it as "lists no host", src/bootstrap/policies/metal-addresses.ts),
 * whereas a file that is there but unreadable or invalid is a fault for every reader.
 */
export class MissingInventoryError extends ConfigError {}

/** Options of {@link InventoryStore}. */
export interface InventoryStoreOptions {
  /** The cluster's state store, rooted at its configBase. */
  vfs: Vfs;
  /** Path of the inventory under the root (default `metal/inventory.yaml`). */
  path?: string;
  /** How often the store is asked whether the inventory changed (default 5 s). */
  pollIntervalMs?: number;
  /** The clock the poll's age is read from (default monotonic: {@link monotonicMs}). */
  now?: () => number;
  logger?: Logger;
}

/**
 * The current inventory, re-read when its version in the store changes. A missing or invalid
 * inventory is an error for every caller — never the previous content — so a host removed by an edit
 * that also broke the file cannot keep its identity.
 */
export class InventoryStore {
  readonly #vfs: Vfs;
  readonly #path: string;
  readonly #pollIntervalMs: number;
  readonly #now: () => number;
  readonly #logger: Logger;
  #checkedAt = Number.NEGATIVE_INFINITY;
  #state: { version: string | undefined; inventory: MetalInventory | Error } | undefined;
  /**
   * When the newest copy ever read was written, valid or not: an older copy is refused against it
   * whatever the state in use (a read fault or a broken edit since must not let it back).
   */
  #newestModifiedMs: number | undefined;
  #inFlight: Promise<void> | undefined;
  readonly #olderCopies: OlderCopyGuard;

  constructor(options: InventoryStoreOptions) {
    this.#vfs = options.vfs;
    this.#path = options.path ?? inventoryPath;
    this.#pollIntervalMs = options.pollIntervalMs ?? 5_000;
    this.#now = options.now ?? monotonicMs;
    this.#logger = options.logger ?? silentLogger;
    this.#olderCopies = new OlderCopyGuard(this.#vfs.url, this.#now, this.#logger);
  }

  /** The URL of the inventory, for messages. */
  get source(): string {
    return `${this.#vfs.url}/${this.#path}`;
  }

  /**
   * The current inventory; throws ConfigError when it is missing or invalid. It is checked for
   * changes when the last check is older than the poll interval, or than `maxAgeMs` if shorter.
   */
  async current(maxAgeMs = Number.POSITIVE_INFINITY): Promise<MetalInventory> {
    if (!youngerThan(this.#checkedAt, this.#now(), Math.min(this.#pollIntervalMs, maxAgeMs))) {
      this.#inFlight ??= this.#refresh().finally(() => {
        this.#inFlight = undefined;
      });
      await this.#inFlight;
    }
    const inventory = this.#state?.inventory;
    if (!inventory) throw new ConfigError(`${this.source}: not loaded`);
    if (inventory instanceof Error) throw inventory;
    return inventory;
  }

  async #refresh(): Promise<void> {
    const version = await this.#vfs.stat(this.#path);
    this.#checkedAt = this.#now();
    if (this.#state && version !== undefined && version === this.#state.version) return;
    let inventory: MetalInventory | Error;
    let readVersion = version;
    try {
      const object = await this.#vfs.read(this.#path);
      // A lagging replica's older copy would bring back a host an edit removed: whatever is in use
      // (the newer inventory, or the error of a fault or a broken edit since) stays, and the store is
      // asked again at the next poll.
      try {
        this.#olderCopies.check(this.#path, { modifiedMs: this.#newestModifiedMs }, object);
      } catch (err) {
        this.#logger.warn(
          { source: this.source, err: (err as Error).message },
          'keeping the newer metal inventory',
        );
        return;
      }
      readVersion = object.version;
      if (object.modifiedMs !== undefined)
        this.#newestModifiedMs = Math.max(object.modifiedMs, this.#newestModifiedMs ?? object.modifiedMs);
      inventory = parseInventory(object.data.toString('utf8'), this.source);
      this.#logger.info({ source: this.source, hosts: inventory.hosts.length }, 'loaded the metal inventory');
    } catch (err) {
      inventory =
        err instanceof NotFoundError
          ? new MissingInventoryError(
              `no metal inventory at ${this.source}: write one listing every host and its instance group (see docs/clouds.md#metal)`,
              { cause: err },
            )
          : (err as Error);
      this.#logger.error(
        { source: this.source, err: (err as Error).message },
        'the metal inventory is unusable',
      );
    }
    this.#state = { version: readVersion, inventory };
  }
}
