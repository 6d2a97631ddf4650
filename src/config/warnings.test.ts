import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from './loader.ts';
import { configWarnings } from './warnings.ts';

test('a gossip cluster (discovery.enabled) loads, with a warning that its discovery is not implemented', () => {
  const gossip = parseConfig({
    clusterName: 'minimal.k8s.local',
    cloud: 'aws',
    discovery: { enabled: true },
  });
  const warnings = configWarnings(gossip);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] as string, /discovery\.enabled .* not implemented/);
  assert.deepEqual(configWarnings(parseConfig({ clusterName: 'a.example.com', cloud: 'aws' })), []);
  assert.deepEqual(
    configWarnings(
      parseConfig({ clusterName: 'a.example.com', cloud: 'aws', discovery: { enabled: false } }),
    ),
    [],
  );
});
