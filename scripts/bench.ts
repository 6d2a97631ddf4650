/**
 * Runs every benchmark under bench/ one after the other (each prints its own figures and ratios), or
 * only those named: `npm run bench -- issue identify`. bench/informer.ts runs inside bench/apiserver.ts.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';

/**
 * Benchmarks another one already runs and prints, and the label storms' shared runner: run on their
 * own only when named.
 */
const partOf: Record<string, string> = { informer: 'apiserver', 'label-storm': 'label-storm-<cloud>' };

const wanted = process.argv.slice(2);
const benches = readdirSync(new URL('../bench', import.meta.url))
  .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
  .map((f) => f.slice(0, -3))
  .filter((name) => (wanted.length === 0 ? !partOf[name] : wanted.includes(name)))
  .sort();
let failed = 0;
for (const name of benches) {
  process.stdout.write(`\n=== bench/${name}.ts ===\n`);
  const run = spawnSync(process.execPath, [`bench/${name}.ts`], { stdio: 'inherit' });
  if (run.status !== 0) failed++;
}
process.exitCode = failed > 0 ? 1 : 0;
