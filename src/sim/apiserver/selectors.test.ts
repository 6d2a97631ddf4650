import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../../errors.ts';
import { matchesFields, matchesLabels, parseFieldSelector, parseLabelSelector } from './selectors.ts';

const matches = (selector: string, labels?: Record<string, string>) =>
  matchesLabels(parseLabelSelector(selector), labels);

describe('label selectors', () => {
  test('support every operator with the API semantics', () => {
    const labels = { app: 'web', tier: 'front', 'kops.k8s.io/instancegroup': 'nodes' };
    assert.equal(matches('', labels), true);
    assert.equal(matches('app=web', labels), true);
    assert.equal(matches('app==web,tier=front', labels), true);
    assert.equal(matches('app!=web', labels), false);
    assert.equal(matches('missing!=x', labels), true, '!= matches objects without the key');
    assert.equal(matches('app in (api, web)', labels), true);
    assert.equal(matches('app notin (web)', labels), false);
    assert.equal(matches('missing notin (x)', labels), true);
    assert.equal(matches('kops.k8s.io/instancegroup', labels), true);
    assert.equal(matches('!kops.k8s.io/instancegroup', labels), false);
    assert.equal(matches('!missing', undefined), true);
    assert.equal(matches('app=', { app: '' }), true);
  });

  test('reject malformed selectors with 400 errors', () => {
    for (const bad of [
      'app in (a',
      'a b',
      '=x',
      'app in a',
      'a=b=c',
      'bad key=x',
      'a=no spaces allowed',
      `a=${'x'.repeat(64)}`,
    ]) {
      assert.throws(() => parseLabelSelector(bad), InvalidInputError, bad);
    }
  });
});

describe('field selectors', () => {
  const supported = ['metadata.name', 'spec.nodeName', 'status.phase'];
  const fields: Record<string, string> = {
    'metadata.name': 'p,1',
    'spec.nodeName': 'n1',
    'status.phase': 'Running',
  };

  test('match = == and != with escaped commas', () => {
    const match = (s: string) => matchesFields(parseFieldSelector(s, supported), (f) => fields[f] ?? '');
    assert.equal(match('spec.nodeName=n1'), true);
    assert.equal(match('spec.nodeName==n1,status.phase!=Pending'), true);
    assert.equal(match('metadata.name=p\\,1'), true);
    assert.equal(match('spec.nodeName='), false);
    assert.equal(match(''), true);
  });

  test('reject unsupported fields and garbage', () => {
    assert.throws(
      () => parseFieldSelector('spec.podCIDR=x', supported),
      /field label not supported: spec.podCIDR/,
    );
    assert.throws(() => parseFieldSelector('nonsense', supported), /invalid selector/);
  });
});
