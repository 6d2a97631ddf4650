import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { cliReference } from './reference.ts';

test('docs/cli.md matches the commands (run `npm run docs` after changing a command)', async () => {
  const onDisk = readFileSync(new URL('../../docs/cli.md', import.meta.url), 'utf8');
  assert.equal(onDisk, await cliReference());
});
