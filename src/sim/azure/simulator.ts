/**
 * The simulated Azure endpoints on loopback, so that `@azure/arm-compute` and the IMDS clients run
 * unchanged against them: ARM over HTTPS (the SDK sends bearer tokens over TLS only; the CA is
 * {@link AzureSimulator.caPem}), IMDS over plain HTTP as on a VM, and beside it a stand-in for
 * Microsoft's PKI repository serving the issuing CA the signer's AIA names. Faults: the next N requests
 * (of one operation, or any) fail with a status, are delayed, or are dropped without an answer.
 */
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AccessToken, TokenCredential } from '@azure/identity';
import { listenOnLoopback } from '../../net/loopback.ts';
import { TokenBucket } from '../aws/throttle.ts';
import { createCertificateAuthority, issueServingCertificate } from '../tls.ts';
import { type ArmContext, type AzureCall, armReadBucket, matchArmRoute, serveArm } from './arm.ts';
import {
  type AttestationAuthority,
  createAttestationAuthority,
  issuingCertificateFile,
} from './attestation.ts';
import { type AttestationSettings, ImdsError, ImdsTokens, imdsOperation, serveImds } from './imds.ts';
import { AzureWorld } from './world.ts';

/** Options of {@link startAzureSimulator}. */
export interface AzureSimulatorOptions {
  subscriptionId?: string;
  resourceGroup?: string;
  location?: string;
  /** Items per list page (ARM pages by nextLink; default 100). */
  pageSize?: number;
  /** The subscription read bucket (default ARM's: 250, refilling 25/s). */
  readBucket?: { capacity: number; refillPerSecond: number };
}

interface Fault {
  operation: string | undefined;
  remaining: number;
  status?: number;
  delayMs?: number;
  drop?: boolean;
}

/** A running simulator. */
export interface AzureSimulator {
  world: AzureWorld;
  /** ARM's base URL (`https://127.0.0.1:PORT`), the SDK's `endpoint`. */
  armEndpoint: string;
  /** PEM of the CA that signed the ARM serving certificate (the SDK's `tlsOptions.ca`). */
  caPem: string;
  /** IMDS root (`http://127.0.0.1:PORT`); a VM's IMDS is `imdsUrlOf(vm)`. */
  imdsEndpoint: string;
  /** The IMDS base URL one VM sees (what replaces `http://169.254.169.254`). */
  imdsUrlOf(vmName: string): string;
  /** A credential that gets managed-identity tokens from the simulated IMDS. */
  credential: TokenCredential;
  /** The CA hierarchy signing attested documents; its root is what the controller trusts. */
  authority: AttestationAuthority;
  /** The simulated Microsoft PKI repository (serves the issuing CA as `issuing.crt`). */
  pkiUrl: string;
  /** How attested documents are signed now (change for rogue or stale documents). */
  attestation: AttestationSettings;
  readonly calls: readonly AzureCall[];
  /** Served requests of one operation (`virtualMachineScaleSetVMs.list`, `imds.attested`, …). */
  count(operation: string): number;
  clearCalls(): void;
  /** The next `times` requests (of `operation`, or any) answer `status` with an ARM error body. */
  failNext(times: number, status: number, operation?: string): void;
  /** The next `times` requests (of `operation`, or any) wait `ms` first. */
  delayNext(times: number, ms: number, operation?: string): void;
  /** The next `times` requests (of `operation`, or any) are dropped without an answer. */
  dropNext(times: number, operation?: string): void;
  /** The subscription read bucket now in force (undefined: none). */
  readonly bucket: TokenBucket | undefined;
  /** Replaces the read bucket (full); undefined turns throttling off. */
  setReadBucket(limits: { capacity: number; refillPerSecond: number } | undefined): void;
  close(): Promise<void>;
}

/** Where the IMDS server also plays Microsoft's PKI repository. */
const pkiPath = '/pkiops/certs';

const faultCodes: Record<number, string> = {
  429: 'TooManyRequests',
  500: 'InternalServerError',
  502: 'BadGateway',
  503: 'ServiceUnavailable',
  504: 'GatewayTimeout',
  403: 'AuthorizationFailed',
};

/** A credential reading managed-identity tokens from the simulated IMDS token endpoint. */
function imdsCredential(imdsEndpoint: string): TokenCredential {
  return {
    async getToken(): Promise<AccessToken> {
      const url = new URL('/metadata/identity/oauth2/token', imdsEndpoint);
      url.searchParams.set('api-version', '2018-02-01');
      url.searchParams.set('resource', 'https://management.azure.com/');
      const response = await fetch(url, { headers: { Metadata: 'true' } });
      if (!response.ok) throw new Error(`simulated IMDS token endpoint answered ${response.status}`);
      const body = (await response.json()) as { access_token: string; expires_on: string };
      return { token: body.access_token, expiresOnTimestamp: Number(body.expires_on) * 1000 };
    },
  };
}

