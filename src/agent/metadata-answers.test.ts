/**
 * The metadata services' answers as possibly broken (a metadata proxy, a container runtime's fake
 * IMDS, a service flapping at boot), over real sockets on loopback: every failure is a typed,
 * one-line error the join retries or ends with, never a hang, an internal error, an unbounded read,
 * a followed redirect, or attacker-chosen bytes in the proof header.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { after, test } from 'node:test';
import { fromInstanceMetadata } from '@smithy/credential-provider-imds';
import { readMetadataJson } from '../cloud/metadata-service.ts';
import { KopsError } from '../errors.ts';
import { listenOnLoopback } from '../net/loopback.ts';
import { awsStsProof } from './aws-proof.ts';
import { azureProof } from './azure-proof.ts';
import { hetznerProof } from './hetzner-proof.ts';
import { openstackProof } from './openstack-proof.ts';
import { gceIdentityProof } from './proofs.ts';

const closers: (() => Promise<void>)[] = [];
after(() => Promise.all(closers.map((close) => close())));

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  const listener = await listenOnLoopback(server);
  closers.push(listener.close);
  return { url: listener.url, hits };
}

const kind = (expected: string) => (err: unknown) => {
  assert.ok(err instanceof KopsError, `a KopsError, not ${String(err)}`);
  assert.equal(err.kind, expected, err.message);
  assert.doesNotMatch(err.message, /[\u0000-\u001f\u007f-\u009f]/, 'one printable line');
  return true;
};

/** Fails instead of hanging the test run when `promise` does not settle within `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`still pending after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

const serverUuid = '4a1c0f36-8f5e-4d2b-9a57-7d2f5f0b9c11';

test('a redirect is never followed, to another host or anywhere else', async () => {
  const elsewhere = await serve((_req, res) => res.end(JSON.stringify({ uuid: serverUuid })));
  const other = elsewhere.url.replace('127.0.0.1', 'localhost');
  const proxy = await serve((req, res) => res.writeHead(302, { location: `${other}${req.url}` }).end());
  await assert.rejects(
    openstackProof({ metadataUrl: `${proxy.url}/meta_data.json` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  await assert.rejects(azureProof({ imdsUrl: proxy.url })(Buffer.alloc(0)), kind('unavailable'));
  await assert.rejects(
    gceIdentityProof({ audience: 'https://k', identityUrl: `${proxy.url}/identity` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  assert.deepEqual(elsewhere.hits, []);
});

test('a huge body is not read whole', async () => {
  const chunk = Buffer.alloc(1024 * 1024, 'a');
  const written: number[] = [];
  const flood = await serve((_req, res) => {
    let sent = 0;
    res.writeHead(200, { 'content-type': 'application/json' });
    const pump = () => {
      while (sent < 64 * chunk.length && !res.destroyed) {
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      written.push(sent);
      res.end();
    };
    res.on('close', () => written.push(sent));
    pump();
  });
  await assert.rejects(
    openstackProof({ metadataUrl: `${flood.url}/meta_data.json` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  await assert.rejects(
    gceIdentityProof({ audience: 'https://k', identityUrl: `${flood.url}/identity` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  for (const sent of written) assert.ok(sent <= 16 * chunk.length, `${sent} bytes were read`);
});

test('an answer cut off in its body is a fault to retry, not an internal error', async () => {
  const cut = await serve((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
    res.write('{"uuid": "');
    setTimeout(() => res.destroy(), 20);
  });
  await assert.rejects(
    openstackProof({ metadataUrl: `${cut.url}/meta_data.json` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  await assert.rejects(azureProof({ imdsUrl: cut.url })(Buffer.alloc(0)), kind('unavailable'));
  await assert.rejects(
    gceIdentityProof({ audience: 'https://k', identityUrl: `${cut.url}/identity` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
});

test('an answer that trickles forever ends at the deadline of its call, with or without a signal', async () => {
  const trickle = await serve((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write(' ');
    const timer = setInterval(() => res.write(' '), 50);
    res.on('close', () => clearInterval(timer));
  });
  const url = new URL(`${trickle.url}/conf`);
  const service = 'a metadata service';
  const started = performance.now();
  await within(
    assert.rejects(readMetadataJson({ url, service, timeoutMs: 300 }), kind('unavailable')),
    3_000,
  );
  const signal = new AbortController().signal;
  await within(
    assert.rejects(readMetadataJson({ url, service, timeoutMs: 300, signal }), kind('unavailable')),
    3_000,
  );
  await within(
    assert.rejects(
      gceIdentityProof({ audience: 'https://k', identityUrl: `${trickle.url}/identity`, timeoutMs: 300 })(
        Buffer.alloc(0),
        signal,
      ),
      kind('unavailable'),
    ),
    3_000,
  );
  assert.ok(performance.now() - started < 3_000);
});

test('instance-profile credentials that trickle forever end the attempt at its deadline', async () => {
  const imds = await serve((req, res) => {
    if (req.method === 'PUT') return void res.end('token');
    if (req.url === '/latest/meta-data/iam/security-credentials/') return void res.end('role');
    res.writeHead(200);
    const timer = setInterval(() => res.write(' '), 100);
    res.on('close', () => clearInterval(timer));
  });
  const saved = process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'];
  process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = imds.url;
  try {
    const credentials = fromInstanceMetadata({ timeout: 1000, maxRetries: 0 });
    const proof = awsStsProof(() => credentials(), 'eu-west-1', 2, { timeoutMs: 500 });
    await within(assert.rejects(proof(Buffer.from('{}')), kind('unavailable')), 3_000);
  } finally {
    if (saved === undefined) delete process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'];
    else process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] = saved;
  }
});

test("a failing service's body reaches the error line as printable text only", async () => {
  const hostile = await serve((_req, res) =>
    res.writeHead(503).end('\u001b]0;owned\u0007\n\u001b[2Jsecond line'),
  );
  await assert.rejects(hetznerProof({ metadataUrl: hostile.url })(Buffer.alloc(0)), kind('unavailable'));
  await assert.rejects(
    openstackProof({ metadataUrl: `${hostile.url}/m` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  await assert.rejects(
    gceIdentityProof({ audience: 'https://k', identityUrl: `${hostile.url}/identity` })(Buffer.alloc(0)),
    kind('unavailable'),
  );
  const odd = await serve((_req, res) => res.end('\u001b[2J\n12'));
  await assert.rejects(hetznerProof({ metadataUrl: odd.url })(Buffer.alloc(0)), kind('invalid'));
});

const resourceId =
  '/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/node-1';

async function azureImds(compute: unknown, signature: unknown) {
  return serve((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url?.startsWith('/metadata/instance/compute')) {
      return void res.end(
        JSON.stringify({
          subscriptionId: 's',
          resourceGroupName: 'rg',
          vmId: 'v',
          location: 'x',
          ...(compute as object),
        }),
      );
    }
    res.end(JSON.stringify({ encoding: 'pkcs7', signature }));
  });
}

test('an Azure resource id or attested document that is not one never reaches the header', async () => {
  const good = await azureImds({ resourceId }, 'TUlJQmFzZTY0+/=');
  assert.equal(
    await azureProof({ imdsUrl: good.url })(Buffer.alloc(0)),
    `x-azure-id ${resourceId} TUlJQmFzZTY0+/=`,
  );
  for (const id of [
    `${resourceId} extra`,
    `${resourceId}\r\nX-Evil: 1`,
    '/../../etc/passwd',
    `${resourceId}/../other`,
  ]) {
    const imds = await azureImds({ resourceId: id }, 'TUlJQmFzZTY0');
    await assert.rejects(azureProof({ imdsUrl: imds.url })(Buffer.alloc(0)), kind('invalid'));
  }
  for (const signature of ['abc def', 'abc\r\nX-Evil: 1', '<html>']) {
    const imds = await azureImds({ resourceId }, signature);
    await assert.rejects(azureProof({ imdsUrl: imds.url })(Buffer.alloc(0)), kind('unavailable'));
  }
});

test('a JSON document that starts with a byte-order mark is read, as fetch reads it', async () => {
  const bom = await serve((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"uuid":"x"}')]));
  });
  const read = await readMetadataJson({ url: new URL(`${bom.url}/conf`), service: 'a metadata service' });
  assert.deepEqual(read, { uuid: 'x' });
});
