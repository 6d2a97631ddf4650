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
import type { AzureClientOptions } from '../../cloud/azure/client.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import { ThrottleBucket } from '../aws/throttle.ts';
import { applyTransportFault, CallLog, FaultQueue, type FaultVerbs, faultVerbs } from '../cloud-sim.ts';
import { createCertificateAuthority, issueServingCertificate } from '../tls.ts';
import {
  type ArmContext,
  type ArmRewrite,
  type AzureCall,
  armReadBucket,
  matchArmRoute,
  serveArm,
} from './arm.ts';
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
  /** More names ARM's serving certificate carries (tests reaching it through a proxy by name). */
  serverNames?: string[];
}

/** A running simulator; its faults answer with an ARM error body (a 429 asking `Retry-After: 1`). */
export interface AzureSimulator extends Pick<FaultVerbs, 'failNext' | 'delayNext' | 'dropNext'> {
  world: AzureWorld;
  /** ARM's base URL (`https://127.0.0.1:PORT`), the SDK's `endpoint`. */
  armEndpoint: string;
  /** PEM of the CA that signed the ARM serving certificate (the SDK's `tlsOptions.ca`). */
  caPem: string;
  /** IMDS root (`http://127.0.0.1:PORT`); a VM's IMDS is `imdsUrlOf(vm)`. */
  imdsEndpoint: string;
  /** The IMDS base URL one VM sees (what replaces `http://169.254.169.254`). */
  imdsUrlOf(vmName: string): string;
  /** Whether `token` is a managed-identity token this simulator's IMDS issued (Blob Storage's check). */
  validToken(token: string): boolean;
  /** A credential that gets managed-identity tokens from the simulated IMDS. */
  credential: TokenCredential;
  /** How an AzureClient reaches this ARM: the world's subscription and resource group, credential, endpoint, CA. */
  clientOptions: Pick<
    AzureClientOptions,
    'subscriptionId' | 'resourceGroup' | 'credential' | 'endpoint' | 'caPem'
  >;
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
  /** The subscription read bucket now in force (undefined: none). */
  readonly bucket: ThrottleBucket | undefined;
  /**
   * The next `times` ARM answers (of `operation`, or any) are rewritten before they are sent: a
   * broken API or proxy (a nextLink that repeats, another VM than asked for, a 200 with an error
   * body or no JSON).
   */
  rewriteNext(times: number, rewrite: ArmRewrite, operation?: string): void;
  /** Drops every fault and rewrite still queued. */
  resetFaults(): void;
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

/** What the ARM and IMDS servers share. */
interface AzureState {
  world: AzureWorld;
  tokens: ImdsTokens;
  log: CallLog<AzureCall>;
  faults: FaultQueue;
  /** Rewrites queued for the next ARM answers (first matching one spent per answer). */
  rewrites: { times: number; operation: string | undefined; rewrite: ArmRewrite }[];
  /** Made once IMDS listens: the signer's AIA names the simulated PKI repository's URL. */
  authority?: AttestationAuthority;
  attestation?: AttestationSettings;
}

/** Records the call and applies its fault; true when the fault answered (or dropped) the request. */
async function answerFault(
  state: AzureState,
  operation: string,
  url: URL,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<boolean> {
  state.log.add({ operation, path: url.pathname, query: Object.fromEntries(url.searchParams) });
  const fault = state.faults.take(operation);
  if (await applyTransportFault(fault, req)) return true;
  if (!fault?.status) return false;
  const code = faultCodes[fault.status] ?? 'InjectedFault';
  res.writeHead(fault.status, {
    'content-type': 'application/json; charset=utf-8',
    ...(fault.status === 429 ? { 'retry-after': '1' } : {}),
  });
  res.end(JSON.stringify({ error: { code, message: `injected fault: ${code}` } }));
  return true;
}

/** IMDS (`/vms/<name>/metadata/…`) and Microsoft's PKI repository, on one plain HTTP server. */
async function serveImdsOrPki(state: AzureState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1');
  if (url.pathname.startsWith(`${pkiPath}/`)) {
    if (await answerFault(state, 'pki.certificate', url, req, res)) return;
    const served =
      url.pathname === `${pkiPath}/${issuingCertificateFile}` ? state.authority?.issuing : undefined;
    res.writeHead(served ? 200 : 404, { 'content-type': 'application/pkix-cert' });
    res.end(served ? Buffer.from(served.certificate.rawData) : undefined);
    return;
  }
  if (await answerFault(state, imdsOperation(url.pathname) ?? 'imds.unknown', url, req, res)) return;
  try {
    const body = await serveImds(
      state.world,
      state.tokens,
      state.attestation as AttestationSettings,
      req,
      url,
    );
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
    res.end(JSON.stringify(body));
  } catch (err) {
    const status = err instanceof ImdsError ? err.status : 500;
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
    res.end(JSON.stringify(err instanceof ImdsError ? err.body : { error: String(err) }));
  }
}

/** ARM on HTTPS with a serving certificate from a fresh CA (the SDK's `tlsOptions.ca`). */
async function startArm(state: AzureState, armContext: ArmContext, serverNames: string[] = []) {
  const ca = await createCertificateAuthority('azure-sim-ca');
  const serving = await issueServingCertificate(ca, serverNames);
  const arm = createHttpsServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    const url = new URL(req.url ?? '/', 'https://127.0.0.1');
    const route = matchArmRoute(armContext, url.pathname);
    const operation = route?.operation ?? 'unknown';
    void answerFault(state, operation, url, req, res).then((answered) => {
      if (answered) return;
      const queued = state.rewrites.find((r) => r.operation === undefined || r.operation === operation);
      if (queued) {
        queued.times--;
        state.rewrites = state.rewrites.filter((r) => r.times > 0);
      }
      serveArm(armContext, req, res, url, route, queued?.rewrite);
    });
  });
  const listener = await listenOnLoopback(arm);
  return { listener, url: listener.url.replace('http://', 'https://'), caPem: ca.certificate };
}

