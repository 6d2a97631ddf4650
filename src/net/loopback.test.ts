import assert from 'node:assert/strict';
import { Agent, createServer, get } from 'node:http';
import { test } from 'node:test';
import { listenOnLoopback } from './loopback.ts';

test('listens on 127.0.0.1 only, and close ends kept-alive connections', async () => {
  const server = createServer((_req, res) => res.end('ok'));
  const listener = await listenOnLoopback(server);
  assert.match(listener.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  const agent = new Agent({ keepAlive: true });
  const answer = await new Promise<string>((resolve, reject) => {
    get(listener.url, { agent }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c));
      res.on('end', () => resolve(text));
    }).on('error', reject);
  });
  assert.equal(answer, 'ok');
  await listener.close(); // resolves although the agent still holds a kept-alive socket
  assert.equal(server.listening, false);
  agent.destroy();
});

test('a taken port is an error, not a hang', async () => {
  const first = await listenOnLoopback(createServer());
  const port = Number(new URL(first.url).port);
  await assert.rejects(listenOnLoopback(createServer(), port), /EADDRINUSE/);
  await first.close();
});
