/**
 * This machine's wall clock, as the node's checks and messages name it. A node often joins right
 * after boot, before chrony's first sync has stepped a clock that is minutes or days off, and its
 * clock dates everything it checks (certificates, in TLS and in answers) and everything it signs
 * (proofs). So a failure that this clock can cause says so, naming its time, instead of reading as
 * an impostor or a bare denial:
 *
 * - A TLS handshake that failed only because a certificate is outside its validity period by this
 *   clock is a fault, retried until the deadline like an unreachable server: the clock may be set a
 *   moment later, and waiting trusts nothing, since every attempt verifies the chain again. "Only"
 *   is checked, not assumed from the error code: OpenSSL reports the last problem it found, so an
 *   impostor's certificate from another CA that has also expired fails with CERT_HAS_EXPIRED too.
 * - Every answer of the bootstrap server carries its clock (the `Date` header, over the TLS the
 *   pinned CA vouches for). A denial, or an issued certificate refused for its dates, says how far
 *   this clock is from that one when they differ by more than a minute.
 */
import { X509Certificate } from 'node:crypto';
import { isIP, type Socket } from 'node:net';
import { checkServerIdentity, connect, type DetailedPeerCertificate } from 'node:tls';
import { UnavailableError } from '../errors.ts';
import { openTunnel, proxyFor } from '../net/egress-proxy.ts';
import { decodePem } from '../pki/pem.ts';

/**
 * Node's codes (OpenSSL's verify results) for a certificate of the chain that is outside its validity
 * period at the verifier's time. OpenSSL reports the last problem it found, so one of these may hide
 * others (an unknown CA): {@link vouchedForApartFromDates} tells.
 */
const validityProblems: Record<string, { problem: string; advice: string }> = {
  CERT_NOT_YET_VALID: { problem: 'is not valid yet', advice: "check this machine's clock" },
  CERT_HAS_EXPIRED: {
    problem: 'has expired',
    advice: "check this machine's clock, or renew the server's certificate",
  },
};

/** How the server that failed the handshake is reached again, and named in the message. */
export interface DatedHandshake {
  /** The server's URL (`https://host:port`). */
  url: URL;
  /** The CAs the node pinned (PEM), which the failed handshake verified against. */
  caBundlePem: string;
  /** How the message names it: "the API server https://…". */
  peer: string;
  /** Whether the failed connection went through the egress proxy when it applies (`proxyFor`). */
  viaProxy: boolean;
  timeoutMs?: number;
}

/**
 * The fault for a handshake that failed with Node's `code`, when that code is a validity period this
 * machine's clock decides and the server presents a certificate the pinned CAs vouch for apart from
 * its dates (checked again, see {@link vouchedForApartFromDates}); undefined otherwise, and the
 * caller refuses the server as it would any certificate that does not verify.
 */
export async function clockValidityFault(
  code: string | undefined,
  handshake: DatedHandshake,
): Promise<UnavailableError | undefined> {
  const known = code === undefined ? undefined : validityProblems[code];
  if (!known || !(await vouchedForApartFromDates(handshake))) return undefined;
  const now = new Date();
  return new UnavailableError(
    `${handshake.peer} presented a certificate that ${known.problem} by this machine's clock (now ${now.toISOString()}): ${known.advice} (${code})`,
    { details: { reason: 'certificate-validity', code } },
  );
}

/** serverAuth, and anyExtendedKeyUsage, which Go and OpenSSL accept for any use. */
const serverUsages = ['1.3.6.1.5.5.7.3.1', '2.5.29.37.0'];

/**
 * Whether the server presents a certificate for its host name or address, for serving, that chains
 * by signature to a pinned CA: everything OpenSSL checked but the dates, which neither
 * `X509Certificate.verify`, `checkIssued` nor `checkServerIdentity` reads. Asked on a new connection
 * that sends nothing (the handshake's certificates are all it reads); any failure is a no. If the
 * server presents a certificate whose dates are fine by now (the clock was stepped meanwhile, or the
 * server renewed it), that is a yes too: the next attempt verifies it properly.
 */
