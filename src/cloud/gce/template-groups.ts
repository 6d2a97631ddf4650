/**
 * What kops wrote into instance templates: the instance group and cluster each template belongs to.
 * Templates are immutable, so each is read once and remembered (bounded); only outages are not
 * remembered. Shared by node identity and cloud groups.
 */
import { type Logger, silentLogger } from '../../log.ts';
import { mapConcurrent } from '../concurrency.ts';
import { LruCache } from '../lru.ts';
import { type ComputeClient, metadataValue } from './compute.ts';

/** Template metadata naming the kops instance group (written by kops, immutable with the template). */
export const instanceGroupMetadataKey = 'kops-k8s-io-instance-group-name';
/** Template metadata naming the kops cluster. */
export const clusterNameMetadataKey = 'cluster-name';

/** The kops facts of one template; a field is undefined when the template does not carry it. */
export interface TemplateFacts {
  instanceGroup: string | undefined;
  clusterName: string | undefined;
}

/** A cached reader of template facts. */
export class TemplateGroups {
  readonly #compute: ComputeClient;
  readonly #cache: LruCache<string, TemplateFacts>;
  readonly #concurrency: number;
  readonly #logger: Logger;

  constructor(
    compute: ComputeClient,
    options: { maxEntries?: number; concurrency?: number; logger?: Logger } = {},
  ) {
    this.#compute = compute;
    this.#cache = new LruCache({ maxEntries: options.maxEntries ?? 2_000 });
    this.#concurrency = options.concurrency ?? 16;
    this.#logger = options.logger ?? silentLogger;
  }

  /** The facts of each named global template of our project, or the error reading it. */
  async facts(names: readonly string[]): Promise<Map<string, TemplateFacts | Error>> {
    const out = new Map<string, TemplateFacts | Error>();
    const missing = [...new Set(names)].filter((name) => {
      const cached = this.#cache.get(name);
      if (cached) out.set(name, cached);
      return !cached;
    });
    await mapConcurrent(missing, this.#concurrency, async (name) => {
      try {
        const metadata = (await this.#compute.getInstanceTemplate(name)).properties?.metadata;
        const facts = {
          instanceGroup: metadataValue(metadata, instanceGroupMetadataKey) || undefined,
          clusterName: metadataValue(metadata, clusterNameMetadataKey) || undefined,
        };
        this.#cache.set(name, facts);
        out.set(name, facts);
      } catch (err) {
        this.#logger.debug(
          { template: name, err: (err as Error).message },
          'reading instance template failed',
        );
        out.set(name, err as Error);
      }
    });
    return out;
  }
}
