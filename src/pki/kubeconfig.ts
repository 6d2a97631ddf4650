/** Kubeconfig files that carry their trust and credentials inline, for statically clustered nodes. */
import { stringify } from 'yaml';
import { InvalidInputError } from '../errors.ts';

/** Where a node keeps the kubelet client key it made itself (`pki sign kubelet`, docs/pki.md step 2). */
export const kubeletClientKeyPathOnNode = '/var/lib/kubelet/pki/kubelet-client.key';

/** What a client kubeconfig embeds. */
export interface ClientKubeconfig {
  /** API server URL; must be https. */
  server: string;
  /** The CA bundle the server certificate must chain to (never the system CAs). */
  caBundlePem: string;
  certificatePem: string;
  /** The private key, embedded, or its path on the machine that will use the kubeconfig. */
  key: { pem: string } | { path: string };
  /** The user entry's name, e.g. `system:node:<node>`. */
  user: string;
  clusterName?: string;
}

/** Checks an API server URL: https with a host, no credentials, query or fragment. */
export function validateServerUrl(server: string): string {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new InvalidInputError(`--server "${server}" is not a URL; use e.g. https://api.example.com:6443`);
  }
  if (url.protocol !== 'https:' || !url.hostname || url.username || url.password || url.search || url.hash) {
    throw new InvalidInputError(
      `--server "${server}" must be an https:// URL with a host and nothing after the path`,
    );
  }
  return server;
}

/** Renders a kubeconfig with the CA bundle and the client certificate and key embedded. */
export function renderClientKubeconfig(config: ClientKubeconfig): string {
  const cluster = config.clusterName ?? 'kubernetes';
  const base64 = (text: string) => Buffer.from(text).toString('base64');
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: cluster,
        cluster: {
          server: validateServerUrl(config.server),
          'certificate-authority-data': base64(config.caBundlePem),
        },
      },
    ],
    users: [
      {
        name: config.user,
        user: {
          'client-certificate-data': base64(config.certificatePem),
          ...('pem' in config.key
            ? { 'client-key-data': base64(config.key.pem) }
            : { 'client-key': config.key.path }),
        },
      },
    ],
    contexts: [{ name: `${config.user}@${cluster}`, context: { cluster, user: config.user } }],
    'current-context': `${config.user}@${cluster}`,
  });
}
