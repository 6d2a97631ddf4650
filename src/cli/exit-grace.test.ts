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

test('output a slow reader has not taken yet is waited for, not cut off by the grace', async () => {
  // 4 MiB to a pipe nobody reads for longer than the grace, and a socket that would hold the process.
  const script = `
    import { createServer } from 'node:net';
    import { exitAfterGrace } from ${JSON.stringify(new URL('./exit-grace.ts', import.meta.url).href)};
    createServer().listen(0, '127.0.0.1');
    process.stdout.write('x'.repeat(4 * 1024 * 1024));
    exitAfterGrace(0);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout.pause();
  await new Promise((resolve) => setTimeout(resolve, exitGraceMs + 1_000));
  let received = 0;
  child.stdout.on('data', (chunk: Buffer) => {
    received += chunk.length;
  });
  child.stdout.resume();
  const code = await new Promise((resolve) => child.on('close', resolve));
  assert.equal(code, 0);
  assert.equal(received, 4 * 1024 * 1024, 'every byte printed reached the reader');
});
