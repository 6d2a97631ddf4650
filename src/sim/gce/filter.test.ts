import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../../errors.ts';
import { compileFilter } from './filter.ts';

const a = { name: 'node-a', id: '11', status: 'RUNNING', labels: { env: 'prod' } };
const b = { name: 'node-b', id: '12', status: 'TERMINATED', labels: { env: 'dev' } };

test('comparisons, OR, AND and juxtaposition select resources', () => {
  const cases: Array<[string, boolean[]]> = [
    ['', [true, true]],
    ['name = "node-a"', [true, false]],
    ['name != node-a', [false, true]],
    ['id = 12', [false, true]],
    ['labels.env = "prod"', [true, false]],
    ['(name = "node-a") OR (name = "node-b")', [true, true]],
    ['name = "node-a" OR name = "node-b"', [true, true]],
    ['(status = RUNNING) (labels.env = prod)', [true, false]],
    ['status = RUNNING AND name = "node-b"', [false, false]],
    ['status = TERMINATED AND (name = "node-a" OR name = "node-b")', [false, true]],
    ['name eq "node-(a|c)"', [true, false]],
    ["name ne 'node-.*'", [false, false]],
    ['missing.field = x', [false, false]],
  ];
  for (const [text, expected] of cases) {
    const filter = compileFilter(text);
    assert.deepEqual([filter(a), filter(b)], expected, text);
  }
});

test('malformed filters are input errors', () => {
  for (const text of ['name =', '(name = a', 'name = a)', 'name ~ a', 'name = "a']) {
    assert.throws(() => compileFilter(text), InvalidInputError, text);
  }
});
