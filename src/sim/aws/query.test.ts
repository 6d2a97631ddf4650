import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  AwsSimError,
  filterParams,
  intParam,
  listParam,
  pageToken,
  queryErrorDocument,
  queryParams,
  tagFilterMatches,
  wildcardMatch,
} from './query.ts';

describe('AWS Query requests', () => {
  it('merges query string and form body, the body winning', () => {
    const params = queryParams(
      '/?Action=A&X=1',
      'Action=B&Y=2',
      'application/x-www-form-urlencoded; charset=utf-8',
    );
    assert.deepEqual(
      [...params],
      [
        ['Action', 'B'],
        ['X', '1'],
        ['Y', '2'],
      ],
    );
    assert.equal(queryParams('/', 'Action=B', 'text/plain').get('Action'), undefined);
  });

  it('reads numbered lists and both filter spellings', () => {
    const ec2 = new Map([
      ['InstanceId.1', 'i-1'],
      ['InstanceId.2', 'i-2'],
      ['InstanceId.4', 'ignored: the list stops at the first gap'],
      ['Filter.1.Name', 'tag:Name'],
      ['Filter.1.Value.1', 'a'],
      ['Filter.1.Value.2', 'b'],
    ]);
    assert.deepEqual(listParam(ec2, 'InstanceId'), ['i-1', 'i-2']);
    assert.deepEqual(filterParams(ec2, 'ec2'), [{ name: 'tag:Name', values: ['a', 'b'] }]);
    const query = new Map([
      ['Filters.member.1.Name', 'tag-key'],
      ['Filters.member.1.Values.member.1', 'k'],
    ]);
    assert.deepEqual(filterParams(query, 'query'), [{ name: 'tag-key', values: ['k'] }]);
  });

  it('matches tag filters with wildcards', () => {
    const tags = { Name: 'nodes-a', env: 'prod' };
    assert.equal(tagFilterMatches({ name: 'tag:Name', values: ['nodes-*'] }, tags), true);
    assert.equal(tagFilterMatches({ name: 'tag:Name', values: ['nodes-?'] }, tags), true);
    assert.equal(tagFilterMatches({ name: 'tag:Missing', values: ['*'] }, tags), false);
    assert.equal(tagFilterMatches({ name: 'tag-key', values: ['en?'] }, tags), true);
    assert.equal(tagFilterMatches({ name: 'tag-value', values: ['prod'] }, tags), true);
    assert.equal(tagFilterMatches({ name: 'instance-id', values: ['x'] }, tags), undefined);
    assert.equal(wildcardMatch('a.b', 'axb'), false, 'regex characters are literal');
  });

  it('bounds integers and validates page tokens', () => {
    const bounds = { min: 5, max: 1000, default: 50 };
    assert.equal(intParam(new Map(), 'MaxResults', bounds), 50);
    assert.equal(intParam(new Map([['MaxResults', '5']]), 'MaxResults', bounds), 5);
    assert.throws(() => intParam(new Map([['MaxResults', '4']]), 'MaxResults', bounds), AwsSimError);
    assert.throws(() => intParam(new Map([['MaxResults', 'x']]), 'MaxResults', bounds), AwsSimError);
    assert.equal(pageToken.decode(pageToken.encode(42)), 42);
    assert.equal(pageToken.decode(undefined), 0);
    assert.throws(() => pageToken.decode('garbage'), /NextToken/);
  });

  it('writes the awsQuery error document', () => {
    const xml = queryErrorDocument('urn:sts', 'SignatureDoesNotMatch', 'bad <sig>', 403);
    assert.match(
      xml,
      /<ErrorResponse xmlns="urn:sts"><Error><Type>Sender<\/Type><Code>SignatureDoesNotMatch<\/Code><Message>bad &lt;sig&gt;<\/Message><\/Error><RequestId>[0-9a-f-]{36}<\/RequestId><\/ErrorResponse>/,
    );
    assert.match(queryErrorDocument('urn:x', 'InternalFailure', 'x', 500), /<Type>Receiver<\/Type>/);
  });
});
