/**
 * What a valid config asks for that this implementation accepts but does not do, as one line each
 * for the log at start-up. Nothing is in that state any more: every such setting is refused when the
 * configuration loads (schema.ts, `unactionable`), so this list is empty.
 */
import type { Config } from './schema.ts';

export function configWarnings(_config: Config): string[] {
  return [];
}
