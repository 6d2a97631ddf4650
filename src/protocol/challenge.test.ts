import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import {
  answerMatches,
  callbackClouds,
  challengeAnswer,
  challengeEndpointOf,
  challengeFieldOf,
  challengeMethodPath,
  parseChallengeField,
} from './challenge.ts';
import { challengeServerCertificate } from './challenge-certificates.ts';
import { callbackService } from './challenge-grpc.ts';

describe("the callback challenge's wire format (kops' proto/kops/bootstrap/v1/bootstrap.proto)", () => {
  test("the method path and the protobuf bytes are kops': field 1 challenge_id (string), field 2 challenge_random (bytes)", () => {
    const method = callbackService().service['Challenge'];
    assert.ok(method);
    assert.equal(method.path, challengeMethodPath);
    assert.equal(method.path, '/kops.bootstrap.v1.CallbackService/Challenge');
    // Tag 0x0a = field 1, length-delimited; tag 0x12 = field 2, length-delimited.
    const request = method.requestSerialize({ challenge_id: 'ab', challenge_random: Buffer.from([1, 2]) });
    assert.equal(Buffer.from(request).toString('hex'), '0a02616212020102');
    // ChallengeResponse: field 1 challenge_response (bytes).
    assert.deepEqual(method.responseDeserialize(Buffer.from('0a020304', 'hex')), {
      challenge_response: Buffer.from([3, 4]),
    });
  });

  test('the answer is sha256(secret || nonce), as kops computes it', () => {
    const answer = challengeAnswer(Buffer.alloc(16, 1), Buffer.alloc(16, 2));
    // Computed independently (Python hashlib) for these inputs.
    assert.equal(answer.toString('hex'), 'f03f702d6016a19c16ff011ea60a8f81081446624f4c1224de099030e36c1f7c');
    assert.ok(answerMatches(answer, Buffer.from(answer)));
    assert.ok(!answerMatches(answer.subarray(0, 31), answer), 'a shorter answer is wrong, not a crash');
    assert.ok(!answerMatches(Buffer.alloc(32), answer));
  });

  test("the request field round-trips in kops nodeup's JSON shape (ca and challengeSecret base64, as Go encodes []byte)", () => {
    const { certificatePem } = challengeServerCertificate('minimal.example.com');
    const claim = {
      endpoint: '[::]:3987',
      serverCertificatePem: certificatePem,
      challengeId: 'ab'.repeat(16),
      secret: Buffer.alloc(16, 9),
    };
    const field = challengeFieldOf(claim);
    assert.deepEqual(Object.keys(field).sort(), ['ca', 'challengeID', 'challengeSecret', 'endpoint']);
    assert.equal(Buffer.from(field['ca'] as string, 'base64').toString(), certificatePem);
    assert.deepEqual(parseChallengeField(JSON.parse(JSON.stringify(field))), claim);
  });

  test('each malformed part is named', () => {
    const { certificatePem } = challengeServerCertificate('minimal.example.com');
    const good = challengeFieldOf({
      endpoint: 'a:1',
      serverCertificatePem: certificatePem,
      challengeId: 'ab',
      secret: Buffer.alloc(16),
    });
    const cases: [unknown, RegExp][] = [
      ['x', /challenge must be an object/],
      [{ ...good, challengeID: 'not hex' }, /challengeID/],
      [{ ...good, challengeSecret: '' }, /challengeSecret must be base64/],
      [{ ...good, challengeSecret: Buffer.alloc(4).toString('base64') }, /16 to 64 bytes/],
      [{ ...good, endpoint: 7 }, /endpoint/],
      [{ ...good, ca: Buffer.from('no pem').toString('base64') }, /challenge\.ca/],
      [
        {
          ...good,
          ca: Buffer.from('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n').toString(
            'base64',
          ),
        },
        /challenge\.ca is not a readable certificate/,
      ],
      [
        { ...good, ca: Buffer.from(certificatePem + certificatePem).toString('base64') },
        /exactly one certificate/,
      ],
    ];
    for (const [value, message] of cases) {
      assert.throws(
        () => parseChallengeField(value),
        (err) => err instanceof InvalidInputError && message.test(err.message),
      );
    }
  });

  test("the endpoint of an instance's address: kops' port, IPv6 in brackets", () => {
    assert.equal(challengeEndpointOf('10.0.0.7'), '10.0.0.7:3987');
    assert.equal(challengeEndpointOf('2a01:4f8::1'), '[2a01:4f8::1]:3987');
    assert.equal(challengeEndpointOf('127.0.0.5', 4000), '127.0.0.5:4000');
  });

  test("the callback clouds are kops' UseChallengeCallback list", () => {
    assert.deepEqual([...callbackClouds].sort(), ['azure', 'digitalocean', 'hetzner', 'linode', 'scaleway']);
  });
});
