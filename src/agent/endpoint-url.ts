/**
 * Where the node's calls go under `--server`. The bootstrap endpoint is a base URL whose path, if it
 * has one, is a prefix (a load balancer that routes `https://lb:3988/kops/…` to the controller):
 * discovery reads `<base>/cluster-info` and the bootstrap API is `<base>/v1/…`. A URL that names the
 * cluster-info document itself (`…/cluster-info`, as `kops-controller dev` prints it, or the API
 * server's `kube-public` ConfigMap) stands for the folder it is in.
 */
import { clusterInfoPath } from '../protocol/cluster-info.ts';

/** The document's name, the last segment of a URL that names it. */
const documentName = clusterInfoPath.slice(1);

/** The base of the endpoint `server` as a folder (its path ends in `/`), without query or fragment. */
export function endpointBase(server: URL): URL {
  const base = new URL(server);
  base.search = '';
  base.hash = '';
  const path = base.pathname;
  if (path.endsWith(`/${documentName}`)) base.pathname = path.slice(0, -documentName.length);
  else if (!path.endsWith('/')) base.pathname = `${path}/`;
  return base;
}

/** `relative` (`cluster-info`, `v1/certificates`) under the base of the endpoint `server`. */
export function endpointUrl(server: URL, relative: string): URL {
  return new URL(relative, endpointBase(server));
}
