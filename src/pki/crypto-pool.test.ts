import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { after, test } from 'node:test';
import { InternalError, InvalidInputError, UnavailableError } from '../errors.ts';
import { CryptoPool, maxJobsPerMessage } from './crypto-pool.ts';
import { runJob } from './crypto-worker.ts';
import { generateKey, spkiOf } from './keys.ts';

const pool = new CryptoPool({ threads: 2 });
after(() => pool.close());

function signed(key: KeyObject, text: string): { data: Buffer; spki: Buffer; signature: Buffer } {
  const data = Buffer.from(text);
  return { data, spki: spkiOf(key), signature: sign('sha256', data, key) };
}

test('signature checks on the pool: valid, altered, garbage signature, unreadable key', async () => {
  const key = generateKey('ecdsa-p256');
  const { data, spki, signature } = signed(key, 'certification request info');
  assert.equal(await pool.verify('sha256', data, spki, signature), true);
  assert.equal(await pool.verify('sha256', Buffer.from('something else'), spki, signature), false);
  assert.equal(await pool.verify('sha256', data, spki, Buffer.from('not a signature')), false);
  assert.equal(await pool.verify('sha256', data, spkiOf(generateKey('ecdsa-p256')), signature), false);
  await assert.rejects(
    pool.verify('sha256', data, spki.subarray(0, 20), signature),
    (err) => err instanceof InvalidInputError && /unreadable public key/.test(err.message),
  );
});

test('signatures on the pool verify with each key, several keys and key types in one batch', async () => {
  const keys = [
    generateKey('ecdsa-p256'),
    generateKey('ecdsa-p384'),
    generateKey('rsa-2048'),
    generateKeyPairSync('ed25519').privateKey,
  ];
  const data = Buffer.from('to be signed');
  const hashOf = (key: KeyObject) => (key.asymmetricKeyType === 'ed25519' ? null : 'sha256');
  // Submitted in one turn of the event loop, so they travel in one batch (split across threads).
  const signatures = await Promise.all([...keys, ...keys].map((key) => pool.sign(hashOf(key), data, key)));
  signatures.forEach((signature, i) => {
    const key = keys[i % keys.length] as KeyObject;
    assert.ok(Buffer.isBuffer(signature));
    assert.equal(verify(hashOf(key), data, key, signature), true, `signature ${i}`);
  });
});

test('a thousand concurrent checks each get their own answer', async () => {
  const key = generateKey('ecdsa-p256');
  const spki = spkiOf(key);
  const jobs = Array.from({ length: 1000 }, (_, i) => {
    const data = Buffer.from(`request ${i}`);
    const signature = sign('sha256', data, key);
    // Every third one is checked against other data, so it must fail, and only it.
    return { data: i % 3 === 0 ? Buffer.from(`forged ${i}`) : data, signature };
  });
  const answers = await Promise.all(jobs.map((j) => pool.verify('sha256', j.data, spki, j.signature)));
  assert.deepEqual(
    answers,
    jobs.map((_, i) => i % 3 !== 0),
  );
});

test('a turn of jobs goes in messages of at most maxJobsPerMessage: the first answers come before the last jobs are done', async () => {
  const single = new CryptoPool({ threads: 1 });
  try {
    const key = generateKey('ecdsa-p256');
    const { data, spki, signature } = signed(key, 'chunked');
    const total = 4 * maxJobsPerMessage;
    let answered = 0;
    const answers = Array.from({ length: total }, () =>
      single.verify('sha256', data, spki, signature).then((valid) => {
        answered++;
        return valid;
      }),
    );
    await answers[0];
    assert.ok(
      answered >= 1 && answered <= maxJobsPerMessage,
      `${answered} of ${total} answered with the first`,
    );
    assert.deepEqual(await Promise.all(answers), Array(total).fill(true));
  } finally {
    await single.close();
  }
});