/** Starts ARM and IMDS on loopback with an empty world. */
export async function startAzureSimulator(options: AzureSimulatorOptions = {}): Promise<AzureSimulator> {
  const world = new AzureWorld(options);
  const tokens = new ImdsTokens();
  // Made once IMDS listens: the signer's AIA names the simulated PKI repository's URL.
  let authority: AttestationAuthority | undefined;
  let attestation: AttestationSettings | undefined;
  const calls: AzureCall[] = [];
  let faults: Fault[] = [];

  /** The fault for one request of `operation`, spending it. */
  const faultFor = (operation: string): Fault | undefined => {
    const fault = faults.find((f) => f.operation === undefined || f.operation === operation);
    if (fault) {
      fault.remaining--;
      faults = faults.filter((f) => f.remaining > 0);
    }
    return fault;
  };

  /** Records the call, applies its fault; true when the fault answered (or dropped) the request. */
  const applyFault = async (operation: string, url: URL, res: ServerResponse): Promise<boolean> => {
    calls.push({ operation, path: url.pathname, query: Object.fromEntries(url.searchParams) });
    const fault = faultFor(operation);
    if (fault?.delayMs) await new Promise((resolve) => setTimeout(resolve, fault.delayMs));
    if (fault?.drop) {
      res.socket?.destroy();
      return true;
    }
    if (fault?.status) {
      const code = faultCodes[fault.status] ?? 'InjectedFault';
      res.writeHead(fault.status, {
        'content-type': 'application/json; charset=utf-8',
        ...(fault.status === 429 ? { 'retry-after': '1' } : {}),
      });
      res.end(JSON.stringify({ error: { code, message: `injected fault: ${code}` } }));
      return true;
    }
    return false;
  };

  const ca = await createCertificateAuthority('azure-sim-ca');
  const serving = await issueServingCertificate(ca);
  let armUrl = '';
  const armContext: ArmContext = {
    world,
    baseUrl: () => armUrl,
    pageSize: options.pageSize ?? 100,
    bucket: new TokenBucket(options.readBucket ?? armReadBucket),
    validToken: (token) => tokens.valid(token),
  };
  const arm = createHttpsServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    const url = new URL(req.url ?? '/', 'https://127.0.0.1');
    const route = matchArmRoute(armContext, url.pathname);
    void applyFault(route?.operation ?? 'unknown', url, res).then((answered) => {
      if (!answered) serveArm(armContext, req, res, url, route);
    });
  });
  const imds = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    void (async () => {
      if (url.pathname.startsWith(`${pkiPath}/`)) {
        if (await applyFault('pki.certificate', url, res)) return;
        const served =
          url.pathname === `${pkiPath}/${issuingCertificateFile}` ? authority?.issuing : undefined;
        res.writeHead(served ? 200 : 404, { 'content-type': 'application/pkix-cert' });
        res.end(served ? Buffer.from(served.certificate.rawData) : undefined);
        return;
      }
      if (await applyFault(imdsOperation(url.pathname) ?? 'imds.unknown', url, res)) return;
      try {
        const body = await serveImds(world, tokens, attestation as AttestationSettings, req, url);
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify(body));
      } catch (err) {
        const status = err instanceof ImdsError ? err.status : 500;
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
        res.end(JSON.stringify(err instanceof ImdsError ? err.body : { error: String(err) }));
      }
    })();
  });
  const armListener = await listenOnLoopback(arm);
  armUrl = armListener.url.replace('http://', 'https://');
  const imdsListener = await listenOnLoopback(imds);
  authority = await createAttestationAuthority(world.location, undefined, `${imdsListener.url}${pkiPath}`);
  attestation = {
    signer: authority.signer,
    embed: 'leaf-and-issuer',
    now: () => new Date(),
    lifetimeMs: 6 * 3_600_000,
  };

  return {
    world,
    armEndpoint: armUrl,
    caPem: ca.certificate,
    imdsEndpoint: imdsListener.url,
    imdsUrlOf: (vmName) => `${imdsListener.url}/vms/${encodeURIComponent(vmName)}`,
    credential: imdsCredential(imdsListener.url),
    authority,
    pkiUrl: `${imdsListener.url}${pkiPath}`,
    attestation,
    calls,
    count: (operation) => calls.filter((c) => c.operation === operation).length,
    clearCalls: () => {
      calls.length = 0;
    },
    failNext: (times, status, operation) => {
      faults.push({ operation, remaining: times, status });
    },
    delayNext: (times, ms, operation) => {
      faults.push({ operation, remaining: times, delayMs: ms });
    },
    dropNext: (times, operation) => {
      faults.push({ operation, remaining: times, drop: true });
    },
    get bucket() {
      return armContext.bucket;
    },
    setReadBucket: (limits) => {
      armContext.bucket = limits ? new TokenBucket(limits) : undefined;
    },
    close: async () => {
      await Promise.all([armListener.close(), imdsListener.close()]);
    },
  };
}
