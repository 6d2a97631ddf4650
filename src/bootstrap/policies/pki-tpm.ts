/**
 * `pki-tpm`: kops metal's bootstrap (pkg/bootstrap/pkibootstrap/pkiverifier). The machine signs a
 * record naming itself, the request body's SHA-256, the time and the kops audience with the ECDSA key
 * whose public half the operator registered in its `Host` object (`kops-system/<host name>`); the
 * Host also says the instance group. Checked, in kops' order: audience, clock skew
 * (`server.pki.MaxTimeSkew`, default 300 s), body hash, the Host, its key, the signature. Beyond
 * kops: the host name must be a valid object name before anything is looked up, a request that
 * names a node (a CSR subject) must name the same host, and a proof is spent on one request.
 *
 * One-time use is stricter here than for the cloud proofs (replay-guard.ts lets the byte-identical
 * request through again, as its own retry): nodeup signs a new record for every attempt, so the same
 * record arriving twice is never a retry. The record is keyed by its signed bytes, not by the
 * signature, because ECDSA signatures are not unique — the key holder can sign one record many ways,
 * and anyone can turn (r, s) into the equally valid (r, n − s).
 *
 * A Host that does not exist, lacks a key or group, or whose key does not verify is a denial; the API
 * server failing or not answering is a dependency fault (503, the node retries).
 */

import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto';
import type { HostLookup, HostObject } from '../../cloud/metal/hosts.ts';
import { hostNamespace } from '../../cloud/metal/hosts.ts';
import {
  type DecodedPkiTpmToken,
  decodePkiTpmToken,
  defaultPkiTpmMaxTimeSkewSeconds,
  pkiTpmAudience,
  pkiTpmRequestHash,
} from '../../cloud/metal/pki-tpm-token.ts';
import { withDeadline } from '../../deadline.ts';
import { isDnsSubdomain } from '../../dns-name.ts';
import { describeError } from '../../errors.ts';
import { quoted } from '../../quote.ts';
import { defaultCloudLookupTimeoutMs, dependencyFault } from '../dependency.ts';
import type { ReplayGuard } from '../replay-guard.ts';
import type { BootstrapPolicy, NodeFacts, PolicyDecision } from '../types.ts';

/** Options of the `pki-tpm` policy. */
export interface PkiTpmPolicyOptions {
  /** Reads `Host` objects (HostRegistry). */
  hosts: HostLookup;
  replayGuard: ReplayGuard;
  /** How far the proof's timestamp may be from our clock, in seconds (kops' `MaxTimeSkew`; default 300). */
  maxTimeSkewSeconds?: number;
  /** Deadline of the Host lookup (default 10 s). */
  lookupTimeoutMs?: number;
}

function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

/** The replay key of a proof: the SHA-256 of its signed record. */
function replayDigest(dataBytes: Buffer): string {
  return createHash('sha256').update('pki-tpm\n').update(dataBytes).digest('hex');
}

/** The first failed check of the record itself (no lookups), or undefined when it passes. */
function recordProblem(token: DecodedPkiTpmToken, body: Buffer, nowMs: number, skewSeconds: number) {
  const { data } = token;
  if (data.audience !== pkiTpmAudience) return `the audience is not ${pkiTpmAudience}`;
  const skew = Math.abs(nowMs / 1000 - data.timestamp);
  if (skew > skewSeconds) {
    return `the proof's timestamp is ${Math.round(skew)} s from this controller's clock; at most ${skewSeconds} s is accepted (check the node's clock)`;
  }
  if (!data.requestHash.equals(pkiTpmRequestHash(body))) {
    return 'requestHash is not the SHA-256 of this request body (signed for another request)';
  }
  if (!isDnsSubdomain(data.instance)) return `the instance ${quoted(data.instance)} is not a host name`;
  return undefined;
}

