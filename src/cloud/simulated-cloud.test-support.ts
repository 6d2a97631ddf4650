/**
 * The fixture the tests of the callback clouds share (Hetzner, DigitalOcean, Linode; their
 * identifier and policy tests alike): one simulator for the test file with one provider connected to
 * it, closed after the file, and every test starting with no injected faults and no counted calls.
 */
import { after, before, beforeEach } from 'node:test';

/** What the fixture needs of a simulator. */
export interface FixtureSimulator {
  clearFaults(): void;
  clearCalls(): void;
  close(): Promise<void>;
}

/**
 * Starts the simulator before the file's tests and hands it to `connect`, which builds what the
 * tests use on it (assigning the file's own variables) and returns the provider to close after them.
 */
export function useSimulatedCloud<S extends FixtureSimulator>(
  start: () => Promise<S>,
  connect: (sim: S) => { close(): void },
): void {
  let sim: S | undefined;
  let provider: { close(): void } | undefined;
  before(async () => {
    sim = await start();
    provider = connect(sim);
  });
  after(async () => {
    provider?.close();
    await sim?.close();
  });
  beforeEach(() => {
    sim?.clearFaults();
    sim?.clearCalls();
  });
}
