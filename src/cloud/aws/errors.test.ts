import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, isRetryable, RateLimitedError, UnavailableError } from '../../errors.ts';
import { awsCallError, awsErrorCode } from './errors.ts';

const sdkError = (name: string) => Object.assign(new Error(`${name} happened`), { name });

describe('awsCallError', () => {
  it('makes throttling a retryable rate-limited error', () => {
    const err = awsCallError(
      sdkError('RequestLimitExceeded'),
      'ec2:DescribeInstances',
      'ec2:DescribeInstances',
    );
    assert.ok(err instanceof RateLimitedError);
    assert.ok(isRetryable(err));
    assert.match(err.message, /AWS throttled ec2:DescribeInstances \(RequestLimitExceeded\)/);
  });

  it('names the IAM action to grant when permission is denied', () => {
    const err = awsCallError(
      sdkError('UnauthorizedOperation'),
      'ec2:DescribeInstances',
      'ec2:DescribeInstances',
    );
    assert.ok(err instanceof ConfigError);
    assert.match(err.message, /grant ec2:DescribeInstances to its IAM role/);
    assert.equal(isRetryable(err), false);
  });

  it('reports rejected credentials as configuration, anything else as unavailable', () => {
    assert.ok(awsCallError(sdkError('AuthFailure'), 'op', 'perm') instanceof ConfigError);
    const other = awsCallError(sdkError('InternalError'), 'op', 'perm');
    assert.ok(other instanceof UnavailableError);
    assert.ok(isRetryable(other));
    assert.ok(awsCallError('not an error', 'op', 'perm') instanceof UnavailableError);
  });

  it('reads the AWS code from the SDK error name', () => {
    assert.equal(awsErrorCode(sdkError('InvalidInstanceID.NotFound')), 'InvalidInstanceID.NotFound');
    assert.equal(awsErrorCode('x'), undefined);
  });
});
