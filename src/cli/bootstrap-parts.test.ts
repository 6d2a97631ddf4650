import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../config/loader.ts';
import { NotFoundError } from '../errors.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { nodeConfigReader } from './bootstrap-parts.ts';

const configBase = 'memfs://bootstrap-parts/clusters/c.example.com';

test('nodeConfigReader: the instance group’s nodeupconfig.yaml verbatim, as kops on every cloud', async () => {
  await new MemfsVfs(new URL(configBase)).write('igconfig/node/nodes/nodeupconfig.yaml', 'kubelet: {}\n');
  const read = nodeConfigReader(
    parseConfig({ clusterName: 'c.example.com', cloud: 'aws', configBase }),
    undefined,
  );
  assert.deepEqual(await read?.('nodes'), { nodeupConfig: 'kubelet: {}\n' });
  await assert.rejects(read?.('other') ?? Promise.resolve(), (err) => {
    assert.ok(err instanceof NotFoundError);
    assert.doesNotMatch(err.message, /metal/);
    return true;
  });
});

test('nodeConfigReader on metal: a missing file says that kops builds it there and this controller does not', async () => {
  const read = nodeConfigReader(
    parseConfig({ clusterName: 'c.example.com', cloud: 'metal', configBase }),
    undefined,
  );
  await assert.rejects(read?.('workers') ?? Promise.resolve(), (err) => {
    assert.ok(err instanceof NotFoundError, 'still a missing file: kops’ 400, not a dependency fault');
    assert.match(err.message, /igconfig\/node\/workers\/nodeupconfig\.yaml/);
    assert.match(err.message, /on metal the Go kops-controller builds/);
    return true;
  });
});
