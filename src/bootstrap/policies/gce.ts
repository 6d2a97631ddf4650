/**
 * `gce`: cloud-attested bootstrap on Google Compute Engine. Two proofs are accepted:
 * - a Google instance identity token (`x-gce-identity`, `format=full`) minted for this controller's
 *   URL as audience, fresh (issued within `maxAgeMs`) and used once;
 * - kops' `x-gce-tpm`: data naming project, zone and instance, the request body's hash, a timestamp
 *   and the kops audience, signed by the instance's Shielded VM signing key (fetched from the compute
 *   API, never from the request).
 * Either way the instance group comes only from the cloud: the MIG that lists the instance and its
 * immutable template (GceNodeIdentifier) — the instance's live metadata never decides the group — read
 * fresh for every request (never from the identifier's cache of verified memberships), so an instance
 * abandoned from its MIG a moment ago is seen. A MIG recreates an instance under the same name, so an
 * identity token is also held to the instance's numeric id: its `instance_id` must be the id of the
 * incarnation the compute API reports now. (A TPM proof needs no id: it verifies only with the Shielded
 * VM key of the incarnation read now, and a new incarnation has new keys.)
 * An identity token does not cover the request body, so it is spent on one request (replay-guard.ts),
 * keyed by its signature's bytes — not by how they are spelled, since base64url leaves bits of the
 * last character unread and a re-spelled token would otherwise be a fresh one. A TPM proof's signed
 * data carries this body's hash, so it passes with no other body and needs no marker. A bad proof and
 * the cloud's verdict on the instance are denials; Google's keys, the compute API or the apiserver
 * failing are dependency faults (503, the node retries).
 */

import { createHash, createPublicKey, verify } from 'node:crypto';
import type { ComputeClient } from '../../cloud/gce/compute.ts';
import type { GceIdentityTokenVerifier } from '../../cloud/gce/identity-token.ts';
import { formatGceProviderID, isGceName, isGceZone } from '../../cloud/gce/resource-names.ts';
import type { NodeIdentifier, NodeIdentity } from '../../cloud/types.ts';
import { withDeadline } from '../../deadline.ts';
import { describeError, KopsError } from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';
import { quoted } from '../../quote.ts';
import {
  defaultCloudLookupTimeoutMs,
  dependencyFault,
  isCloudVerdict,
  isDependencyFault,
} from '../dependency.ts';
import { type ReplayGuard, requestDigest } from '../replay-guard.ts';
import type { BootstrapPolicy, BootstrapRequest, NodeFacts, PolicyDecision } from '../types.ts';
import { describeAge } from './proof-age.ts';

/** The audience kops nodes put in TPM-signed data. */
export const kopsGceTpmAudience = 'kops.k8s.io/node-bootstrap';
/** Default freshness window of either proof. */
export const defaultGceProofMaxAgeMs = 5 * 60 * 1000;

/** Options of the `gce` policy. */
export interface GcePolicyOptions {
  /** The cluster's project: the only one whose instances may bootstrap. */
  project: string;
  /** The cluster's region (`server.provider.gce.region`): a proof for a zone outside it is denied, as kops. */
  region?: string;
  /**
   * Identifies instances through MIG membership and templates (GceNodeIdentifier). Its identities must
   * carry the instance's numeric id as its `incarnation.id` (the GCE identifier's): without it no identity token is approved.
   */
  identifier: NodeIdentifier;
  /** Verifies identity tokens; without it `x-gce-identity` proofs are denied. */
  tokenVerifier?: GceIdentityTokenVerifier;
  /** Reads Shielded VM keys; without it `x-gce-tpm` proofs are denied. */
  compute?: Pick<ComputeClient, 'getShieldedInstanceIdentity'>;
  replayGuard: ReplayGuard;
  /** How old a proof may be (default 5 minutes; `server.provider.gce.MaxTimeSkew` for TPM proofs). */
  maxAgeMs?: number;
  /** Deadline of each compute lookup (the instance and its group, its Shielded VM key; default 10 s). */
  lookupTimeoutMs?: number;
}

/** The instance a verified proof speaks for. */
interface ProvenInstance {
  project: string;
  zone: string;
  name: string;
  issuedAtMs: number;
  /**
   * The numeric id of the incarnation the proof was made on, when the proof names one (an identity
   * token's `instance_id`); it must be the id of the instance the cloud reports now.
   */
  numericId?: string;
  /** The key it is spent under; none for a proof whose signature covers this request body. */
  replayKey?: string;
  evidence: Record<string, string>;
}

class ProofError extends Error {}

function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

function lookupTimeoutOf(options: GcePolicyOptions): number {
  return options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs;
}

/** The replay key of an identity token: the SHA-256 of its kind and its signature's bytes. */
function replayKeyOf(signature: Buffer): string {
  return createHash('sha256').update('gce-identity-token\n').update(signature).digest('hex');
}

