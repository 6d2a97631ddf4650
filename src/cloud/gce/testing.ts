/** Test helpers: a compute client wired to a running GCE simulator through google-auth-library. */
import { OAuth2Client } from 'google-auth-library';
import type { GceSimulator } from '../../sim/gce/simulator.ts';
import { ComputeClient } from './compute.ts';

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