async function vouchedForApartFromDates(handshake: DatedHandshake): Promise<boolean> {
  const host = handshake.url.hostname.replace(/^\[(.*)\]$/, '$1');
  try {
    const peer = await peerCertificate(handshake, host);
    if (checkServerIdentity(host, peer)) return false;
    const leaf = new X509Certificate(peer.raw);
    const usages = leaf.keyUsage as string[] | undefined;
    if (usages && !usages.some((usage) => serverUsages.includes(usage))) return false;
    const presented: X509Certificate[] = [];
    for (let c = peer.issuerCertificate; c?.raw && presented.length < 10; c = c.issuerCertificate) {
      presented.push(new X509Certificate(c.raw));
      if (c.issuerCertificate === c) break;
    }
    const pinned = decodePem(handshake.caBundlePem, 'CERTIFICATE', 'CA bundle').map(
      (der) => new X509Certificate(der),
    );
    const signed = (child: X509Certificate, issuer: X509Certificate) =>
      child.checkIssued(issuer) && child.verify(issuer.publicKey);
    let current = leaf;
    for (let depth = 0; depth < 10; depth++) {
      if (pinned.some((ca) => signed(current, ca))) return true;
      const next = presented.find((c) => c.ca && !c.raw.equals(current.raw) && signed(current, c));
      if (!next) return false;
      current = next;
    }
    return false;
  } catch {
    return false;
  }
}

/** The certificate (with the chain Node links to it) the server at `handshake.url` presents. */
async function peerCertificate(handshake: DatedHandshake, host: string): Promise<DetailedPeerCertificate> {
  const timeoutMs = handshake.timeoutMs ?? 10_000;
  const port = Number(handshake.url.port || 443);
  const proxy = handshake.viaProxy ? proxyFor(handshake.url) : undefined;
  const tunnel: Socket | undefined = proxy
    ? await openTunnel(proxy, host, port, AbortSignal.timeout(timeoutMs))
    : undefined;
  return new Promise((resolve, reject) => {
    // Not verified here on purpose: this reads what the server presents, and trusts none of it.
    const socket = connect({
      host,
      port,
      ...(tunnel ? { socket: tunnel } : {}),
      ...(isIP(host) ? {} : { servername: host }),
      rejectUnauthorized: false,
      timeout: timeoutMs,
    });
    socket.once('secureConnect', () => {
      const peer = socket.getPeerCertificate(true);
      // Hung up as a client that is done, not reset: the server has nothing to report.
      socket.end();
      resolve(peer);
    });
    socket.once('timeout', () => socket.destroy(new Error(`no handshake within ${timeoutMs} ms`)));
    socket.once('error', (err) => {
      socket.destroy();
      reject(err);
    });
  });
}

/**
 * How far the server's clock is ahead of this machine's (negative: behind), from the `Date` header
 * of an answer received at `receivedAt` (this machine's wall clock); undefined without a readable one.
 */
export function serverClockOffsetMs(date: string | undefined, receivedAt = Date.now()): number | undefined {
  const at = date === undefined ? Number.NaN : Date.parse(date);
  return Number.isNaN(at) ? undefined : at - receivedAt;
}

/**
 * Below this the offset is not mentioned: the Date header has whole seconds and the answer takes its
 * time to arrive, and docs/security.md asks for clocks within a minute of true time.
 */
const noticeableOffsetMs = 60_000;

/** A clause naming the offset between the clocks, when it is noticeable; undefined otherwise. */
export function clockOffsetNote(offsetMs: number | undefined): string | undefined {
  if (offsetMs === undefined || Math.abs(offsetMs) < noticeableOffsetMs) return undefined;
  const seconds = Math.round(Math.abs(offsetMs) / 1000);
  // A server ahead of this machine means this machine is behind it.
  return `this machine's clock is ${seconds} s ${offsetMs > 0 ? 'behind' : 'ahead of'} the bootstrap server's (check both clocks)`;
}

/**
 * The server's "now" from an answer's `Date` header (what its Retry-After date is relative to), or this
 * machine's wall clock when the answer has no readable one. Trusting it gives the server nothing it
 * lacks: a Retry-After is capped (retry.ts) however it is read.
 */
export function serverNowOf(date: string | undefined): number {
  const now = Date.now();
  return now + (serverClockOffsetMs(date, now) ?? 0);
}
