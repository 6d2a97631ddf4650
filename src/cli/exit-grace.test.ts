import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { exitGraceMs } from './exit-grace.ts';

/** A process that calls exitAfterGrace(7, …) and then keeps a listening socket open, or not. */
function processThat(holdsASocket: boolean): Promise<{ code: number | null; ms: number; stdout: string }> {
  const script = `
    import { createServer } from 'node:net';
    import { exitAfterGrace } from ${JSON.stringify(new URL('./exit-grace.ts', import.meta.url).href)};
    if (${holdsASocket}) createServer().listen(0, '127.0.0.1');
    exitAfterGrace(7, (handles) => console.log(JSON.stringify(handles)));
  `;
  const started = Date.now();
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  return new Promise((resolve) =>
    child.on('exit', (code) => resolve({ code, ms: Date.now() - started, stdout })),
  );
}

test('a process kept alive by a socket after its answer exits with its code after the grace, naming what held it', async () => {
  const { code, ms, stdout } = await processThat(true);
  assert.equal(code, 7);
  assert.ok(ms >= exitGraceMs, `exited after ${ms} ms`);
  assert.ok((JSON.parse(stdout) as string[]).includes('TCPServerWrap'), stdout);
});

test('a process with nothing left running ends at once, without the grace', async () => {
  const { code, stdout } = await processThat(false);
  assert.equal(code, 0, 'its own code, not the grace timer’s');
  assert.equal(stdout, '', 'the grace timer never fired');
});
