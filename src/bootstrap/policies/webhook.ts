/**
 * `webhook`: the operator's own approval logic, called over HTTPS with mutual TLS. The controller
 * POSTs a versioned `BootstrapReview` (a summary of the request and the facts a verifying policy
 * established) and the webhook answers `{"verdict": "approve"|"deny"|"abstain", "reasons": [...]}`.
 * The webhook can only narrow: it never supplies a node name, SANs or group — an approval issues
 * exactly the verified facts (or, with no verifying policy, the claimed name alone). It fails closed:
 * nothing but a well-formed approval lets a request through, and nothing but a well-formed deny is a
 * denial. A webhook that cannot be reached, fails TLS, does not answer in time, answers any status
 * but 200 (5xx, 429, a 4xx refusing our call, a redirect, which is never followed) or answers a 200
 * that is not a well-formed verdict (not JSON, fields of the wrong type, a key given twice, another
 * apiVersion or kind, over 64 KiB) is a dependency fault — the node is answered 503 and retries. Each
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
import { ConfigError, TooLargeError, UnavailableError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { egressAgent } from '../../net/egress-proxy.ts';
import { type HttpsAnswer, httpsRequest, StaleConnectionError } from '../../net/https-client.ts';
import { type CallTicket, type CircuitBreaker, circuitOf } from '../circuit-breaker.ts';
import { dependencyFault } from '../dependency.ts';
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
  /** Where pausing and resuming reviews is said (circuit-breaker.ts); default nowhere. */
  logger?: Logger;
  /** The circuit of reviews (default: one of the policy's own, with the breaker's defaults). */
  circuit?: CircuitBreaker;
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

/**
 * The answer: unknown fields are ignored (they never widen anything), but an apiVersion or kind, when
 * the webhook states one, must be the review's own — another version's `verdict` may mean another thing.
 */
const answerSchema = z.object({
  apiVersion: z.literal(webhookApiVersion).optional(),
  kind: z.literal('BootstrapReview').optional(),
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
  // Reviews go out one per request: while the webhook fails every one, most are not sent.
  const circuit = options.circuit ?? circuitOf('the approval webhook', options);
  return {
    name: 'webhook',
    evaluate: async (request: BootstrapRequest, context: PolicyContext) => {
      const verified = await verifiedDecision(request, context, options.verifiedBy);
      if (verified.verdict === 'deny' || (verified.verdict === 'abstain' && options.verifiedBy))
        return verified;
      const review = reviewOf(request, options.verifiedBy?.name, verified.facts);
      let answer: WebhookAnswer;
      const started = performance.now();
      const outcome: ReviewOutcome = { result: 'error' };
      let ticket: CallTicket;
      try {
        ticket = circuit.admit();
      } catch (err) {
        throw dependencyFault('webhook', err);
      }
      try {
        answer = await post(url, agent, review, timeoutMs, outcome);
      } finally {
        // Only a webhook that cannot be reached or does not answer in time pauses it. Any HTTP answer
        // shows it is up, even one that is no verdict: the review is the requester's, and a webhook
        // that fails on some reviews must not let their senders pause it for everyone.
        if (outcome.status === undefined) ticket.failed();
        else ticket.answered();
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

/** A webhook answer that is no verdict: a fault of the webhook, never a decision on the node. */
function malformed(what: string): Error {
  return dependencyFault(
    'webhook',
    new UnavailableError(`the webhook answered ${what}`, { details: { reason: 'malformed-answer' } }),
  );
}

/**
 * The first key an object of `text` (valid JSON) gives twice, decoded, or undefined. JSON.parse keeps
 * the last of them, so `{"verdict":"deny","verdict":"approve"}` would read as an approval: such an
 * answer says two things and is neither.
 */
function duplicateKeyOf(text: string): string | undefined {
  const objects: Array<Set<string> | undefined> = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '{') objects.push(new Set());
    else if (c === '[') objects.push(undefined);
    else if (c === '}' || c === ']') objects.pop();
    else if (c === '"') {
      let end = i + 1;
      while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      const keys = objects.at(-1);
      let next = end + 1;
      while (/\s/.test(text[next] ?? '')) next++;
      if (keys && text[next] === ':') {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return key;
        keys.add(key);
      }
      i = end;
    }
  }
  return undefined;
}

/** How a review ended: its call result, and the HTTP status when the webhook answered at all. */
interface ReviewOutcome {
  result: CloudCallResult;
  status?: number;
}

/**
 * Sends the review; `outcome.result` stays `error` unless the webhook answers a well-formed verdict.
 * Rejects with a dependency fault when the webhook failed: no answer in time, a transport or TLS
 * error, any status but 200, or a 200 that is not a well-formed verdict (its cause says what).
 */
async function post(
  url: URL,
  agent: Agent,
  review: BootstrapReview,
  timeoutMs: number,
  outcome: ReviewOutcome,
): Promise<WebhookAnswer> {
  const body = JSON.stringify(review);
  const send = () =>
    httpsRequest({
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
  let answer: HttpsAnswer;
  try {
    try {
      answer = await send();
    } catch (err) {
      // A kept-alive connection the webhook closed as the review went out: the review never reached
      // it (and changes nothing if it did), so it is sent once more, on a new connection.
      if (!(err instanceof StaleConnectionError)) throw err;
      answer = await send();
    }
  } catch (err) {
    if (err instanceof TooLargeError) throw malformed(`with more than ${maxAnswerBytes} bytes`);
    throw dependencyFault('webhook', err);
  }
  const status = answer.status;
  outcome.status = status;
  if (status !== 200) {
    // Only a 200 carries a verdict: a 4xx refuses our call (its client certificate, its path), a
    // redirect (never followed) says the webhook is elsewhere, another 2xx says nothing. The operator
    // fixes the webhook or its configuration while the node retries.
    const result = httpCallResult(status);
    outcome.result = result === 'ok' ? 'error' : result;
    throw dependencyFault('webhook', new UnavailableError(`the webhook answered HTTP ${status}`));
  }
  const text = answer.body.toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw malformed('a 200 whose body is not JSON');
  }
  const twice = duplicateKeyOf(text);
  if (twice !== undefined) throw malformed(`an object with ${JSON.stringify(twice)} twice`);
  const verdict = answerSchema.safeParse(parsed);
  if (!verdict.success) {
    const wrong = verdict.error.issues.map((issue) => issue.path.join('.') || '(the answer)').join(', ');
    throw malformed(
      `something that is not {"verdict": "approve"|"deny"|"abstain", "reasons": [...]} (${wrong.slice(0, 200)})`,
    );
  }
  outcome.result = 'ok';
  return verdict.data;
}
