/**
 * `join --cloud aws` without `--node-name` asks for the name the `aws` policy issues by default: the
 * instance id (kops' nodes are named after it), which the node reads from the instance metadata
 * service as the AWS SDK does — IMDSv2, a session token from `PUT /latest/api/token`, then
 * `/latest/meta-data/instance-id` with it — at `$AWS_EC2_METADATA_SERVICE_ENDPOINT`, else the
 * link-local address. A service that fails or cannot be reached yet is UnavailableError (join retries
 * it until its --timeout); an answer that is not an instance id is InvalidInputError.
 */
import { readMetadataText } from '../cloud/metadata-service.ts';

/** Where IMDS is on an instance (override with AWS_EC2_METADATA_SERVICE_ENDPOINT, as for the SDK). */
export const defaultImdsEndpoint = 'http://169.254.169.254';

/** `i-` and 8 or 17 hexadecimal digits, as EC2 names instances. */
const instanceIdPattern = /^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$/;

/** The instance id of this EC2 instance (see the module comment). */
export async function awsInstanceId(
  options: { endpoint?: string; signal?: AbortSignal } = {},
): Promise<string> {
  const base = (
    options.endpoint ??
    process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] ??
    defaultImdsEndpoint
  ).replace(/\/+$/, '');
  const withSignal = options.signal ? { signal: options.signal } : {};
  // A session of one minute: one is made per read, so none outlives the join.
  const token = await readMetadataText({
    url: new URL(`${base}/latest/api/token`),
    method: 'PUT',
    headers: { 'x-aws-ec2-metadata-token-ttl-seconds': '60' },
    what: 'an IMDSv2 session token',
    valid: /^[\w+/=-]{1,1024}$/,
    ...withSignal,
  });
  return readMetadataText({
    url: new URL(`${base}/latest/meta-data/instance-id`),
    headers: { 'x-aws-ec2-metadata-token': token },
    what: 'the EC2 instance id',
    valid: instanceIdPattern,
    ...withSignal,
  });
}
