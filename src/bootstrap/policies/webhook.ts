/**
 * `webhook`: the operator's own approval logic, called over HTTPS with mutual TLS. The controller
 * POSTs a versioned `BootstrapReview` (a summary of the request and the facts a verifying policy
 * established) and the webhook answers `{"verdict": "approve"|"deny"|"abstain", "reasons": [...]}`.
 * The webhook can only narrow: it never supplies a node name, SANs or group — an approval issues
 * exactly the verified facts (or, with no verifying policy, the claimed name alone). It fails closed:
 * nothing but a well-formed approval lets a request through. A webhook that cannot be reached, fails
 * TLS, does not answer in time, or answers 5xx or 429 is a dependency fault — the node is answered
 * 503 and retries; a malformed answer, another non-200 status or an explicit deny is a denial. Each
 * review sent is counted as call `BootstrapReview` of cloud `webhook` (never by URL: the labels stay
 * bounded).
 */
import type { Agent } from 'node:https';
import { z } from 'zod';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../../cloud/metrics.ts';
import { ConfigError, describeError, TooLargeError } from '../../errors.ts';
import { egressAgent } from '../../net/egress-proxy.ts';
import { type HttpsAnswer, httpsRequest } from '../../net/https-client.ts';
import { dependencyFault, isDependencyFault } from '../dependency.ts';
import type {
  BootstrapPolicy,
  BootstrapRequest,
  NodeFacts,
  PolicyContext,
  PolicyDecision,
} from '../types.ts';

/** The apiVersion of what the webhook receives. */
export const webhookApiVersion = 'bootstrap.kops-controller.io/v1';
/** The `call` label of a review sent to a webhook. */
export const webhookReviewCall = 'BootstrapReview';
/** The largest answer read. */
const maxAnswerBytes = 64 * 1024;