/** The Host's ECDSA key, or why the Host cannot vouch for anyone. */
function hostKey(host: HostObject): { key: KeyObject; instanceGroup: string } | { problem: string } {
  const where = `host ${hostNamespace}/${host.metadata.name}`;
  // Read as the API server sent them: the CRD's schema makes both strings, a broken answer may not.
  const { publicKey: pem, instanceGroup } = (host.spec ?? {}) as {
    publicKey?: unknown;
    instanceGroup?: unknown;
  };
  if (typeof pem !== 'string' || !pem) return { problem: `${where} has no spec.publicKey` };
  if (typeof instanceGroup !== 'string' || !instanceGroup) {
    return { problem: `${where} has no spec.instanceGroup` };
  }
  if (!isDnsSubdomain(instanceGroup)) {
    return { problem: `${where}: spec.instanceGroup ${JSON.stringify(instanceGroup)} is not a valid name` };
  }
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: 'pem' });
  } catch (err) {
    return { problem: `${where}: spec.publicKey is not a PEM public key (${describeError(err)})` };
  }
  if (key.asymmetricKeyType !== 'ec') {
    return { problem: `${where}: spec.publicKey is ${key.asymmetricKeyType}; kops verifies ECDSA keys only` };
  }
  return { key, instanceGroup };
}

/** Whether `signature` (ASN.1 DER, as Go's `ecdsa.SignASN1`) signs SHA-256(`data`) with `key`. */
function signatureVerifies(key: KeyObject, data: Buffer, signature: Buffer): boolean {
  try {
    return verify('sha256', data, key, signature);
  } catch {
    return false;
  }
}

/** The `pki-tpm` policy; abstains for requests without an `x-pki-tpm` proof. */
export function pkiTpmPolicy(options: PkiTpmPolicyOptions): BootstrapPolicy {
  const skewSeconds = options.maxTimeSkewSeconds || defaultPkiTpmMaxTimeSkewSeconds;
  const lookupTimeoutMs = options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs;
  return {
    name: 'pki-tpm',
    evaluate: async (request, context) => {
      if (request.proof.kind !== 'pki-tpm') {
        return { verdict: 'abstain', reasons: ['the request carries no x-pki-tpm proof'] };
      }
      let token: DecodedPkiTpmToken;
      try {
        token = decodePkiTpmToken(request.proof.token);
      } catch (err) {
        return deny(`x-pki-tpm proof rejected: ${describeError(err)}`);
      }
      const problem = recordProblem(token, request.body, context.now().getTime(), skewSeconds);
      if (problem) return deny(`x-pki-tpm proof rejected: ${problem}`);
      const name = token.data.instance;
      if (request.claimedNodeName !== undefined && request.claimedNodeName !== name) {
        return deny(
          `the proof is for host ${name}, but the request asks for node ${request.claimedNodeName}`,
        );
      }
      const host = await withDeadline(options.hosts.get(name), lookupTimeoutMs, `read host ${name}`).catch(
        (err: unknown) => {
          throw dependencyFault('kubernetes-api', err);
        },
      );
      if (!host) return deny(`no host ${hostNamespace}/${name} is registered (kops-controller host add)`);
      const registered = hostKey(host);
      if ('problem' in registered) return deny(registered.problem);
      if (!signatureVerifies(registered.key, token.dataBytes, token.signature)) {
        return deny(`the signature is not by the key registered for host ${name}`);
      }
      const fresh = await options.replayGuard
        .claim(
          replayDigest(token.dataBytes),
          new Date((token.data.timestamp + skewSeconds) * 1000),
          request.id,
        )
        .catch((err: unknown) => {
          throw dependencyFault('kubernetes-api', err);
        });
      if (!fresh) return deny('the proof was already used (replayed); sign a new one per request');
      const facts: NodeFacts = {
        nodeName: name,
        instanceGroup: registered.instanceGroup,
        instanceId: name,
        // kops certifies no extra names for metal hosts: the Host records no addresses.
        dnsNames: [],
        ipAddresses: [],
        evidence: {
          proof: 'pki-tpm',
          host: `${hostNamespace}/${name}`,
          keySha256: createHash('sha256')
            .update(registered.key.export({ format: 'der', type: 'spki' }))
            .digest('hex'),
        },
      };
      return {
        verdict: 'approve',
        facts,
        reasons: [
          `host ${name} signed with its registered key; its Host says group ${registered.instanceGroup}`,
        ],
      };
    },
  };
}
