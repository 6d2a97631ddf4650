/**
 * The key that signs the NodeController's managed-labels annotation (src/nodelabels/signed-managed-labels.ts):
 * 32 random bytes in a Secret of the controller's namespace that only the controller (and cluster
 * admins) can read; no kubelet can. The first leader to find no key makes it (see
 * {@link loadLabelsKey}). It is read once per leadership term and kept in memory, so a reconcile makes
 * no call for it. Replacing the Secret with an empty one (the deployment's) rotates the key at the
 * next term, at the cost of one annotation rewrite per node (docs/labels.md).
 */
import { randomBytes } from 'node:crypto';
import { InvalidInputError, UnavailableError } from '../../errors.ts';
import { type KubeHttps, kubeAnswerError, kubeJson } from '../../kube/kube-https.ts';
import { labelsKeyBytes } from '../../nodelabels/signed-managed-labels.ts';
import { Backoff } from '../../runtime/backoff.ts';
import { type Clock, sleep, systemClock } from '../../runtime/clock.ts';

/** The Secret's name (granted by name in deploy/kubernetes/kops-controller.yaml). */
export const labelsKeySecretName = 'kops-controller-labels-key';

/** The Secret's data field holding the key. */
export const labelsKeyField = 'key';

/** The key, and whether this call created its Secret. */
export interface LoadedLabelsKey {
  key: Buffer;
  created: boolean;
}

interface SecretBody {
  metadata?: { resourceVersion?: string };
  data?: Record<string, string>;
}

/** The Secret object holding `key`; `resourceVersion` when it fills the deployment's empty one. */
export function labelsKeySecret(namespace: string, key: Uint8Array, resourceVersion?: string): object {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: labelsKeySecretName,
      namespace,
      ...(resourceVersion === undefined ? {} : { resourceVersion }),
      labels: { 'k8s-app': 'kops-controller' },
      annotations: {
        'kops.k8s.io/purpose':
          'signs the kops.k8s.io/managed-labels annotation of Nodes; replaced by an empty Secret, the next ' +
          'leader makes another key, and every Node annotation is then rewritten once, pruning nothing',
      },
    },
    type: 'Opaque',
    immutable: true,
    data: { [labelsKeyField]: Buffer.from(key).toString('base64') },
  };
}

/** The key a Secret holds; undefined when it holds none yet (the deployment's empty Secret). */
function keyOf(secret: SecretBody, where: string): Buffer | undefined {
  const encoded = secret.data?.[labelsKeyField];
  if (encoded === undefined) return undefined;
  const key = Buffer.from(encoded, 'base64');
  if (key.length < labelsKeyBytes) {
    throw new InvalidInputError(
      `Secret ${where} holds no usable key (data.${labelsKeyField} must be at least ${labelsKeyBytes} bytes); ` +
        'replace it with an empty Secret and the leader makes another',
    );
  }
  return key;
}

/**
 * Reads the key Secret of `namespace`, making the key when there is none: into the empty Secret the
 * deployment ships (deploy/kubernetes/kops-controller.yaml grants only `get` and `update` of it, by
 * name, so the controller needs no `create` on Secrets, which RBAC could not narrow to this one), or
 * as a new Secret where there is none and the controller may create it. A leader that loses the race
 * to another (409) reads the winner's key. Failures are typed errors (a 403 names the missing grant);
 * `signal` aborts the calls.
 */
export async function loadLabelsKey(
  call: KubeHttps,
  namespace: string,
  signal: AbortSignal,
  random: (bytes: number) => Buffer = randomBytes,
): Promise<LoadedLabelsKey> {
  const collection = `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets`;
  const path = `${collection}/${labelsKeySecretName}`;
  const where = `${namespace}/${labelsKeySecretName}`;
  const read = async (): Promise<SecretBody | undefined> => {
    const action = `read secret ${where}`;
    const answer = await call({ action, method: 'GET', path, signal });
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw kubeAnswerError(answer, action);
    return kubeJson<SecretBody>(answer, action);
  };
  const existing = await read();
  const held = existing && keyOf(existing, where);
  if (held) return { key: held, created: false };
  const key = random(labelsKeyBytes);
  const write = existing
    ? { action: `fill secret ${where}`, method: 'PUT' as const, path }
    : { action: `create secret ${where}`, method: 'POST' as const, path: collection };
  const answer = await call({
    ...write,
    body: JSON.stringify(labelsKeySecret(namespace, key, existing?.metadata?.resourceVersion)),
    signal,
  });
  if (answer.status === 200 || answer.status === 201) return { key, created: true };
  if (answer.status !== 409) throw kubeAnswerError(answer, write.action);
  // Another leader made it between the read and the write: use its key.
  const theirs = await read();
  const winner = theirs && keyOf(theirs, where);
  if (!winner) throw new UnavailableError(`${write.action}: another writer won, yet reading it found no key`);
  return { key: winner, created: false };
}

/** Options of a {@link TermLabelsKey}. */
export interface TermLabelsKeyOptions {
  /** One attempt at the key (normally {@link loadLabelsKey}). */
  load: (signal: AbortSignal) => Promise<LoadedLabelsKey>;
  /** Delays between failed attempts, in ms. */
  backoff: { initialMs: number; maxMs: number };
  /** Ends the attempts (the leadership term ending). */
  signal: AbortSignal;
  /** After an attempt failed, with the delay before the next. */
  onFailure(err: unknown, retryInMs: number): void;
  /** Once the key is held; `failures`: how many attempts failed before. */
  onLoaded(loaded: LoadedLabelsKey, failures: number): void;
  clock?: Clock;
  random?: () => number;
}

/**
 * The key for one leadership term: read (or created) once as the term starts, and retried with
 * backoff until it is held if that fails. Reconciles wait for the first attempt only; after a failure
 * they go on without a key (the NodeController then prunes nothing from node data) until a later
 * attempt succeeds.
 */
export class TermLabelsKey {
  #key: Buffer | undefined;
  readonly #first: Promise<void>;
  /** Settles when the attempts have ended: the key held, or the term over. */
  readonly done: Promise<void>;

  constructor(options: TermLabelsKeyOptions) {
    let settleFirst = () => {};
    this.#first = new Promise((resolve) => {
      settleFirst = resolve;
    });
    this.done = this.#run(options, settleFirst);
  }

  /** The key once the first attempt has settled; undefined while none could be read. */
  async ready(): Promise<Buffer | undefined> {
    await this.#first;
    return this.#key;
  }

  /** The key if it is held now. */
  get current(): Buffer | undefined {
    return this.#key;
  }

  async #run(options: TermLabelsKeyOptions, settleFirst: () => void): Promise<void> {
    const { signal } = options;
    const clock = options.clock ?? systemClock;
    const backoff = new Backoff({ ...options.backoff, random: options.random ?? Math.random });
    try {
      while (!signal.aborted) {
        try {
          const loaded = await options.load(signal);
          this.#key = loaded.key;
          settleFirst();
          options.onLoaded(loaded, backoff.failures);
          return;
        } catch (err) {
          if (signal.aborted) return;
          const delay = backoff.next();
          options.onFailure(err, delay);
          settleFirst();
          await sleep(clock, delay, signal);
        }
      }
    } finally {
      settleFirst();
    }
  }
}
