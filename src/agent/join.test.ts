import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import {
  ConflictError,
  exitCodeOf,
  ForbiddenError,
  InvalidInputError,
  NotFoundError,
  TimeoutError,
  UnauthenticatedError,
} from '../errors.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { unsignedInteger } from '../pki/der.ts';
import { generateKey } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import { issueCertificate, type ProfileName, publicKeyRequest } from '../pki/profiles.ts';
import {
  basicConstraintsExtension,
  encodeName,
  extKeyUsageExtension,
  keyUsageExtension,
  signCertificate,
} from '../pki/x509.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { openssl, opensslText, opensslVerify } from '../testing/openssl.ts';
import { toolPath } from '../testing/tools.ts';
import { DeniedError } from './bootstrap-client.ts';
import { type JoinOptions, join } from './join.ts';
import { nodeFileNames } from './node-files.ts';
import { tokenProof } from './proofs.ts';
import { readCurrentCredentials, renewalProof } from './renewal.ts';
import { startTlsEndpoint } from './tls-proxy.test-support.ts';

/** What the in-test server answers to one call. */
type Reply = { status: number; body: unknown; headers?: Record<string, string> };
interface Call {
  method: string;
  path: string;
  authorization: string | undefined;
  body: string;
}
type Script = (call: Call, issue: () => Reply) => Reply;

const dayMs = 86_400_000;
/** Made a month ago, so that it can sign certificates that have already expired. */
const ca = createCa({ now: new Date(Date.now() - 30 * dayMs) });
const otherCa = createCa();
const caPem = bundlePem(ca);
/** The API server the answers name: the fake itself, whose certificate is from the CA (join checks it). */
let apiServer = '';

/** A serving certificate and key from `issuer` for these names, as a TLS server takes them. */
function servingPair(
  issuer: CertificateAuthority,
  names: { dnsNames?: string[]; ipAddresses?: string[] },
): { cert: string; key: string } {
  const key = generateKey();
  const cert = issueCertificate(issuer, 'kops-controller', publicKeyRequest(key), { name: 'api', ...names });
  return { cert: cert.pem, key: key.export({ format: 'pem', type: 'pkcs8' }) as string };
}