/** The `gce` policy; abstains for requests without a GCE proof. */
export function gcePolicy(options: GcePolicyOptions): BootstrapPolicy {
  const maxAgeMs = options.maxAgeMs ?? defaultGceProofMaxAgeMs;
  return {
    name: 'gce',
    evaluate: async (request, context) => {
      let proven: ProvenInstance;
      try {
        if (request.proof.kind === 'gce-identity-token')
          proven = await fromIdentityToken(request.proof.token, options);
        else if (request.proof.kind === 'gce-tpm')
          proven = await fromTpmProof(request.proof.token, request, options);
        else return { verdict: 'abstain', reasons: ['the request carries no GCE proof'] };
      } catch (err) {
        if (isDependencyFault(err)) throw err;
        return deny(`GCE identity proof rejected: ${describeError(err)}`);
      }
      if (proven.project !== options.project) {
        return deny(
          `the proof is for project ${proven.project}, not this cluster's project ${options.project}`,
        );
      }
      if (options.region && !proven.zone.startsWith(`${options.region}-`)) {
        return deny(`the proof is for zone ${proven.zone}, outside this cluster's region ${options.region}`);
      }
      const age = context.now().getTime() - proven.issuedAtMs;
      if (Math.abs(age) > maxAgeMs) {
        const window = `proofs are accepted within ${maxAgeMs / 1000} s of this controller's clock`;
        return deny(
          request.proof.kind === 'gce-identity-token'
            ? // Google's clock set iat, not the node's.
              `the identity token was issued by Google ${describeAge(age)}; ${window} (if it was just minted, check this controller's clock)`
            : `the proof was made ${describeAge(age)}; ${window} (check the node's clock)`,
        );
      }
      const fresh =
        proven.replayKey === undefined ||
        (await options.replayGuard
          .claim(proven.replayKey, new Date(proven.issuedAtMs + maxAgeMs), requestDigest(request.body))
          .catch((err: unknown) => {
            throw dependencyFault('kubernetes-api', err);
          }));
      if (!fresh) return deny('the proof was already used (replayed); make a new one per request');
      const providerID = formatGceProviderID(proven);
      // maxAgeMs 0: the MIG membership is verified now, not taken from the identifier's cache (an hour
      // by default), so an instance abandoned from its MIG since an earlier lookup is refused.
      const lookup = options.identifier.identify([providerID], { maxAgeMs: 0 });
      const result = (
        await withDeadline(lookup, lookupTimeoutOf(options), `identify ${providerID}`).catch(
          (err: unknown) => {
            throw dependencyFault('gce-compute', err);
          },
        )
      ).get(providerID);
      if (!result?.ok) {
        if (result && !isCloudVerdict(result.error)) throw dependencyFault('gce-compute', result.error);
        return deny(
          `the cloud does not vouch for ${providerID}: ${result ? describeError(result.error) : 'no answer'}`,
        );
      }
      if (proven.numericId !== undefined) {
        const current = numericIdOf(result.identity);
        // Fail closed: an identifier that does not say which incarnation it read cannot vouch for a
        // token bound to one.
        if (current === undefined) {
          return deny(
            `the identity of ${providerID} carries no numeric instance id to compare with the token's instance_id ${proven.numericId}; configure the GCE node identifier`,
          );
        }
        if (current !== proven.numericId) {
          return deny(
            `the token was minted on instance id ${proven.numericId}, but instance ${proven.name} is now instance id ${current}: the instance was recreated under the same name (another incarnation); make a new token on the running instance`,
          );
        }
      }
      if (result.identity.state !== 'running' && result.identity.state !== 'pending') {
        return deny(`instance ${proven.name} is ${result.identity.state}, not running`);
      }
      return {
        verdict: 'approve',
        facts: factsOf(result.identity, proven.evidence),
        reasons: [
          `instance ${proven.name} in ${proven.zone} proved its identity; its MIG and template say group ${result.identity.instanceGroup}`,
        ],
      };
    },
  };
}

async function fromIdentityToken(token: string, options: GcePolicyOptions): Promise<ProvenInstance> {
  if (!options.tokenVerifier) throw new ProofError('identity tokens are not enabled on this controller');
  const claims = await options.tokenVerifier.verify(token).catch((err: unknown) => {
    // The verifier throws UnauthenticatedError for the token, anything else for Google's keys.
    throw err instanceof KopsError && err.kind === 'unauthenticated'
      ? err
      : dependencyFault('gce-identity-keys', err);
  });
  return {
    project: claims.projectId,
    zone: claims.zone,
    name: claims.instanceName,
    issuedAtMs: claims.issuedAt * 1000,
    numericId: claims.instanceId,
    // Verified, so the token is header.payload.signature with a base64url signature.
    replayKey: replayKeyOf(Buffer.from(token.slice(token.lastIndexOf('.') + 1), 'base64url')),
    evidence: {
      proof: 'identity-token',
      project: claims.projectId,
      serviceAccount: claims.serviceAccountEmail ?? claims.serviceAccountId,
    },
  };
}

