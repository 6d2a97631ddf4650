/** Wires the OpenStack pieces for one cluster: Keystone session, Nova client, node identity, cloud groups. */
import { type Logger, silentLogger } from '../../log.ts';
import type { CloudCallRecorder } from '../metrics.ts';
import type { CloudGroups, NodeIdentifier } from '../types.ts';
import { type OpenStackAuthOptions, openstackAuthFromEnv } from './auth.ts';
import { OpenStackCloudGroups } from './cloud-groups.ts';
import { warnIfOpenstackInsecureSkipVerify } from './http.ts';
import { KeystoneSession } from './keystone.ts';
import { OpenStackNodeIdentifier } from './node-identifier.ts';
import { NovaClient } from './nova.ts';

/** What the controller needs to know to talk to OpenStack. */
export interface OpenStackProviderOptions {
  clusterName: string;
  /** Credentials and region; default the `OS_*` environment (openstackAuthFromEnv). */
  auth?: OpenStackAuthOptions;
  logger?: Logger;
  /** Where the clients count their calls (the controller's CloudCallRecorder). */
  cloudCalls?: CloudCallRecorder;
}

/** The OpenStack implementations of the cloud interfaces, and the Nova client the verifier uses. */
export interface OpenStackProvider {
  nova: NovaClient;
  nodeIdentifier: NodeIdentifier;
  cloudGroups: CloudGroups;
  identifiesByNodeName: false;
  close(): void;
}

/**
 * Builds the provider; throws ConfigError when the `OS_*` environment is incomplete. Authenticates
 * lazily, on the first call: a Keystone outage at start-up is a retried fault, not a crash.
 */
export function createOpenStackProvider(options: OpenStackProviderOptions): OpenStackProvider {
  const auth = options.auth ?? openstackAuthFromEnv();
  const calls = options.cloudCalls ? { calls: options.cloudCalls } : {};
  const closed = new AbortController();
  warnIfOpenstackInsecureSkipVerify(options.logger ?? silentLogger);
  const session = new KeystoneSession({ auth, ...calls, signal: closed.signal });
  const nova = new NovaClient({ session, ...calls, signal: closed.signal });
  return {
    nova,
    nodeIdentifier: new OpenStackNodeIdentifier({
      nova,
      clusterName: options.clusterName,
      logger: options.logger ?? silentLogger,
    }),
    cloudGroups: new OpenStackCloudGroups(nova),
    identifiesByNodeName: false,
    close: () => closed.abort(new DOMException('the OpenStack provider was closed', 'AbortError')),
  };
}