/** The files in a directory; none when it was never created. */
async function filesIn(path: string): Promise<string[]> {
  try {
    return await readdir(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** A bootstrap server speaking docs/bootstrap-api.md, each answer decided by the test's script. */
class FakeBootstrapServer {
  readonly calls: Call[] = [];
  script: Script = (_call, issue) => issue();
  server: Server | undefined;
  url = '';

  /** Its own serving certificate and key, as {@link present} takes them back. */
  tls = { key: '', cert: '' };

  async start(): Promise<void> {
    const servingKey = generateKey();
    const cert = issueCertificate(ca, 'kops-controller', publicKeyRequest(servingKey), {
      name: 'kops-controller.internal',
      ipAddresses: ['127.0.0.1'],
    });
    this.tls = { key: servingKey.export({ format: 'pem', type: 'pkcs8' }) as string, cert: cert.pem + caPem };
    this.server = createServer(this.tls, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const call = {
          method: req.method ?? '',
          path: req.url ?? '',
          authorization: req.headers.authorization,
          body: Buffer.concat(chunks).toString('utf8'),
        };
        this.calls.push(call);
        const reply = this.script(call, () => this.issue(call));
        res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
        res.end(typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body));
      });
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Issues what the latest POST asked for, as a server whose policy verified the claimed name. */
  lastPost(): { nodeName: string; certificateSigningRequests: Record<string, string> } {
    const post = this.calls.findLast((c) => c.method === 'POST');
    assert.ok(post, 'no POST received');
    return JSON.parse(post.body);
  }

  issue(_call: Call, overrides: { caBundle?: string; apiServer?: string } = {}): Reply {
    const request = this.lastPost();
    const certificates = Object.fromEntries(
      Object.entries(request.certificateSigningRequests).map(([profile, csr]) => [
        profile,
        issueCertificate(ca, profile as ProfileName, parseCsr(csr), {
          name: request.nodeName,
          ipAddresses: ['10.0.0.5'],
          dnsNames: ['ip-10-0-0-5.ec2.internal'],
        }).pem,
      ]),
    );
    return {
      status: 200,
      body: {
        status: 'issued',
        nodeName: request.nodeName,
        instanceGroup: 'nodes-us-test-1a',
        certificates,
        caBundle: overrides.caBundle ?? caPem,
        apiServer: overrides.apiServer ?? apiServer,
      },
    };
  }

  /** Presents `tls` to the connections made from now on. */
  present(tls: { key: string; cert: string }): void {
    this.server?.setSecureContext(tls);
  }

  close(): Promise<void> {
    this.server?.closeAllConnections();
    return new Promise((resolve) => this.server?.close(() => resolve()));
  }
}

const fake = new FakeBootstrapServer();
let dir = '';
let counter = 0;

before(async () => {
  await fake.start();
  apiServer = fake.url;
  dir = await mkdtemp(joinPath(tmpdir(), 'kops-join-test-'));
});
after(async () => {
  await fake.close();
  await rm(dir, { recursive: true, force: true });
});

function options(overrides: Partial<JoinOptions> = {}): JoinOptions {
  fake.calls.length = 0;
  return {
    server: fake.url,
    caBundlePem: caPem,
    nodeName: 'node-a',
    dir: joinPath(dir, `run-${counter++}`),
    proof: tokenProof('abcdef.0123456789abcdef'),
    retry: { initialMs: 1, maxMs: 5 },
    random: () => 0,
    ...overrides,
  };
}

const pending = {
  status: 202,
  body: {
    status: 'pending',
    requestId: 'ab12',
    poll: '/v1/requests/ab12',
    reasons: ['waiting for approval'],
  },
};

/**
 * An answer that issues, for each profile the last request asked for, a certificate of the profile
 * `profileFor` names (issued at `now`, for `name`) from the trusted CA: what a broken or compromised
 * server that passes TLS could return.
 */
function issuedAs(
  profileFor: (requested: string) => ProfileName,
  options: { now?: Date; name?: string; omit?: string } = {},
): Reply {
  const { nodeName, certificateSigningRequests } = fake.lastPost();
  const certificates = Object.fromEntries(
    Object.entries(certificateSigningRequests)
      .filter(([profile]) => profile !== options.omit)
      .map(([profile, csr]) => [
        profile,
        issueCertificate(
          ca,
          profileFor(profile),
          publicKeyRequest(parseCsr(csr).spki),
          { name: options.name ?? nodeName, ipAddresses: ['10.0.0.5'] },
          options.now ? { now: options.now } : {},
        ).pem,
      ]),
  );
  return { status: 200, body: { status: 'issued', nodeName, certificates, apiServer } };
}

/** A client certificate for `spki` from the trusted CA with exactly `subject`, which no profile makes. */
function clientCertificateFor(
  spki: Buffer,
  subject: { commonName: string; organizations: string[] },
): string {
  const der = signCertificate(
    {
      serial: unsignedInteger(Buffer.from([0x2a])),
      issuer: ca.signer.certificate.parsed.subjectDer,
      subject: encodeName(subject),
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + dayMs),
      spki,
      extensions: [
        keyUsageExtension(['digitalSignature']),
        extKeyUsageExtension(['clientAuth']),
        basicConstraintsExtension(false),
        ca.signer.authorityKeyIdentifier,
      ],
    },
    ca.signer.scheme,
    ca.signer.key,
  );
  return encodePem('CERTIFICATE', der);
}

/** Terminal control: a remote party's text must never move the cursor or forge lines. */
const controlCharacters = /[\u0000-\u001f\u007f-\u009f]/;

describe('join', () => {
  test('happy path: the keys stay local, the certificates chain to the CA, files are written 0600/0644', async () => {
    fake.script = (_call, issue) => issue();
    const opts = options();
    const result = await join(opts);
    assert.equal(result.nodeName, 'node-a');
    assert.equal(result.instanceGroup, 'nodes-us-test-1a');
    assert.equal(result.apiServer, apiServer);
    assert.equal(result.waitedForApproval, false);
    assert.equal(fake.calls.length, 1);
    const [call] = fake.calls;
    assert.equal(call?.method, 'POST');
    assert.equal(call?.path, '/v1/certificates');
    assert.equal(call?.authorization, 'Bearer abcdef.0123456789abcdef');
    const sent = JSON.parse(call?.body ?? '{}');
    assert.equal(sent.apiVersion, 'bootstrap.kops-controller.io/v1');
    assert.deepEqual(Object.keys(sent.certificateSigningRequests).sort(), ['kubelet', 'kubelet-server']);
    assert.doesNotMatch(call?.body ?? '', /PRIVATE KEY/);

    // The files a reader sees; `..data` and its version directory publish them as one set.
    const visible = (await readdir(opts.dir)).filter((name) => !name.startsWith('..'));
    assert.deepEqual(visible.sort(), Object.values(nodeFileNames).sort());
    const mode = async (name: string) => (await stat(joinPath(opts.dir, name))).mode & 0o777;
    assert.equal(await mode(nodeFileNames.clientKey), 0o600);
    assert.equal(await mode(nodeFileNames.serverKey), 0o600);
    assert.equal(await mode(nodeFileNames.kubeconfig), 0o600);
    assert.equal(await mode(nodeFileNames.clientCertificate), 0o644);
    assert.equal((await stat(opts.dir)).mode & 0o777, 0o700);

    const clientPem = await readFile(joinPath(opts.dir, nodeFileNames.clientCertificate), 'utf8');
    assert.match(opensslVerify(caPem, clientPem, 'sslclient'), /: OK$/);
    const serverPem = await readFile(joinPath(opts.dir, nodeFileNames.serverCertificate), 'utf8');
    assert.match(opensslVerify(caPem, serverPem, 'sslserver'), /: OK$/);
    assert.match(opensslText(serverPem), /IP Address:10\.0\.0\.5/);

    const kubeconfig = parse(await readFile(joinPath(opts.dir, nodeFileNames.kubeconfig), 'utf8'));
    assert.equal(kubeconfig.clusters[0].cluster.server, apiServer);
    assert.equal(kubeconfig.users[0].name, 'system:node:node-a');
    assert.equal(
      Buffer.from(kubeconfig.users[0].user['client-certificate-data'], 'base64').toString(),
      clientPem,
    );
  });

  test('the credentials as the kubelet reads them: one key block, the key of the certificate, the kubeconfig a 0600 regular file', async () => {
    fake.script = (_call, issue) => issue();
    const opts = options();
    await join(opts);
    const kubeconfig = parse(await readFile(joinPath(opts.dir, nodeFileNames.kubeconfig), 'utf8'));
    // clientcmd (k8s.io/client-go/tools/clientcmd/api/v1/types.go) needs these; a context that names a
    // missing cluster or user, or no current-context, leaves the kubelet without a configuration.
    assert.equal(kubeconfig.apiVersion, 'v1');
    assert.equal(kubeconfig.kind, 'Config');
    const context = kubeconfig.contexts.find(
      (c: { name: string }) => c.name === kubeconfig['current-context'],
    );
    assert.ok(context, 'current-context names a context');
    assert.ok(kubeconfig.clusters.some((c: { name: string }) => c.name === context.context.cluster));
    assert.ok(kubeconfig.users.some((u: { name: string }) => u.name === context.context.user));
    const decoded = (field: string) => Buffer.from(kubeconfig.users[0].user[field], 'base64').toString();
    const keyPem = decoded('client-key-data');
    assert.equal(keyPem, await readFile(joinPath(opts.dir, nodeFileNames.clientKey), 'utf8'));
    // The kubelet's certificate store re-encodes the key with pem.Decode's first block only
    // (certificate_store.go `Update`), and Go's tls.X509KeyPair reads SEC 1 "EC PRIVATE KEY": no
    // "EC PARAMETERS" block may come first, as `openssl ecparam -genkey` writes it.
    assert.deepEqual(keyPem.match(/^-----BEGIN ([A-Z ]+)-----$/gm), ['-----BEGIN EC PRIVATE KEY-----']);
    const certificatePem = decoded('client-certificate-data');
    assert.equal(
      openssl(['pkey', '-pubout'], keyPem),
      openssl(['x509', '-noout', '-pubkey'], certificatePem),
      'the key is the certificate’s',
    );
    // CIS 4.1.5/4.1.6 as kube-bench reads them: stat without following links.
    const { stdout } = await promisify(execFile)(
      'stat',
      ['-c', '%a %F', joinPath(opts.dir, nodeFileNames.kubeconfig)],
      { encoding: 'utf8' },
    );
    assert.equal(stdout.trim(), '600 regular file');
  });

  test('pending then approved: long-polls the handle and reports progress', async () => {
    let polls = 0;
    fake.script = (call, issue) => {
      if (call.method === 'POST') return pending;
      assert.equal(call.path, '/v1/requests/ab12?wait=1');
      return ++polls < 2 ? pending : issue();
    };
    const lines: string[] = [];
    // The fake answers at once, so the client waits between polls instead of spinning.
    const result = await join(options({ pollWaitSeconds: 1, progress: (l) => lines.push(l) }));
    assert.equal(result.waitedForApproval, true);
    assert.equal(polls, 2);
    assert.deepEqual(
      fake.calls.map((c) => c.method),
      ['POST', 'GET', 'GET'],
    );
    assert.ok(lines.length >= 2);
    assert.match(lines[0] ?? '', /^waiting for approval \(\d+s\): waiting for approval$/);
  });

  test('denial: a clear error with every reason, nothing written, no retry', async () => {
    fake.script = () => ({
      status: 403,
      body: { status: 'denied', reasons: ['instance i-0abc is not in cluster x', 'role not allowed'] },
    });
    const opts = options();
    await assert.rejects(join(opts), (err: unknown) => {
      assert.ok(err instanceof DeniedError);
      assert.deepEqual(err.reasons, ['instance i-0abc is not in cluster x', 'role not allowed']);
      assert.match(err.message, /denied: instance i-0abc is not in cluster x; role not allowed/);
      return true;
    });
    assert.equal(fake.calls.length, 1);
    assert.deepEqual(await readdir(opts.dir), []);
  });

  test('409 already registered: a conflict error, not retried', async () => {
    fake.script = () => ({
      status: 409,
      body: { error: { reason: 'node-already-registered', message: 'node node-a is Ready' } },
    });
    await assert.rejects(join(options()), (err: unknown) => {
      assert.ok(err instanceof ConflictError);
      assert.match(
        err.message,
        /answered 409 Conflict: node node-a is Ready \(node-already-registered\); .*delete the Node/,
      );
      return true;
    });
    assert.equal(fake.calls.length, 1);
  });

  test('retry after transient 503 and 429, with a fresh proof per attempt', async () => {
    let attempt = 0;
    fake.script = (_call, issue) => {
      attempt++;
      if (attempt === 1) return { status: 503, body: { error: { reason: 'unavailable', message: 'busy' } } };
      if (attempt === 2)
        return { status: 429, body: { error: { reason: 'rate-limited', message: 'slow down' } } };
      if (attempt === 3) return { status: 502, body: '<html>bad gateway</html>' };
      return issue();
    };
    let proofs = 0;
    const lines: string[] = [];
    const result = await join(
      options({
        proof: async () => `Bearer abcdef.0123456789abcdef-${proofs++}`.slice(0, 30),
        progress: (l) => lines.push(l),
      }),
    );
    assert.equal(result.nodeName, 'node-a');
    assert.equal(fake.calls.length, 4);
    assert.equal(proofs, 4);
    assert.equal(lines.length, 3);
    assert.match(
      lines[0] ?? '',
      /^bootstrap request: retrying in \d+s: POST \S+ answered 503 Service Unavailable: busy \(unavailable\)$/,
    );
  });

  test('gives up with a timeout error when the server stays down past the deadline', async () => {
    fake.script = () => ({ status: 503, body: { error: { reason: 'unavailable', message: 'down' } } });
    await assert.rejects(
      join(options({ timeoutMs: 50, retry: { initialMs: 20, maxMs: 20 } })),
      /bootstrap request: gave up after \d+s: .*down/,
    );
  });

  test('--timeout is measured on the monotonic clock: a step of the wall clock neither ends the retries nor prolongs them', async (t) => {
    const timeoutMs = 1_500;
    for (const stepMs of [2 * 3_600_000, -2 * 3_600_000]) {
      // The wall clock is mocked (and still), and stepped as chrony steps it at boot: after the first answer.
      t.mock.timers.enable({ apis: ['Date'], now: Date.now() });
      let stepped = false;
      fake.script = () => {
        if (!stepped) t.mock.timers.setTime(Date.now() + stepMs);
        stepped = true;
        return { status: 503, body: { error: { reason: 'unavailable', message: 'down' } } };
      };
      const started = performance.now();
      await assert.rejects(
        join(
          options({
            timeoutMs,
            retry: { initialMs: 50, maxMs: 100 },
            // A join still retrying long past its timeout: the wall clock's 2 h would hold it.
            signal: AbortSignal.timeout(4 * timeoutMs),
          }),
        ),
        (err: unknown) => {
          const waitedMs = performance.now() - started;
          assert.ok(err instanceof TimeoutError, `step ${stepMs}: ${err}`);
          assert.ok(waitedMs >= timeoutMs - 150, `step ${stepMs}: gave up after ${waitedMs} ms`);
          const said = Number(/gave up after (\d+)s/.exec(err.message)?.[1]);
          assert.ok(
            Math.abs(said - waitedMs / 1000) <= 1,
            `step ${stepMs}: ${err.message} after ${waitedMs} ms`,
          );
          return true;
        },
      );
      t.mock.timers.reset();
    }
  });

  test('a bootstrap server whose certificate is not from the trusted CA is refused at once', async () => {
    fake.script = (_call, issue) => issue();
    await assert.rejects(join(options({ caBundlePem: bundlePem(otherCa) })), (err: unknown) => {
      assert.ok(err instanceof UnauthenticatedError);
      assert.match(err.message, /not trusted by the cluster CA/);
      return true;
    });
    assert.equal(fake.calls.length, 0);
  });

  test('a certificate for another key is refused and not written', async () => {
    fake.script = () => {
      const { nodeName } = fake.lastPost();
      const foreign = issueCertificate(ca, 'kubelet', publicKeyRequest(generateKey()), { name: nodeName });
      return {
        status: 200,
        body: {
          status: 'issued',
          nodeName,
          certificates: { kubelet: foreign.pem },
          caBundle: caPem,
          apiServer,
        },
      };
    };
    const opts = options();
    await assert.rejects(join(opts), /certificate the server returned is for another key/);
    assert.deepEqual(await readdir(opts.dir), []);
  });

  test('a certificate from a CA the node did not trust is refused, even if the answer names that CA', async () => {
    fake.script = () => {
      const { nodeName, certificateSigningRequests } = fake.lastPost();
      const csr = parseCsr(certificateSigningRequests['kubelet'] as string);
      const rogue = issueCertificate(otherCa, 'kubelet', csr, { name: nodeName });
      return {
        status: 200,
        body: {
          status: 'issued',
          nodeName,
          certificates: { kubelet: rogue.pem },
          caBundle: bundlePem(otherCa),
          apiServer,
        },
      };
    };
    const opts = options({ servingCertificate: false });
    await assert.rejects(
      join(opts),
      /kubelet client certificate the server returned is not signed by the cluster CA/,
    );
    assert.deepEqual(await readdir(opts.dir), []);
  });

  test('an API server whose certificate is not from the trusted CA: refused before anything is sent', async () => {
    const impostor = await startTlsEndpoint(servingPair(otherCa, { ipAddresses: ['127.0.0.1'] }));
    try {
      const opts = options({ apiServer: impostor.url });
      await assert.rejects(join(opts), (err: unknown) => {
        assert.ok(err instanceof ForbiddenError, String(err));
        assert.equal(err.details?.['reason'], 'api-server-untrusted');
        assert.match(
          err.message,
          new RegExp(`^the API server ${impostor.url} did not present a certificate`),
        );
        return true;
      });
      assert.equal(fake.calls.length, 0);
      assert.deepEqual(await filesIn(opts.dir), []);
    } finally {
      await impostor.close();
    }
  });

  test('an API server certificate from the CA but for another name is refused', async () => {
    const misnamed = await startTlsEndpoint(servingPair(ca, { dnsNames: ['api.internal.example.com'] }));
    try {
      await assert.rejects(join(options({ apiServer: misnamed.url })), (err: unknown) => {
        assert.ok(err instanceof ForbiddenError, String(err));
        assert.match(err.message, /ERR_TLS_CERT_ALTNAME_INVALID/);
        return true;
      });
      assert.equal(fake.calls.length, 0);
    } finally {
      await misnamed.close();
    }
  });

  test('the API server named only by the answer is checked too, before anything is written', async () => {
    const impostor = await startTlsEndpoint(servingPair(otherCa, { ipAddresses: ['127.0.0.1'] }));
    try {
      fake.script = (call) => fake.issue(call, { apiServer: impostor.url });
      const opts = options();
      await assert.rejects(join(opts), (err: unknown) => {
        assert.ok(err instanceof ForbiddenError, String(err));
        assert.equal(err.details?.['reason'], 'api-server-untrusted');
        return true;
      });
      assert.equal(impostor.connections(), 1);
      assert.deepEqual(await filesIn(opts.dir), []);
    } finally {
      await impostor.close();
    }
  });

  test('an unreachable API server is a fault: retried until the deadline, then a timeout', async () => {
    const closed = await startTlsEndpoint(servingPair(ca, { ipAddresses: ['127.0.0.1'] }));
    await closed.close();
    const opts = options({ apiServer: closed.url, timeoutMs: 100, retry: { initialMs: 10, maxMs: 10 } });
    const lines: string[] = [];
    await assert.rejects(join({ ...opts, progress: (l) => lines.push(l) }), (err: unknown) => {
      assert.ok(err instanceof TimeoutError, String(err));
      assert.match(err.message, /^API server check: gave up after \d+s: cannot reach the API server/);
      return true;
    });
    assert.ok(lines.length >= 1, 'each retry is shown');
    assert.equal(fake.calls.length, 0);
    assert.deepEqual(await filesIn(opts.dir), []);
  });

  test('the kubeconfig trusts the node’s CA bundle only, never a CA the answer adds', async () => {
    fake.script = (call) => fake.issue(call, { caBundle: `${bundlePem(otherCa)}${caPem}` });
    const opts = options();
    await join(opts);
    const kubeconfig = parse(await readFile(joinPath(opts.dir, nodeFileNames.kubeconfig), 'utf8'));
    const trusted = Buffer.from(kubeconfig.clusters[0].cluster['certificate-authority-data'], 'base64');
    assert.equal(trusted.toString(), caPem);
    assert.equal(await readFile(joinPath(opts.dir, nodeFileNames.caBundle), 'utf8'), caPem);
  });

  test('a permanent answer ends the join at once: 404 from something that is not the bootstrap API', async () => {
    fake.script = () => ({ status: 404, body: '<html><body>404 page not found</body></html>' });
    const opts = options({ timeoutMs: 2000 });
    await assert.rejects(join(opts), (err: unknown) => {
      assert.ok(err instanceof NotFoundError, String(err));
      assert.match(err.message, new RegExp(`^POST ${fake.url}/v1/certificates answered 404 Not Found`));
      return true;
    });
    assert.equal(fake.calls.length, 1);
  });

  test('503 with Retry-After is waited out, then the join goes on', async () => {
    let attempt = 0;
    fake.script = (_call, issue) =>
      ++attempt <= 2
        ? {
            status: 503,
            body: { error: { reason: 'unavailable', message: 'the API server is not answering' } },
            headers: { 'retry-after': '1' },
          }
        : issue();
    const lines: string[] = [];
    const result = await join(options({ progress: (l) => lines.push(l) }));
    assert.equal(result.nodeName, 'node-a');
    assert.equal(fake.calls.length, 3);
    assert.deepEqual(
      lines.map((l) => l.replace(/: .*/, '')),
      ['bootstrap request', 'bootstrap request'],
    );
    assert.match(lines[0] ?? '', /retrying in 1s: POST .* answered 503 .*not answering \(unavailable\)$/);
  });

  test('a bad node name is refused before anything is sent', async () => {
    await assert.rejects(join(options({ nodeName: 'Not A Name' })), /node name/);
    assert.equal(fake.calls.length, 0);
  });
});

describe('join checks what it was issued, and writes nothing it could not use', () => {
  const refusedWithNothingWritten = async (opts: JoinOptions, message: RegExp) => {
    await assert.rejects(join(opts), (err: unknown) => {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.equal(exitCodeOf(err), 77);
      assert.match(err.message, message);
      assert.doesNotMatch(err.message, /\n/);
      return true;
    });
    assert.deepEqual(await filesIn(opts.dir), []);
  };

  test('an expired certificate from the trusted CA is refused', async () => {
    fake.script = () => issuedAs((p) => p as ProfileName, { now: new Date(Date.now() - 3 * dayMs) });
    await refusedWithNothingWritten(
      options(),
      /^the kubelet client certificate the server returned expired on \d{4}-\d\d-\d\dT[\d:.]+Z/,
    );
  });

  test('a certificate not valid until after the clock skew allowed is refused', async () => {
    fake.script = () => issuedAs((p) => p as ProfileName, { now: new Date(Date.now() + 30 * dayMs) });
    await refusedWithNothingWritten(
      options(),
      /^the kubelet client certificate the server returned is not valid until \d{4}-.*: check the clocks/,
    );
  });

  test('a certificate from a server whose clock is a few minutes ahead is accepted (5 minutes of skew)', async () => {
    // Issued 8 minutes "from now" and backdated 5 minutes: valid from 3 minutes ahead of this clock.
    fake.script = () => issuedAs((p) => p as ProfileName, { now: new Date(Date.now() + 8 * 60_000) });
    const result = await join(options());
    assert.equal(result.nodeName, 'node-a');
  });

  test('a client certificate that is not for client authentication is refused', async () => {
    fake.script = () => issuedAs(() => 'kubelet-server');
    await refusedWithNothingWritten(
      options(),
      /^the kubelet client certificate the server returned is not for client authentication/,
    );
  });

  test('a serving certificate that is not for server authentication is refused', async () => {
    fake.script = () => issuedAs(() => 'kubelet');
    await refusedWithNothingWritten(
      options(),
      /^the kubelet serving certificate the server returned is not for server authentication/,
    );
  });

  test('a certificate for the node name outside system:nodes (system:masters) is refused', async () => {
    fake.script = () => {
      const { nodeName, certificateSigningRequests } = fake.lastPost();
      const spki = parseCsr(certificateSigningRequests['kubelet'] as string).spki;
      const kubelet = clientCertificateFor(spki, {
        commonName: `system:node:${nodeName}`,
        organizations: ['system:masters'],
      });
      return { status: 200, body: { status: 'issued', nodeName, certificates: { kubelet }, apiServer } };
    };
    await refusedWithNothingWritten(
      options({ servingCertificate: false }),
      /^the kubelet client certificate names "O=system:masters, CN=system:node:node-a", not system:node:node-a in system:nodes$/,
    );
  });

  test("a serving certificate naming another node, in kops' form, is refused", async () => {
    fake.script = () => {
      const { nodeName, certificateSigningRequests } = fake.lastPost();
      const issue = (profile: ProfileName, name: string) =>
        issueCertificate(
          ca,
          profile,
          publicKeyRequest(parseCsr(certificateSigningRequests[profile] as string).spki),
          {
            name,
            ipAddresses: ['10.0.0.5'],
          },
        ).pem;
      const certificates = {
        kubelet: issue('kubelet', nodeName),
        'kubelet-server': issue('kubelet-server', 'node-b'),
      };
      return { status: 200, body: { status: 'issued', nodeName, certificates, apiServer } };
    };
    await refusedWithNothingWritten(
      options(),
      /^the kubelet serving certificate names "CN=node-b", not system:node:node-a in system:nodes nor node-a$/,
    );
  });

  test('a certificate that does not parse is refused', async () => {
    fake.script = () => {
      const { nodeName } = fake.lastPost();
      const certificates = {
        kubelet: '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n',
      };
      return { status: 200, body: { status: 'issued', nodeName, certificates, apiServer } };
    };
    await refusedWithNothingWritten(
      options({ servingCertificate: false }),
      /^the kubelet client certificate the server returned is unreadable$/,
    );
  });

  test('a serving certificate asked for but missing from the answer is refused', async () => {
    fake.script = () => issuedAs((p) => p as ProfileName, { omit: 'kubelet-server' });
    await refusedWithNothingWritten(
      options(),
      /^the server answered "issued" without the kubelet-server certificate it was asked for$/,
    );
  });

  test('join --renew: an expired answer is refused, and the current credentials stay in place and renewable', async () => {
    fake.script = (_call, issue) => issue();
    const first = options();
    await join(first);
    const current = await readCurrentCredentials(first.dir);
    // A signer whose clock is days behind answers the renewal.
    fake.script = () => issuedAs((p) => p as ProfileName, { now: new Date(Date.now() - 3 * dayMs) });
    await assert.rejects(
      join({ ...first, nodeName: current.nodeName, proof: renewalProof(current, 'c.example.com') }),
      /expired on/,
    );
    const after = await readCurrentCredentials(first.dir);
    assert.ok(after.certificate.raw.equals(current.certificate.raw), 'the current certificate stays');
  });
});

describe('join shows what the server says only as printable text, and reads its locations safely', () => {
  test('denial reasons reach the error line without terminal escapes or newlines', async () => {
    fake.script = () => ({
      status: 403,
      body: {
        status: 'denied',
        reasons: ['\u001b]0;pwned\u0007\u001b[2Jfake: joined OK', 'line one\nline two'],
      },
    });
    await assert.rejects(join(options()), (err: unknown) => {
      assert.ok(err instanceof DeniedError);
      assert.doesNotMatch(err.message, controlCharacters);
      assert.equal(
        err.message,
        'the bootstrap request was denied: ]0;pwned [2Jfake: joined OK; line one line two',
      );
      assert.ok(err.reasons.every((reason) => !controlCharacters.test(reason)));
      return true;
    });
  });

  test('pending reasons reach the progress line without terminal escapes or newlines', async () => {
    fake.script = (call, issue) =>
      call.method === 'POST'
        ? { status: 202, body: { ...pending.body, reasons: ['a\nsecond line\u001b[31m'] } }
        : issue();
    const lines: string[] = [];
    await join(options({ pollWaitSeconds: 1, progress: (l) => lines.push(l) }));
    assert.ok(lines.length >= 1);
    assert.match(lines[0] ?? '', /^waiting for approval \(\d+s\): a second line \[31m$/);
    assert.ok(lines.every((l) => !controlCharacters.test(l)));
  });

  test('a poll location that is not a URL ends the join with one readable line (exit 65), nothing written', async () => {
    fake.script = () => ({ status: 202, body: { ...pending.body, poll: 'https://[bad\u001b[2J' } });
    const opts = options({ timeoutMs: 3000 });
    await assert.rejects(join(opts), (err: unknown) => {
      assert.ok(err instanceof InvalidInputError, String(err));
      assert.equal(exitCodeOf(err), 65);
      assert.equal(
        err.message,
        'the server answered with a poll location that is not a URL: "https://[bad [2J"',
      );
      return true;
    });
    assert.equal(fake.calls.length, 1, 'not retried');
    assert.deepEqual(await filesIn(opts.dir), []);
  });

  test('a poll location at another origin, or outside /v1/requests/, is refused', async () => {
    for (const poll of ['https://198.51.100.7:3988/v1/requests/ab12', '/v1/other/ab12']) {
      fake.script = () => ({ status: 202, body: { ...pending.body, poll } });
      await assert.rejects(join(options()), (err: unknown) => {
        assert.ok(err instanceof InvalidInputError, String(err));
        assert.equal(err.message, `the server answered with a foreign poll location "${poll}"`);
        return true;
      });
    }
  });

  test('an endpoint with a path prefix (a load balancer path): requests and polls go under it', async () => {
    let polls = 0;
    fake.script = (call, issue) => (call.method === 'POST' || polls++ < 1 ? pending : issue());
    const result = await join(options({ server: `${fake.url}/kops`, pollWaitSeconds: 1 }));
    assert.equal(result.nodeName, 'node-a');
    assert.deepEqual(
      fake.calls.map((c) => `${c.method} ${c.path}`),
      [
        'POST /kops/v1/certificates',
        'GET /kops/v1/requests/ab12?wait=1',
        'GET /kops/v1/requests/ab12?wait=1',
      ],
    );
  });
});

describe('join against the simulated API server', () => {
  test('the kubeconfig from join authenticates as system:node:<name>', async () => {
    const sim = await startApiServer({ clientCAs: [caPem] });
    try {
      fake.script = (call) => fake.issue(call, { caBundle: sim.caCertificate, apiServer: sim.url });
      // The node trusts both CAs, as discovery would hand them on when both are pinned.
      const opts = options({ nodeName: 'node-joined', caBundlePem: `${caPem}${sim.caCertificate}\n` });
      await join(opts);
      const kubeconfig = joinPath(opts.dir, nodeFileNames.kubeconfig);
      // Asynchronously: the simulated API server runs in this process and must keep serving.
      const kubectl = async (args: string[], input: string) => {
        const run = promisify(execFile)(toolPath('kubectl'), ['--kubeconfig', kubeconfig, ...args], {
          encoding: 'utf8',
        });
        run.child.stdin?.end(input);
        return (await run).stdout;
      };
      const nodeManifest = (name: string) =>
        JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name } });
      // A node may register only itself: creating its own Node works, another's is refused by name.
      const created = await kubectl(['create', '-f', '-', '-o', 'name'], nodeManifest('node-joined'));
      assert.equal(created.trim(), 'node/node-joined');
      await assert.rejects(
        kubectl(['create', '-f', '-'], nodeManifest('node-other')),
        (err: { stderr?: string }) => {
          assert.match(err.stderr ?? '', /User "system:node:node-joined" cannot create resource "nodes"/);
          return true;
        },
      );
    } finally {
      await sim.close();
    }
  });
});

