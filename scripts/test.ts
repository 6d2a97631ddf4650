/**
 * Test entry point: fetches the real tools the tests compare against, then runs every `*.test.ts`
 * under src/, bench/ and deploy/ with node:test. Extra arguments go to `node --test` (e.g. one file to run).
 * Ends with a plain "N passed, N failed" line read from the TAP record of the run.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { ensureAllTools } from '../src/testing/tools.ts';

ensureAllTools(['kubectl', 'promtool', 'cfssl']);
mkdirSync('.tools', { recursive: true });
// One record per run: two runs at once (a whole suite beside one file) must not count each other's.
const tapFile = `.tools/test-run-${process.pid}.tap`;
const extra = process.argv.slice(2);
const files = extra.some((a) => !a.startsWith('-'))
  ? []
  : ['src/**/*.test.ts', 'bench/**/*.test.ts', 'deploy/**/*.test.ts'];
// The connection-limit tests hold thousands of real sockets: lift the soft open-file limit to the
// hard one (a common default is 1024 soft, far more hard) before Node starts.
const result = spawnSync(
  '/bin/sh',
  [
    '-c',
    'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@"',
    'sh',
    process.execPath,
    '--test',
    // Three files at once on two cores: many tests wait on timers and sockets (idle timeouts, silent
    // dependencies, child processes), so a third file fills the waits (530 s → 385 s of test phase).
    '--test-concurrency=3',
    '--test-timeout=120000',
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    '--test-reporter=tap',
    `--test-reporter-destination=${tapFile}`,
    ...extra,
    ...files,
  ],
  {
    stdio: 'inherit',
    // V8's compiled code of every module, kept across processes (keyed by each file's content): the
    // suite starts a process per test file and the CLI tests start hundreds more, each compiling the
    // same modules again; with the cache they start with about a fifth less CPU.
    env: { NODE_COMPILE_CACHE: resolve('.tools/compile-cache'), ...process.env },
  },
);
const tap = readFileSync(tapFile, 'utf8');
rmSync(tapFile, { force: true });
const count = (name: string) => Number(new RegExp(`^# ${name} (\\d+)$`, 'm').exec(tap)?.[1] ?? 0);
process.stdout.write(`\n${count('pass')} passed, ${count('fail') + count('cancelled')} failed\n`);
process.exitCode = result.status ?? 1;