/** Starts ARM and IMDS on loopback with an empty world. */
export async function startAzureSimulator(options: AzureSimulatorOptions = {}): Promise<AzureSimulator> {
  const state: AzureState = {
    world: new AzureWorld(options),
    tokens: new ImdsTokens(),
    log: new CallLog(),
    faults: new FaultQueue(),
    rewrites: [],
  };
  const { world } = state;
  let armUrl = '';
  const armContext: ArmContext = {
    world,
    baseUrl: () => armUrl,
    pageSize: options.pageSize ?? 100,
    bucket: new ThrottleBucket(options.readBucket ?? armReadBucket),
    validToken: (token) => state.tokens.valid(token),
  };
  const arm = await startArm(state, armContext, options.serverNames);
  armUrl = arm.url;
  const imdsListener = await listenOnLoopback(
    createHttpServer((req, res) => void serveImdsOrPki(state, req, res)),
  );
  const authority = await createAttestationAuthority(
    world.location,
    undefined,
    `${imdsListener.url}${pkiPath}`,
  );
  const attestation: AttestationSettings = {
    signer: authority.signer,
    embed: 'leaf-and-issuer',
    now: () => new Date(),
    lifetimeMs: 6 * 3_600_000,
  };
  Object.assign(state, { authority, attestation });
  const { failNext, delayNext, dropNext } = faultVerbs(state.faults);
  const credential = imdsCredential(imdsListener.url);
  return {
    world,
    armEndpoint: armUrl,
    caPem: arm.caPem,
    imdsEndpoint: imdsListener.url,
    imdsUrlOf: (vmName) => `${imdsListener.url}/vms/${encodeURIComponent(vmName)}`,
    validToken: (token) => state.tokens.valid(token),
    credential,
    clientOptions: {
      subscriptionId: world.subscriptionId,
      resourceGroup: world.resourceGroup,
      credential,
      endpoint: armUrl,
      caPem: arm.caPem,
    },
    authority,
    pkiUrl: `${imdsListener.url}${pkiPath}`,
    attestation,
    calls: state.log.calls,
    count: (operation) => state.log.count(operation),
    clearCalls: () => state.log.clear(),
    failNext,
    delayNext,
    dropNext,
    rewriteNext: (times, rewrite, operation) => {
      state.rewrites.push({ times, operation, rewrite });
    },
    resetFaults: () => {
      state.faults.clear();
      state.rewrites = [];
    },
    get bucket() {
      return armContext.bucket;
    },
    setReadBucket: (limits) => {
      armContext.bucket = limits ? new ThrottleBucket(limits) : undefined;
    },
    close: async () => {
      await Promise.all([arm.listener.close(), imdsListener.close()]);
    },
  };
}