/** A serving pair for 127.0.0.1 from `issuer` (the trusted CA), issued at `now` (valid from 5 minutes before it). */
function servingPairAt(
  now: Date,
  lifetimeMs?: number,
  issuer: CertificateAuthority = ca,
): { cert: string; key: string } {
  const key = generateKey();
  const cert = issueCertificate(
    issuer,
    'kops-controller',
    publicKeyRequest(key),
    { name: 'api', ipAddresses: ['127.0.0.1'] },
    { now, ...(lifetimeMs ? { lifetimeMs } : {}) },
  );
  return { cert: cert.pem, key: key.export({ format: 'pem', type: 'pkcs8' }) as string };
}

/**
 * A TLS endpoint that presents `first` until a handshake with it fails, then `then` (when given): as
 * the node sees a server whose certificate its clock finds out of date until chrony steps the clock.
 */
async function steppedEndpoint(
  first: { cert: string; key: string },
  then?: { cert: string; key: string },
): Promise<{ url: string; failedHandshakes: () => number; close(): Promise<void> }> {
  let failed = 0;
  const server = createServer(first, (_req, res) => res.end('{}'));
  server.on('tlsClientError', () => {
    failed++;
    if (then) server.setSecureContext(then);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    failedHandshakes: () => failed,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('join on a machine whose clock is wrong, or is stepped while it joins', () => {
  const hourMs = 3_600_000;

  test('an API server certificate not valid yet by this machine’s clock (before chrony’s first step) is waited for, and the join goes on once the clock agrees', async () => {
    fake.script = (_call, issue) => issue();
    // This machine's clock an hour behind: the API server's certificate starts 55 minutes ahead of it.
    const api = await steppedEndpoint(
      servingPairAt(new Date(Date.now() + hourMs)),
      servingPairAt(new Date()),
    );
    try {
      const lines: string[] = [];
      const result = await join(options({ apiServer: api.url, progress: (l) => lines.push(l) }));
      assert.equal(result.apiServer, api.url);
      assert.equal(api.failedHandshakes(), 1);
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(
        lines[0] ?? '',
        new RegExp(
          `^API server check: retrying in \\d+s: the API server ${api.url} presented a certificate that is not valid yet by this machine's clock \\(now \\d{4}-[\\d-]+T[\\d:.]+Z\\)`,
        ),
      );
    } finally {
      await api.close();
    }
  });

  test('an API server certificate that stays expired by this machine’s clock: the timeout names this clock; nothing sent, nothing written', async () => {
    const expired = servingPairAt(new Date(Date.now() - 3 * dayMs), dayMs);
    const api = await steppedEndpoint(expired);
    try {
      const opts = options({ apiServer: api.url, timeoutMs: 300, retry: { initialMs: 20, maxMs: 20 } });
      await assert.rejects(join(opts), (err: unknown) => {
        assert.ok(err instanceof TimeoutError, String(err));
        assert.match(
          err.message,
          /^API server check: gave up after \d+s: the API server \S+ presented a certificate that has expired by this machine's clock \(now [^)]+\): check this machine's clock/,
        );
        assert.doesNotMatch(err.message, /someone else|trust it/);
        return true;
      });
      assert.ok(api.failedHandshakes() >= 2, 'retried');
      assert.equal(fake.calls.length, 0);
      assert.deepEqual(await filesIn(opts.dir), []);
    } finally {
      await api.close();
    }
  });

  test('a bootstrap server certificate not valid yet by this machine’s clock is waited for too, not taken for an impostor', async () => {
    fake.script = (_call, issue) => issue();
    const ahead = servingPairAt(new Date(Date.now() + hourMs));
    fake.present({ key: ahead.key, cert: ahead.cert + caPem });
    fake.server?.once('tlsClientError', () => fake.present(fake.tls));
    try {
      const lines: string[] = [];
      const result = await join(options({ progress: (l) => lines.push(l) }));
      assert.equal(result.nodeName, 'node-a');
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(
        lines[0] ?? '',
        /^bootstrap request: retrying in \d+s: the bootstrap server https:\/\/127\.0\.0\.1:\d+ presented a certificate that is not valid yet by this machine's clock/,
      );
    } finally {
      fake.present(fake.tls);
    }
  });

  test('an impostor whose certificate has expired as well is still refused at once as an impostor, not waited for', async () => {
    // OpenSSL reports the last problem it found: for this chain, the dates, not the unknown CA.
    const expiredImpostor = servingPairAt(new Date(Date.now() - 3 * dayMs), dayMs, otherCa);
    const api = await steppedEndpoint(expiredImpostor);
    try {
      await assert.rejects(join(options({ apiServer: api.url, timeoutMs: 5000 })), (err: unknown) => {
        assert.ok(err instanceof ForbiddenError, String(err));
        assert.equal(err.details?.['reason'], 'api-server-untrusted');
        return true;
      });
      assert.equal(fake.calls.length, 0);
    } finally {
      await api.close();
    }
    fake.present({ key: expiredImpostor.key, cert: expiredImpostor.cert });
    try {
      await assert.rejects(join(options({ timeoutMs: 5000 })), (err: unknown) => {
        assert.ok(err instanceof UnauthenticatedError, String(err));
        assert.match(err.message, /is not trusted by the cluster CA \(CERT_HAS_EXPIRED\)/);
        return true;
      });
      assert.equal(fake.calls.length, 0);
    } finally {
      fake.present(fake.tls);
    }
  });

  test('a Retry-After date is read against the answer’s own Date, not against this machine’s clock a day behind', async () => {
    let attempt = 0;
    // The server's clock a day ahead of this machine's: its "in 2 s" is a day and 2 s away here.
    const serverNow = Date.now() + dayMs;
    fake.script = (_call, issue) =>
      ++attempt === 1
        ? {
            status: 503,
            body: { error: { reason: 'unavailable', message: 'busy' } },
            headers: {
              'retry-after': new Date(serverNow + 2000).toUTCString(),
              date: new Date(serverNow).toUTCString(),
            },
          }
        : issue();
    const lines: string[] = [];
    const result = await join(
      options({ progress: (l) => lines.push(l), signal: AbortSignal.timeout(15_000) }),
    );
    assert.equal(result.nodeName, 'node-a');
    assert.match(lines[0] ?? '', /^bootstrap request: retrying in 2s: /);
  });

  test('a denial of a node whose clock is an hour ahead of the bootstrap server’s says so; with the clocks agreeing it does not', async () => {
    const denial = (date: number): Reply => ({
      status: 403,
      body: { status: 'denied', reasons: ['the callback challenge failed'] },
      headers: { date: new Date(date).toUTCString() },
    });
    fake.script = () => denial(Date.now() - hourMs);
    await assert.rejects(join(options()), (err: unknown) => {
      assert.ok(err instanceof DeniedError, String(err));
      assert.equal(exitCodeOf(err), 77);
      assert.deepEqual(err.reasons, ['the callback challenge failed']);
      assert.match(
        err.message,
        /^the bootstrap request was denied: the callback challenge failed; this machine's clock is 36(00|01) s ahead of the bootstrap server's \(check both clocks\)$/,
      );
      return true;
    });
    fake.script = () => denial(Date.now());
    await assert.rejects(join(options()), (err: unknown) => {
      assert.ok(err instanceof DeniedError, String(err));
      assert.equal(err.message, 'the bootstrap request was denied: the callback challenge failed');
      return true;
    });
  });

  test('an issued certificate refused as not valid yet says how far this machine’s clock is behind the server’s', async () => {
    const serverNow = Date.now() + 30 * dayMs;
    fake.script = () => ({
      ...issuedAs((p) => p as ProfileName, { now: new Date(serverNow) }),
      headers: { date: new Date(serverNow).toUTCString() },
    });
    const opts = options();
    await assert.rejects(join(opts), (err: unknown) => {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.match(
        err.message,
        /^the kubelet client certificate the server returned is not valid until \S+ by this machine's clock \(now \S+\); this machine's clock is 259(1999|2000|2001) s behind the bootstrap server's \(check both clocks\)$/,
      );
      return true;
    });
    assert.deepEqual(await filesIn(opts.dir), []);
  });

  test('an issued certificate expired by this machine’s clock names that clock', async () => {
    fake.script = () => issuedAs((p) => p as ProfileName, { now: new Date(Date.now() - 3 * dayMs) });
    await assert.rejects(join(options()), (err: unknown) => {
      assert.ok(err instanceof UnauthenticatedError, String(err));
      assert.match(
        err.message,
        /^the kubelet client certificate the server returned expired on \S+ by this machine's clock \(now \S+\): check the clocks of this machine and of the controller$/,
      );
      return true;
    });
  });
});
