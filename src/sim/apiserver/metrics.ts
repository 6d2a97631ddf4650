/**
 * The simulated API server's own `/metrics`, in the Prometheus text format a real kube-apiserver
 * serves: `apiserver_request_total` with the apiserver's labels (verb in capitals, resource, scope,
 * code, ...) and `apiserver_storage_objects` per resource, so `kubectl get --raw /metrics` and
 * dashboards built on those names work against the dev cluster.
 */
import { Counter, Gauge, Registry } from 'prom-client';
import { resourceTypes } from './resources.ts';
import type { ResourceRoute } from './routes.ts';
import type { SimStore } from './store.ts';

/** The apiserver's verb label: `LIST` and `WATCH` apart from `GET`, `APPLY` for server-side apply. */
function verbLabel(method: string, verb: string, contentType: string): string {
  if (verb === 'list' || verb === 'watch') return verb.toUpperCase();
  if (method === 'PATCH' && contentType.startsWith('application/apply-patch')) return 'APPLY';
  return method;
}

function scopeOf(route: ResourceRoute): string {
  if (route.name !== undefined) return 'resource';
  return route.namespace !== undefined ? 'namespace' : 'cluster';
}

/** What one answered request is counted under. */
export interface RequestLabels {
  verb: string;
  group: string;
  version: string;
  resource: string;
  subresource: string;
  scope: string;
  dryRun: string;
}

/** Labels for a resource request. */
export function resourceLabels(
  method: string,
  route: ResourceRoute,
  verb: string,
  contentType: string,
  dryRun: boolean,
): RequestLabels {
  return {
    verb: verbLabel(method, verb, contentType),
    group: route.type.group,
    version: route.type.version,
    resource: route.type.plural,
    subresource: route.subresource ?? '',
    scope: scopeOf(route),
    dryRun: dryRun ? 'All' : '',
  };
}

/** Labels for a non-resource path (discovery, health, `/metrics`): the path is the subresource, as in the apiserver. */
export function nonResourceLabels(method: string, path: string): RequestLabels {
  return { verb: method, group: '', version: '', resource: '', subresource: path, scope: '', dryRun: '' };
}

/** The registry behind `/metrics`. */
export class ApiServerMetrics {
  readonly registry = new Registry();
  readonly #requests: Counter<string>;

  constructor(store: SimStore) {
    this.#requests = new Counter({
      name: 'apiserver_request_total',
      help: 'Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.',
      labelNames: [
        'code',
        'component',
        'dry_run',
        'group',
        'resource',
        'scope',
        'subresource',
        'verb',
        'version',
      ],
      registers: [this.registry],
    });
    new Gauge({
      name: 'apiserver_storage_objects',
      help: 'Number of stored objects at the time of last check split by kind.',
      labelNames: ['resource'],
      registers: [this.registry],
      collect() {
        for (const type of resourceTypes) {
          if (type.reviewOnly) continue;
          const resource = type.group ? `${type.plural}.${type.group}` : type.plural;
          this.set({ resource }, store.snapshot(type).length);
        }
      },
    });
  }

  /** Counts one answered request. */
  record(labels: RequestLabels, code: number): void {
    this.#requests.inc({
      code: String(code),
      component: 'apiserver',
      dry_run: labels.dryRun,
      group: labels.group,
      resource: labels.resource,
      scope: labels.scope,
      subresource: labels.subresource,
      verb: labels.verb,
      version: labels.version,
    });
  }

  /** The exposition text and its content type. */
  async exposition(): Promise<{ text: string; contentType: string }> {
    return { text: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}