/** Options of the `webhook` policy. */
export interface WebhookPolicyOptions {
  /** `https://…` only. */
  url: string;
  /** PEM: the CA bundle the webhook's serving certificate must chain to. */
  ca: string;
  /** PEM: our client certificate and key (mTLS). */
  cert: string;
  key: string;
  /** Default 5 s. */
  timeoutMs?: number;
  /** The policy whose verified facts the webhook reviews (e.g. `aws`); without one, only the claimed name. */
  verifiedBy?: BootstrapPolicy;
  /** Where each review sent is counted (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

/** What the webhook receives (JSON). */
export interface BootstrapReview {
  apiVersion: string;
  kind: 'BootstrapReview';
  request: {
    id: string;
    claimedNodeName: string | null;
    remoteAddress: string;
    proof: BootstrapRequest['proof']['kind'];
    profiles: string[];
    receivedAt: string;
  };
  verifiedBy: string | null;
  /** The verified facts; null when no verifying policy is configured. */
  facts: NodeFacts | null;
}

const answerSchema = z.object({
  verdict: z.enum(['approve', 'deny', 'abstain']),
  reasons: z.array(z.string().max(1024)).max(32).default([]),
});

/** The webhook's answer. */
export type WebhookAnswer = z.output<typeof answerSchema>;

/** Builds the review document for a request and the facts verified so far. */
export function reviewOf(
  request: BootstrapRequest,
  verifiedBy: string | undefined,
  facts: NodeFacts | undefined,
): BootstrapReview {
  return {
    apiVersion: webhookApiVersion,
    kind: 'BootstrapReview',
    request: {
      id: request.id,
      claimedNodeName: request.claimedNodeName ?? null,
      remoteAddress: request.remoteAddress,
      proof: request.proof.kind,
      profiles: Object.keys(request.certificates),
      receivedAt: request.receivedAt.toISOString(),
    },
    verifiedBy: verifiedBy ?? null,
    facts: facts ?? null,
  };
}

/**
 * Combines the verifying policy's decision with the webhook's answer: the webhook may deny or
 * abstain (the verified decision stands), and its approval approves exactly the verified facts.
 */
export function combine(
  verified: PolicyDecision & { facts?: NodeFacts },
  answer: WebhookAnswer,
  url: string,
): PolicyDecision {
  const said = answer.reasons.length ? answer.reasons : [`webhook ${url} said ${answer.verdict}`];
  if (answer.verdict === 'deny') return { verdict: 'deny', reasons: said };
  if (answer.verdict === 'abstain') return verified;
  if (!verified.facts)
    return { verdict: 'deny', reasons: ['nothing is verified for the webhook to approve'] };
  return {
    verdict: 'approve',
    facts: { ...verified.facts, evidence: { ...verified.facts.evidence, webhook: url } },
    reasons: [...verified.reasons, ...said],
  };
}

/** The `webhook` policy. */
export function webhookPolicy(options: WebhookPolicyOptions): BootstrapPolicy {
  const url = new URL(options.url);
  if (url.protocol !== 'https:') throw new ConfigError(`webhook url ${options.url} must be https`);
  const agent = egressAgent('https:', {
    keepAlive: true,
    ca: options.ca,
    cert: options.cert,
    key: options.key,
    minVersion: 'TLSv1.2',
  });
  const timeoutMs = options.timeoutMs ?? 5_000;
  const calls = options.cloudCalls ?? noCloudCalls;
  return {
    name: 'webhook',
    evaluate: async (request: BootstrapRequest, context: PolicyContext) => {
      const verified = await verifiedDecision(request, context, options.verifiedBy);
      if (verified.verdict === 'deny' || (verified.verdict === 'abstain' && options.verifiedBy))
        return verified;
      const review = reviewOf(request, options.verifiedBy?.name, verified.facts);
      let answer: WebhookAnswer;
      const started = performance.now();
      const outcome: { result: CloudCallResult } = { result: 'error' };
      try {
        answer = await post(url, agent, review, timeoutMs, outcome);
      } catch (err) {
        if (isDependencyFault(err)) throw err;
        return {
          verdict: 'deny',
          reasons: [`webhook ${options.url} answered ${describeError(err)}, so the request is denied`],
        };
      } finally {
        calls.request('webhook', webhookReviewCall, outcome.result);
        calls.duration('webhook', webhookReviewCall, secondsSince(started));
      }
      return combine(verified, answer, options.url);
    },
  };
}

type Verified = PolicyDecision & { facts?: NodeFacts };

/** The verifying policy's decision, or an abstention carrying the claimed name (no SANs) when there is none. */
async function verifiedDecision(
  request: BootstrapRequest,
  context: PolicyContext,
  verifiedBy?: BootstrapPolicy,
): Promise<Verified> {
  if (verifiedBy) return verifiedBy.evaluate(request, context);
  const claimed = request.claimedNodeName;
  if (!claimed) return { verdict: 'deny', reasons: ['the request names no node for the webhook to review'] };
  return {
    verdict: 'abstain',
    facts: { nodeName: claimed, dnsNames: [], ipAddresses: [], evidence: { verified: 'webhook-only' } },
    reasons: [`node name ${claimed} as claimed`],
  };
}

/**
 * Sends the review; `outcome.result` stays `error` unless the webhook answers (a status) usably.
 * Rejects with a dependency fault when the webhook failed (no answer in time, transport or TLS
 * error, 5xx, 429), or with an Error saying what was wrong with an answer that is not a verdict.
 */
async function post(
  url: URL,
  agent: Agent,
  review: BootstrapReview,
  timeoutMs: number,
  outcome: { result: CloudCallResult },
): Promise<WebhookAnswer> {
  const body = JSON.stringify(review);
  let answer: HttpsAnswer;
  try {
    answer = await httpsRequest({
      url,
      method: 'POST',
      agent,
      headers: {
        'content-type': 'application/json',
        accept: 'application/json',
      },
      body,
      timeoutMs,
      maxBodyBytes: maxAnswerBytes,
    });
  } catch (err) {
    // Too long to be a verdict: malformed, not a failure.
    if (err instanceof TooLargeError) throw new Error(`with more than ${maxAnswerBytes} bytes`);
    throw dependencyFault('webhook', err);
  }
  const status = answer.status;
  if (status !== 200) {
    // Another 2xx carries no answer either: the webhook is broken, not refusing.
    const result = httpCallResult(status);
    outcome.result = result === 'ok' ? 'error' : result;
    const failed = status >= 500 || status === 429;
    throw failed ? dependencyFault('webhook', new Error(`HTTP ${status}`)) : new Error(`HTTP ${status}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body.toString('utf8'));
  } catch {
    throw new Error('with something that is not JSON');
  }
  const verdict = answerSchema.safeParse(parsed);
  if (!verdict.success) {
    throw new Error('with something that is not {"verdict": "approve"|"deny"|"abstain", "reasons": [...]}');
  }
  outcome.result = 'ok';
  return verdict.data;
}