test('a job for a key the thread was never sent is an error, not a crash', () => {
  const result = runJob({ op: 'sign', hash: 'sha256', data: new Uint8Array(1), keyId: 99 }, new Map());
  assert.deepEqual(result, { error: 'signing key 99 was never registered', stage: 'sign' });
});

test('a thread that dies fails its jobs as unavailable (no hang), and so does the next batch', async () => {
  const dying = new CryptoPool({
    threads: 1,
    workerUrl: new URL(`data:text/javascript,${encodeURIComponent('process.exit(3)')}`),
  });
  try {
    const { data, spki, signature } = signed(generateKey('ecdsa-p256'), 'x');
    for (let attempt = 0; attempt < 2; attempt++) {
      await assert.rejects(
        dying.verify('sha256', data, spki, signature),
        (err) => err instanceof UnavailableError && /a crypto thread stopped/.test(err.message),
      );
    }
  } finally {
    await dying.close();
  }
});

test('an answer the pool cannot unpack fails its jobs as internal errors, not as verdicts', async () => {
  const garbling = new CryptoPool({
    threads: 1,
    workerUrl: new URL(
      `data:text/javascript,${encodeURIComponent(`
        import { parentPort } from 'node:worker_threads';
        parentPort.on('message', (m) => m.type === 'batch' && parentPort.postMessage({ batchId: m.batchId, results: new Uint8Array([9]) }));
      `)}`,
    ),
  });
  try {
    const { data, spki, signature } = signed(generateKey('ecdsa-p256'), 'x');
    await assert.rejects(
      garbling.verify('sha256', data, spki, signature),
      (err) =>
        err instanceof InternalError && /answer is unreadable: unknown crypto result 9/.test(err.message),
    );
  } finally {
    await garbling.close();
  }
});

test('a job that cannot be packed fails as an internal error, and the pool keeps working', async () => {
  const key = generateKey('ecdsa-p256');
  const { data, spki, signature } = signed(key, 'x');
  await assert.rejects(
    pool.verify('x'.repeat(300), data, spki, signature),
    (err) =>
      err instanceof InternalError && /cannot pack crypto jobs: hash name longer than 255/.test(err.message),
  );
  assert.equal(await pool.verify('sha256', data, spki, signature), true);
});

test('a thread that cannot start fails the jobs as unavailable instead of crashing the process', async () => {
  const unstartable = new CryptoPool({ threads: 1, workerUrl: new URL('http://127.0.0.1:9/worker.js') });
  try {
    const { data, spki, signature } = signed(generateKey('ecdsa-p256'), 'x');
    await assert.rejects(
      unstartable.verify('sha256', data, spki, signature),
      (err) => err instanceof UnavailableError && /cannot start a crypto thread/.test(err.message),
    );
  } finally {
    await unstartable.close();
  }
});

test('a closed pool fails pending and new jobs as unavailable', async () => {
  const closing = new CryptoPool({ threads: 1 });
  const { data, spki, signature } = signed(generateKey('ecdsa-p256'), 'x');
  const pending = closing.verify('sha256', data, spki, signature);
  await closing.close();
  await assert.rejects(pending, UnavailableError);
  await assert.rejects(closing.verify('sha256', data, spki, signature), /the crypto pool was closed/);
});

test('a busy pool keeps the process alive until it answers; an idle one lets it exit', () => {
  const script = `
    import { sign } from 'node:crypto';
    import { sharedCryptoPool } from ${JSON.stringify(new URL('./crypto-pool.ts', import.meta.url).href)};
    import { generateKey, spkiOf } from ${JSON.stringify(new URL('./keys.ts', import.meta.url).href)};
    const key = generateKey('ecdsa-p256');
    const data = Buffer.from('x');
    const ok = await sharedCryptoPool().verify('sha256', data, spkiOf(key), sign('sha256', data, key));
    console.log('verified', ok);
  `;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  assert.equal(out.trim(), 'verified true');
});