/** kops' TPM-signed data, as the node marshals it. */
interface TpmData {
  gcpProjectID: string;
  zone: string;
  instance: string;
  requestHash: string;
  timestamp: number;
  audience: string;
}

function decodeBase64(value: unknown, what: string): Buffer {
  if (typeof value !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(value) || value.length > 16_384) {
    throw new ProofError(`${what} is not base64`);
  }
  return Buffer.from(value, 'base64');
}

function parseJson(bytes: Buffer, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new ProofError(`${what} is not JSON`);
  }
  if (!isJsonObject(value)) throw new ProofError(`${what} is not an object`);
  return value as Record<string, unknown>;
}

async function fromTpmProof(
  token: string,
  request: BootstrapRequest,
  options: GcePolicyOptions,
): Promise<ProvenInstance> {
  if (!options.compute) throw new ProofError('TPM proofs are not enabled on this controller');
  const outer = parseJson(decodeBase64(token, 'the TPM proof'), 'the TPM proof');
  const dataBytes = decodeBase64(outer['data'], 'the signed data');
  const signature = decodeBase64(outer['signature'], 'the signature');
  const data = parseJson(dataBytes, 'the signed data') as Partial<TpmData>;
  if (data.audience !== kopsGceTpmAudience) throw new ProofError(`the audience is not ${kopsGceTpmAudience}`);
  const { gcpProjectID: project, zone, instance: name, timestamp } = data;
  if (
    typeof project !== 'string' ||
    typeof zone !== 'string' ||
    typeof name !== 'string' ||
    !project ||
    !zone ||
    !name
  ) {
    throw new ProofError('the signed data must name gcpProjectID, zone and instance');
  }
  if (typeof timestamp !== 'number' || !Number.isFinite(timestamp))
    throw new ProofError('the signed data has no timestamp');
  const bodyHash = createHash('sha256').update(request.body).digest();
  if (!decodeBase64(data.requestHash, 'requestHash').equals(bodyHash)) {
    throw new ProofError('requestHash is not the SHA-256 of this request body (signed for another request)');
  }
  // Nothing of the signed data is verified yet: its fields are quoted and cut (src/quote.ts), since a
  // denial's reason reaches the audit trail.
  if (project !== options.project) {
    // Checked before the compute call so a foreign project costs us nothing.
    throw new ProofError(`the proof is for project ${quoted(project)}, not ${options.project}`);
  }
  // Read before the signature is checked and placed in the API's path: a name that is none (`..`)
  // would reach another path, whose answer says nothing about the proof. Refused here.
  if (!isGceZone(zone)) throw new ProofError(`the proof names zone ${quoted(zone)}, which is not a GCE zone`);
  if (!isGceName(name))
    throw new ProofError(`the proof names instance ${quoted(name)}, which is not a GCE instance name`);
  const identity = await withDeadline(
    options.compute.getShieldedInstanceIdentity(zone, name),
    lookupTimeoutOf(options),
    `getShieldedInstanceIdentity ${zone}/${name}`,
  ).catch((err: unknown) => {
    // An instance the API does not know (or a malformed name) is the proof's fault.
    throw isCloudVerdict(err) ? err : dependencyFault('gce-compute', err);
  });
  const ekPub = identity.signingKey?.ekPub;
  if (!ekPub) throw new ProofError(`instance ${name} has no Shielded VM signing key`);
  if (!verify('sha256', dataBytes, createPublicKey(ekPub), signature)) {
    throw new ProofError(`the signature is not by the Shielded VM signing key of ${name}`);
  }
  return {
    project,
    zone,
    name,
    issuedAtMs: timestamp * 1000,
    evidence: { proof: 'tpm', project, zone },
  };
}

/** The numeric instance id a GCE identity carries, if the identifier put one there. */
function numericIdOf(identity: NodeIdentity): string | undefined {
  const id = identity.incarnation?.id;
  return id !== undefined && id !== '' ? id : undefined;
}

/**
 * Node facts from the cloud's record: name = instance name, SANs = its internal addresses — each
 * interface's `networkIP` and, on IPv6 subnets, its internal `ipv6Address`, as kops puts them.
 */
function factsOf(identity: NodeIdentity, evidence: Record<string, string>): NodeFacts {
  return {
    nodeName: identity.instanceId,
    instanceGroup: identity.instanceGroup,
    instanceId: identity.instanceId,
    // The numeric id its certificates name: the MIG recreates the instance under its name, never its id.
    ...(identity.incarnation ? { incarnationId: identity.incarnation.id } : {}),
    dnsNames: [],
    ipAddresses: identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address),
    evidence: {
      ...evidence,
      providerID: identity.providerID,
      zone: identity.zone ?? '',
      // The incarnation the cloud reported (for a token, checked equal to its instance_id).
      gceInstanceId: numericIdOf(identity) ?? '',
    },
  };
}
