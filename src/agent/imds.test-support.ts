/**
 * Test support, not product code: an EC2 instance metadata service (IMDSv2) on loopback, as an
 * instance sees it and as both `join` and the AWS SDK read it: a session token from
 * `PUT /latest/api/token`, then, with that token only, `/latest/meta-data/instance-id` and the
 * instance profile's credentials under `/latest/meta-data/iam/security-credentials/`. The AWS
 * simulator (src/sim/aws) serves the AWS APIs, not IMDS; point `AWS_EC2_METADATA_SERVICE_ENDPOINT`
 * here instead of the link-local address.
 */
import { createServer } from 'node:http';
import { listenOnLoopback } from '../net/loopback.ts';

/** What the instance is: its id (any text, to play a wrong service) and its profile's session. */
export interface ImdsInstance {
  instanceId: string;
  role?: string;
  session?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
}

/** The reads a test can make fail. */
export type ImdsRead = 'token' | 'instance-id' | 'credentials';

/** A running IMDS. */
export interface FakeImds {
  url: string;
  /** Every request, as `METHOD /path`. */
  requests: string[];
  /** The next `times` reads of `read` answer 503, as an IMDS that is not ready at boot. */
  fail(read: ImdsRead, times: number): void;
  close(): Promise<void>;
}

const token = 'AQAEAFakeImdsSessionToken==';
const credentialsPath = '/latest/meta-data/iam/security-credentials/';

/** Starts an IMDSv2 for `instance` on 127.0.0.1. */
export async function startFakeImds(instance: ImdsInstance): Promise<FakeImds> {
  const requests: string[] = [];
  const failures = new Map<ImdsRead, number>();
  const failing = (read: ImdsRead) => {
    const left = failures.get(read) ?? 0;
    if (left > 0) failures.set(read, left - 1);
    return left > 0;
  };
  const server = createServer((req, res) => {
    const path = req.url ?? '';
    requests.push(`${req.method} ${path}`);
    const answer = (status: number, body: string) => res.writeHead(status).end(body);
    if (req.method === 'PUT' && path === '/latest/api/token') {
      if (!req.headers['x-aws-ec2-metadata-token-ttl-seconds']) return answer(400, 'missing TTL');
      return failing('token') ? answer(503, '') : answer(200, token);
    }
    if (req.headers['x-aws-ec2-metadata-token'] !== token) return answer(401, '');
    const role = instance.role ?? 'nodes.example.com';
    if (path === '/latest/meta-data/instance-id') {
      return failing('instance-id') ? answer(503, '') : answer(200, instance.instanceId);
    }
    if (path.startsWith(credentialsPath) && instance.session && failing('credentials')) {
      return answer(503, '');
    }
    if (path === credentialsPath && instance.session) return answer(200, role);
    if (path === `${credentialsPath}${role}` && instance.session) {
      const { accessKeyId, secretAccessKey, sessionToken } = instance.session;
      return answer(
        200,
        JSON.stringify({
          Code: 'Success',
          Type: 'AWS-HMAC',
          AccessKeyId: accessKeyId,
          SecretAccessKey: secretAccessKey,
          Token: sessionToken ?? '',
          Expiration: new Date(Date.now() + 3_600_000).toISOString(),
          LastUpdated: new Date().toISOString(),
        }),
      );
    }
    return answer(404, '');
  });
  const listener = await listenOnLoopback(server);
  return {
    url: listener.url,
    requests,
    fail: (read, times) => failures.set(read, times),
    close: () => listener.close(),
  };
}
