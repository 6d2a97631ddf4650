/**
 * Loading a kubeconfig the way kubectl does, minus client-node's silent fallback to
 * http://localhost:8080: `--kubeconfig`, else $KUBECONFIG (a path list, merged), else ~/.kube/config,
 * else the in-cluster service account. When none exists the caller gets a ConfigError saying so.
 */
import { existsSync, readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { CertificatesV1Api, CoordinationV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { ConfigError } from '../errors.ts';
import { proxyFor } from '../net/egress-proxy.ts';
import { reuseConnections } from './connection-reuse.ts';

/** Where the kubelet mounts a pod's service-account token, CA and namespace. */
export const serviceAccountDir = '/var/run/secrets/kubernetes.io/serviceaccount';

/** Options of {@link loadKubeConfig}; the last three exist so tests need not touch the real machine. */
export interface KubeConfigOptions {
  /** An explicit kubeconfig file (`--kubeconfig`); overrides every other source. */
  kubeconfig?: string;
  /** The context to use (`--context`); defaults to the file's current-context. */
  context?: string;
  env?: NodeJS.ProcessEnv;
  homeDir?: string;
  serviceAccountDir?: string;
}

/** A loaded kubeconfig plus where it came from, for the startup log line. */
export interface LoadedKubeConfig {
  kubeConfig: KubeConfig;
  source: string;
}

function loadFile(kc: KubeConfig, path: string): void {
  if (!existsSync(path)) throw new ConfigError(`kubeconfig ${path} does not exist; pass --kubeconfig FILE`);
  try {
    kc.loadFromFile(path);
  } catch (err) {
    throw new ConfigError(`kubeconfig ${path} is not valid: ${(err as Error).message}`, { cause: err });
  }
}

/** Adds what `more` defines and `kc` does not: like kubectl, the first file to define a name wins. */
function mergeFirstWins(kc: KubeConfig, more: KubeConfig): void {
  const has = (list: readonly { name: string }[], name: string) => list.some((item) => item.name === name);
  for (const cluster of more.getClusters()) if (!has(kc.getClusters(), cluster.name)) kc.addCluster(cluster);
  for (const user of more.getUsers()) if (!has(kc.getUsers(), user.name)) kc.addUser(user);
  for (const context of more.getContexts()) if (!has(kc.getContexts(), context.name)) kc.addContext(context);
  if (!kc.getCurrentContext()) kc.setCurrentContext(more.getCurrentContext());
}

function loadInCluster(kc: KubeConfig, dir: string, env: NodeJS.ProcessEnv): void {
  const host = env['KUBERNETES_SERVICE_HOST'];
  const port = env['KUBERNETES_SERVICE_PORT'] ?? '443';
  if (!host) {
    throw new ConfigError(
      `found a service-account token in ${dir} but KUBERNETES_SERVICE_HOST is not set; ` +
        'run inside a pod or pass --kubeconfig FILE',
    );
  }
  const namespacePath = join(dir, 'namespace');
  kc.loadFromOptions({
    clusters: [
      {
        name: 'in-cluster',
        server: `https://${isIPv6(host) ? `[${host}]` : host}:${port}`,
        caFile: join(dir, 'ca.crt'),
        skipTLSVerify: false,
      },
    ],
    // The tokenFile provider re-reads the token, so projected tokens that the kubelet rotates keep working.
    users: [
      { name: 'in-cluster', authProvider: { name: 'tokenFile', config: { tokenFile: join(dir, 'token') } } },
    ],
    contexts: [
      {
        name: 'in-cluster',
        cluster: 'in-cluster',
        user: 'in-cluster',
        namespace: existsSync(namespacePath) ? readFileSync(namespacePath, 'utf8').trim() : undefined,
      },
    ],
    currentContext: 'in-cluster',
  });
}

/** Loads the kubeconfig from the first source that exists; throws ConfigError when none does. */
export function loadKubeConfig(options: KubeConfigOptions = {}): LoadedKubeConfig {
  const env = options.env ?? process.env;
  const kc = new KubeConfig();
  let source: string;
  const listed = (env['KUBECONFIG'] ?? '').split(delimiter).filter(Boolean);
  // As kubectl: files in $KUBECONFIG that do not exist are skipped, but not all of them.
  const fromEnv = listed.filter((path) => existsSync(path));
  if (listed.length > 0 && fromEnv.length === 0) {
    throw new ConfigError(
      `none of the files in $KUBECONFIG exists (${listed.join(delimiter)}); fix $KUBECONFIG`,
    );
  }
  const homeConfig = join(options.homeDir ?? homedir(), '.kube', 'config');
  const saDir = options.serviceAccountDir ?? serviceAccountDir;
  if (options.kubeconfig) {
    loadFile(kc, options.kubeconfig);
    source = options.kubeconfig;
  } else if (fromEnv.length > 0) {
    const [first, ...rest] = fromEnv as [string, ...string[]];
    loadFile(kc, first);
    for (const path of rest) {
      const more = new KubeConfig();
      loadFile(more, path);
      mergeFirstWins(kc, more);
    }
    source = `$KUBECONFIG (${fromEnv.join(delimiter)})`;
  } else if (existsSync(homeConfig)) {
    loadFile(kc, homeConfig);
    source = homeConfig;
  } else if (existsSync(join(saDir, 'token'))) {
    loadInCluster(kc, saDir, env);
    source = `in-cluster service account (${saDir})`;
  } else {
    throw new ConfigError(
      `no Kubernetes configuration found: no --kubeconfig, $KUBECONFIG is unset, ${homeConfig} does not exist ` +
        `and ${saDir}/token is absent (not running in a pod); pass --kubeconfig FILE`,
    );
  }
  if (options.context) selectContext(kc, options.context, source);
  if (!kc.getCurrentContext()) {
    const names = kc.getContexts().map((c) => c.name);
    throw new ConfigError(
      names.length === 0
        ? `kubeconfig ${source} defines no context; pass another --kubeconfig, or add one with \`kubectl config set-context\``
        : `kubeconfig ${source} sets no current-context; pass --context NAME (its contexts: ${names.join(', ')}) ` +
            'or select one with `kubectl config use-context NAME`',
    );
  }
  if (!kc.getCurrentCluster()) {
    throw new ConfigError(
      `kubeconfig ${source} has no usable current context (current-context "${kc.getCurrentContext()}"); ` +
        'set current-context or pass --context NAME',
    );
  }
  routeThroughEgressProxy(kc, env);
  // Every API client made from it then reuses pooled connections (see connection-reuse.ts).
  return { kubeConfig: reuseConnections(kc), source };
}

/**
 * As client-go: a cluster's `proxy-url` wins; else the egress proxy the environment names for its
 * server (src/net/egress-proxy.ts, Go's ProxyFromEnvironment: kops' NO_PROXY lists the API server's
 * names and service address, which it then reaches directly) becomes its proxy, so that every client
 * of the kubeconfig — client-node's and src/kube/kube-https.ts — goes the same way.
 */
function routeThroughEgressProxy(kc: KubeConfig, env: NodeJS.ProcessEnv): void {
  kc.clusters = kc.clusters.map((cluster) => {
    if (cluster.proxyUrl || !cluster.server) return cluster;
    const proxy = proxyFor(new URL(cluster.server), env);
    return proxy ? { ...cluster, proxyUrl: proxy.href } : cluster;
  });
}

function selectContext(kc: KubeConfig, context: string, source: string): void {
  const names = kc.getContexts().map((c) => c.name);
  if (!names.includes(context)) {
    const known = names.length > 0 ? names.join(', ') : 'none';
    throw new ConfigError(`context "${context}" is not in kubeconfig ${source}; its contexts: ${known}`);
  }
  kc.setCurrentContext(context);
}

/** The API clients the controller uses, all bound to one kubeconfig. */
export interface KubeClients {
  kubeConfig: KubeConfig;
  core: CoreV1Api;
  coordination: CoordinationV1Api;
  certificates: CertificatesV1Api;
}

/** Makes the typed API clients for the kubeconfig's current context. */
export function makeClients(kubeConfig: KubeConfig): KubeClients {
  return {
    kubeConfig,
    core: kubeConfig.makeApiClient(CoreV1Api),
    coordination: kubeConfig.makeApiClient(CoordinationV1Api),
    certificates: kubeConfig.makeApiClient(CertificatesV1Api),
  };
}
