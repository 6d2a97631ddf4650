/** Test helper: make the simulated API server's watches lag, as a real one under a join storm does. */
import type { SimApiServer } from '../sim/apiserver/index.ts';

/**
 * Makes the watches `sim` opens from now on deliver each change `lagMs` late (the simulator's own
 * watches deliver in the same turn, so no grace for a lagging watch would ever matter); returns the
 * function that stops lagging the watches opened after it.
 */
export function lagWatches(sim: SimApiServer, lagMs: number): () => void {
  const store = sim.store;
  const subscribe = store.subscribe;
  store.subscribe = (listener, resource) => {
    const held = new Set<NodeJS.Timeout>();
    const unsubscribe = subscribe.call(
      store,
      (event) => {
        const timer = setTimeout(() => {
          held.delete(timer);
          listener(event);
        }, lagMs);
        held.add(timer);
      },
      resource,
    );
    return () => {
      for (const timer of held) clearTimeout(timer);
      held.clear();
      unsubscribe();
    };
  };
  return () => {
    store.subscribe = subscribe;
  };
}
