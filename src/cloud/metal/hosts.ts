/**
 * kops metal's `Host` resource (`kops.k8s.io/v1alpha2`, namespace `kops-system`, one object per
 * machine, named after its host name): the operator registers a machine's public key and instance
 * group there (`kops toolbox enroll`, or `kops-controller host add`), and the `pki-tpm` policy reads
 * it to check the machine's signed proof. The API server is the authority, as the inventory file is
 * for the `metal` policy; whoever may write Hosts decides which machines can join.
 */
import { createPublicKey } from 'node:crypto';
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { isDnsSubdomain } from '../../dns-name.ts';
import { InvalidInputError } from '../../errors.ts';
import { fromApiException, unlessNotFound } from '../../kube/api-errors.ts';

export const hostGroup = 'kops.k8s.io';
export const hostVersion = 'v1alpha2';
export const hostPlural = 'hosts';
export const hostKind = 'Host';
/** Where kops keeps Hosts. */
export const hostNamespace = 'kops-system';

/** A Host as the API stores it (the fields kops defines). */
export interface HostObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; creationTimestamp?: string; uid?: string };
  spec?: { publicKey?: string; instanceGroup?: string; podCIDRs?: string[] };
}

/** What a new Host says. */
export interface HostSpec {
  name: string;
  publicKey: string;
  instanceGroup: string;
  podCIDRs?: string[];
}

/** Reads the Hosts; the `pki-tpm` policy needs only this. */
export interface HostLookup {
  /** The Host named `name`, or undefined when there is none; API failures are typed errors. */
  get(name: string): Promise<HostObject | undefined>;
}

/**
 * Checks a PEM public key the way kops' verifier will use it: one `PUBLIC KEY`, and ECDSA, since kops
 * verifies `x-pki-tpm` signatures with ECDSA only. Returns the key trimmed as stored.
 */
export function checkHostPublicKey(pem: string, source = 'the public key'): string {
  let type: string | undefined;
  try {
    type = createPublicKey({ key: pem, format: 'pem' }).asymmetricKeyType;
  } catch (err) {
    throw new InvalidInputError(`${source} is not a PEM public key (${(err as Error).message})`, {
      cause: err,
    });
  }
  if (type !== 'ec') {
    throw new InvalidInputError(
      `${source} is a ${type ?? 'unknown'} key; kops verifies x-pki-tpm proofs with ECDSA keys only (openssl ecparam -name prime256v1 -genkey)`,
    );
  }
  return `${pem.trim()}\n`;
}

/**
 * The instance group a Host enrols its machine in, or why it enrols none. kops' verifier
 * (pkg/bootstrap/pkibootstrap/pkiverifier) refuses a Host without `spec.publicKey` or
 * `spec.instanceGroup`, so such a Host vouches for no machine — at its first join, and at a renewal
 * alike. Read as the API server sent it: the CRD's schema makes both strings, a broken answer may not.
 * (Whether the key verifies a proof is the `pki-tpm` policy's check; a renewal does not use it.)
 */
export function hostEnrolment(host: HostObject): { instanceGroup: string } | { problem: string } {
  const where = `host ${hostNamespace}/${host.metadata.name}`;
  const { publicKey, instanceGroup } = (host.spec ?? {}) as { publicKey?: unknown; instanceGroup?: unknown };
  if (typeof publicKey !== 'string' || !publicKey) return { problem: `${where} has no spec.publicKey` };
  if (typeof instanceGroup !== 'string' || !instanceGroup) {
    return { problem: `${where} has no spec.instanceGroup` };
  }
  if (!isDnsSubdomain(instanceGroup)) {
    return { problem: `${where}: spec.instanceGroup ${JSON.stringify(instanceGroup)} is not a valid name` };
  }
  return { instanceGroup };
}

/** Checks what `host add` is given before anything is written. */
export function newHostObject(spec: HostSpec): HostObject {
  if (!isDnsSubdomain(spec.name)) {
    throw new InvalidInputError(
      `host name ${JSON.stringify(spec.name)} is not a lower-case DNS name (the node name)`,
    );
  }
  if (!isDnsSubdomain(spec.instanceGroup)) {
    throw new InvalidInputError(`instance group ${JSON.stringify(spec.instanceGroup)} is not a valid name`);
  }
  return {
    apiVersion: `${hostGroup}/${hostVersion}`,
    kind: hostKind,
    metadata: { name: spec.name, namespace: hostNamespace },
    spec: {
      publicKey: checkHostPublicKey(spec.publicKey),
      instanceGroup: spec.instanceGroup,
      ...(spec.podCIDRs?.length ? { podCIDRs: spec.podCIDRs } : {}),
    },
  };
}

/** The Hosts of a cluster, through the API server (JSON: a CRD has no protobuf form). */
export class HostRegistry implements HostLookup {
  readonly #api: CustomObjectsApi;
  readonly #namespace: string;

  constructor(kubeConfig: KubeConfig, namespace = hostNamespace) {
    this.#api = kubeConfig.makeApiClient(CustomObjectsApi);
    this.#namespace = namespace;
  }

  #where() {
    return { group: hostGroup, version: hostVersion, namespace: this.#namespace, plural: hostPlural };
  }

  async get(name: string): Promise<HostObject | undefined> {
    return unlessNotFound(
      async () => (await this.#api.getNamespacedCustomObject({ ...this.#where(), name })) as HostObject,
      `read host ${this.#namespace}/${name}`,
    );
  }

  async list(): Promise<HostObject[]> {
    try {
      const list = (await this.#api.listNamespacedCustomObject(this.#where())) as { items?: HostObject[] };
      return list.items ?? [];
    } catch (err) {
      throw fromApiException(err, `list hosts in ${this.#namespace}`);
    }
  }

  async create(host: HostObject): Promise<HostObject> {
    try {
      return (await this.#api.createNamespacedCustomObject({ ...this.#where(), body: host })) as HostObject;
    } catch (err) {
      throw fromApiException(err, `create host ${this.#namespace}/${host.metadata.name}`);
    }
  }

  async delete(name: string): Promise<void> {
    try {
      await this.#api.deleteNamespacedCustomObject({ ...this.#where(), name });
    } catch (err) {
      throw fromApiException(err, `delete host ${this.#namespace}/${name}`);
    }
  }
}
