import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse } from 'yaml';
import { InvalidInputError } from '../errors.ts';
import { formatOutput, renderTable } from './output.ts';

const rows = [
  { name: 'node-a', ready: true },
  { name: 'a-much-longer-node', ready: false },
];
const columns = [
  { header: 'name', value: (r: (typeof rows)[number]) => r.name },
  { header: 'ready', value: (r: (typeof rows)[number]) => r.ready },
];

test('tables align columns under upper-case headings', () => {
  assert.equal(
    renderTable(rows, columns),
    'NAME                 READY\nnode-a               true\na-much-longer-node   false\n',
  );
});

test('json and yaml print the data itself', () => {
  assert.deepEqual(JSON.parse(formatOutput('json', { rows })), { rows });
  assert.deepEqual(parse(formatOutput('yaml', { rows })), { rows });
});

test('an unknown format is an input error', () => {
  assert.throws(() => formatOutput('xml', {}), InvalidInputError);
});
