import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { createCa } from '../pki/ca.ts';
import {
  detachedJws,
  parseClusterInfoDocument,
  parseClusterInfoKubeconfig,
  renderClusterInfoKubeconfig,
  verifyDetachedJws,
} from './cluster-info.ts';

// kubeadm's own vectors (cluster-bootstrap/token/jws/jws_test.go).
const content = 'Hello from the other side. I must have called a thousand times.';
const header = 'eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9';

describe('detached JWS (kubeadm vectors)', () => {
  test('content signed with the passcode', () => {
    assert.equal(
      detachedJws(content, 'joshua', 'my voice is my passcode'),
      `${header}..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8`,
    );
  });

  test('empty content', () => {
    assert.equal(
      detachedJws('', 'joshua', 'my voice is my passcode'),
      `${header}..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk`,
    );
  });

  test('empty secret (key is 32 zero bytes)', () => {
    assert.equal(
      detachedJws(content, 'joshua', ''),
      `${header}..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8`,
    );
  });

  test('the header bytes are exactly {"alg":"HS256","kid":"<id>"}', () => {
    const jws = detachedJws(content, 'abcdef', '0123456789abcdef');
    const [h, payload] = jws.split('.');
    assert.equal(Buffer.from(h as string, 'base64url').toString(), '{"alg":"HS256","kid":"abcdef"}');
    assert.equal(payload, '', 'the payload is detached');
  });

  test('property: a signature verifies for its content and token only', () => {
    const tokenPart = (n: number) =>
      fc.string({
        unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789'),
        minLength: n,
        maxLength: n,
      });
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme' }),
        tokenPart(6),
        tokenPart(16),
        fc.nat(),
        (text, id, secret, at) => {
          const jws = detachedJws(text, id, secret);
          assert.equal(verifyDetachedJws(jws, text, id, secret), true);
          const i = at % (text.length + 1);
          assert.equal(verifyDetachedJws(jws, `${text.slice(0, i)}x${text.slice(i)}`, id, secret), false);
          assert.equal(
            verifyDetachedJws(jws, text, id, `${secret.slice(1)}${secret[0] === 'a' ? 'b' : 'a'}`),
            false,
          );
        },
      ),
      { numRuns: 300 },
    );
  });

  test('verification accepts the vector and refuses any change', () => {
    const jws = `${header}..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8`;
    assert.equal(verifyDetachedJws(jws, content, 'joshua', 'my voice is my passcode'), true);
    assert.equal(verifyDetachedJws(jws, `${content} `, 'joshua', 'my voice is my passcode'), false);
    assert.equal(verifyDetachedJws(jws, content, 'joshub', 'my voice is my passcode'), false);
    assert.equal(verifyDetachedJws(jws, content, 'joshua', 'my voice is my passcodf'), false);
    assert.equal(verifyDetachedJws(jws.slice(0, -1), content, 'joshua', 'my voice is my passcode'), false);
    assert.equal(verifyDetachedJws('', content, 'joshua', 'my voice is my passcode'), false);
  });
});

const ca = createCa({ commonName: 'kubernetes-ca' });
const caPem = ca.certificates[0]?.pem as string;

describe('cluster-info document', () => {
  test('the kubeconfig round-trips servers and CA bundle', () => {
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.example.com', 'https://10.0.0.1:6443'],
      caBundlePem: caPem,
    });
    assert.deepEqual(parseClusterInfoKubeconfig(kubeconfig), {
      servers: ['https://api.example.com', 'https://10.0.0.1:6443'],
      caBundlePem: caPem,
    });
  });

  test('bad kubeconfigs and servers are refused', () => {
    assert.throws(
      () => renderClusterInfoKubeconfig({ servers: [], caBundlePem: caPem }),
      /at least one server/,
    );
    assert.throws(() => renderClusterInfoKubeconfig({ servers: ['http://x'], caBundlePem: caPem }), /https/);
    assert.throws(() => renderClusterInfoKubeconfig({ servers: ['https://x'], caBundlePem: 'nope' }));
    assert.throws(() => parseClusterInfoKubeconfig('clusters: []'), /clusters with a server/);
    assert.throws(() => parseClusterInfoKubeconfig('{'), /not YAML/);
    assert.throws(() => parseClusterInfoDocument('{"data":{}}'), /data.kubeconfig/);
    assert.throws(() => parseClusterInfoDocument('[1'), /not JSON/);
  });
});
