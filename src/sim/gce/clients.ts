/**
 * The product's GCE clients wired to a running GCE simulator through google-auth-library: what the
 * dev cluster and the tests use to talk to the simulator as production talks to Google.
 */
import { OAuth2Client } from 'google-auth-library';
import { ComputeClient } from '../../cloud/gce/compute.ts';
import type { GceSimulator } from './simulator.ts';

/**
 * An OAuth2 client that refreshes its access token at the simulator's token endpoint, the same code
 * path production uses with real credentials.
 */
export function simulatorAuth(sim: GceSimulator): OAuth2Client {
  const auth = new OAuth2Client({
    clientId: 'sim-client',
    clientSecret: 'sim-secret',
    endpoints: { oauth2TokenUrl: sim.tokenUri },
  });
  auth.setCredentials({ refresh_token: sim.refreshToken });
  return auth;
}

/** A compute client for the simulator's default project; one quick retry keeps failure tests fast. */
export function simulatorCompute(sim: GceSimulator, project = sim.world.defaultProject): ComputeClient {
  return new ComputeClient({
    project,
    auth: simulatorAuth(sim),
    endpoint: sim.endpoint,
    retries: 1,
    retryDelayMs: 5,
  });
}
