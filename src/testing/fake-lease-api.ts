/** An in-memory Lease API for leader-election tests that need no API server. */
import { ApiException, type V1Lease } from '@kubernetes/client-node';
import type { LeaseClient } from '../kube/leader-election.ts';
import { settle } from './fake-clock.ts';

const status = (code: number, message: string) =>
  new ApiException(code, message, JSON.stringify({ kind: 'Status', code, message }), {});

/**
 * A faithful in-memory Lease API: resourceVersions, 404 on a missing lease, 409 on a create race or a
 * stale replace, and answers that went through JSON, so MicroTimes come back as strings as they do
 * from client-node.
 */
export class FakeLeaseApi {
  lease: V1Lease | undefined;
  version = 0;
  conflicts = 0;
  writes: V1Lease[] = [];

  clientFor(network: { down?: boolean; hang?: boolean } = {}): LeaseClient {
    const call = async <T>(fn: () => T): Promise<T> => {
      await settle();
      if (network.hang) return new Promise(() => {});
      if (network.down) throw new TypeError('fetch failed');
      return fn();
    };
    const roundTrip = (lease: V1Lease) => JSON.parse(JSON.stringify(lease)) as V1Lease;
    return {
      readNamespacedLease: () =>
        call(() => {
          if (!this.lease) throw status(404, 'leases "l" not found');
          return roundTrip(this.lease);
        }),
      createNamespacedLease: ({ body }) =>
        call(() => {
          if (this.lease) {
            this.conflicts++;
            throw status(409, 'leases "l" already exists');
          }
          return this.#store(body);
        }),
      replaceNamespacedLease: ({ body }) =>
        call(() => {
          if (body.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) {
            this.conflicts++;
            throw status(409, 'the object has been modified');
          }
          return this.#store(body);
        }),
    } as LeaseClient;
  }

  #store(body: V1Lease): V1Lease {
    const stored = JSON.parse(JSON.stringify(body)) as V1Lease;
    stored.metadata = { ...stored.metadata, resourceVersion: String(++this.version) };
    this.lease = stored;
    this.writes.push(stored);
    return JSON.parse(JSON.stringify(stored)) as V1Lease;
  }
}
