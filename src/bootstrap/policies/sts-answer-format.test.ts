// STS answers GetCallerIdentity as JSON when asked with `Accept: application/json`
// (aws-iam-authenticator asks it so). A 200 no one can read is a fault (503), so a node that could
// choose the answer's form would turn its own denial into an STS fault at will: an Accept it signed
// is sent (STS needs it for the signature) and its JSON answer read as the XML one; an unsigned Accept
// is not sent (nor any header it did not sign), and Accept-Encoding is refused.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { signAwsStsProof } from '../../agent/aws-proof.ts';
import {
  type ScriptedAnswer,
  type ScriptedRequest,
  startScriptedApi,
} from '../../cloud/scripted-api.test-support.ts';
import { KopsError, UnauthenticatedError } from '../../errors.ts';
import { parseStsProof } from './aws-sts-proof.ts';
import { StsClient } from './sts-client.ts';

const closers: Array<() => unknown> = [];
after(async () => {
  for (const close of closers) await close();
});

/** An StsClient replaying to a loopback STS that answers as `script` says. */
async function stsAnswering(script: (request: ScriptedRequest) => ScriptedAnswer): Promise<StsClient> {
  const api = await startScriptedApi(script);
  closers.push(() => api.close());
  return new StsClient(api.url);
}

test('attack: a proof asking STS for JSON (Accept header) is read as the XML answer is: a verdict on the caller, not an STS fault', async () => {
  const accepted: (string | undefined)[] = [];
  const arn = 'arn:aws:iam::999999999999:user/mallory';
  const sts = await stsAnswering(({ headers }) => {
    accepted.push(headers.accept);
    return headers.accept === 'application/json'
      ? {
          body: {
            GetCallerIdentityResponse: {
              GetCallerIdentityResult: { Account: '999999999999', Arn: arn, UserId: 'AIDA' },
            },
          },
        }
      : {
          raw: true,
          headers: { 'content-type': 'text/xml' },
          body: `<GetCallerIdentityResponse><GetCallerIdentityResult><Arn>${arn}</Arn><UserId>AIDA</UserId><Account>999999999999</Account></GetCallerIdentityResult></GetCallerIdentityResponse>`,
        };
  });
  const replay = {
    method: 'POST',
    url: '/',
    headers: {
      host: ['sts.us-east-1.amazonaws.com'],
      'x-amz-date': ['20260301T120000Z'],
      accept: ['application/json'],
    },
    body: 'Action=GetCallerIdentity&Version=2011-06-15',
  };
  const outcome = await sts.call(replay).then(
    (caller) => `caller ${caller.arn}`,
    (err: unknown) => (err instanceof KopsError ? err.kind : String(err)),
  );
  assert.equal(accepted[0], 'application/json', 'the node-chosen Accept header reached STS');
  assert.equal(outcome, `caller ${arn}`);
});

const proofBody = Buffer.from('{}');

/** A v1 proof of `proofBody`, signed, with `extra` headers added to it afterwards (unsigned). */
function v1ProofWith(extra: Record<string, string[]>): string {
  const token = signAwsStsProof(proofBody, { accessKeyId: 'AKIA', secretAccessKey: 's' }, 'us-east-1', 1);
  const headers = JSON.parse(Buffer.from(token.slice(token.indexOf(' ') + 1), 'base64').toString()) as Record<
    string,
    string[]
  >;
  return Buffer.from(JSON.stringify({ ...headers, ...extra })).toString('base64');
}

test('attack: a proof carrying Accept-Encoding (which would have STS compress its answer past our reading) is refused', () => {
  assert.throws(
    () =>
      parseStsProof(
        1,
        v1ProofWith({ 'Accept-Encoding': ['gzip'] }),
        proofBody,
        'sts.us-east-1.amazonaws.com',
      ),
    UnauthenticatedError,
  );
});

test('an Accept header the node did not sign is not sent to STS: the form of the answer is the controller to choose', () => {
  const forged = v1ProofWith({
    Accept: ['application/cbor'],
    'X-Amz-Target': ['AWSSecurityTokenServiceV20110615.GetCallerIdentity'],
  });
  const replay = parseStsProof(1, forged, proofBody, 'sts.us-east-1.amazonaws.com');
  assert.equal(replay.request.headers['accept'], undefined);
  assert.equal(replay.request.headers['x-amz-target'], undefined, 'no header the node did not sign is sent');
  assert.ok(replay.request.headers['x-kops-request-sha'], 'the signed headers are kept');
});

test('STS throttling in its JSON form (a node signed Accept: application/json) is throttling, a fault; its JSON refusal is a denial', async () => {
  const answers = [
    { status: 400, body: { Error: { Code: 'Throttling', Message: 'Rate exceeded', Type: 'Sender' } } },
    { status: 403, body: { Error: { Code: 'SignatureDoesNotMatch', Message: 'no', Type: 'Sender' } } },
  ];
  const sts = await stsAnswering(() => {
    const answer = answers.shift();
    return { status: answer?.status ?? 500, body: answer?.body ?? {} };
  });
  const replay = {
    method: 'POST',
    url: '/',
    headers: { host: ['sts.us-east-1.amazonaws.com'], accept: ['application/json'] },
    body: 'Action=GetCallerIdentity&Version=2011-06-15',
  };
  const kinds: string[] = [];
  for (let i = 0; i < 2; i++) {
    await sts.call(replay).then(
      () => kinds.push('caller'),
      (err: unknown) => kinds.push(err instanceof KopsError ? `${err.kind}: ${err.message}` : String(err)),
    );
  }
  assert.match(kinds[0] ?? '', /^unavailable: STS failed \(Throttling: Rate exceeded\)/);
  assert.match(kinds[1] ?? '', /^unauthenticated: SignatureDoesNotMatch: no/);
});
