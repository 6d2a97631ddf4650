import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { NotFoundError } from '../../errors.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { TemplateGroups } from './template-groups.ts';

let sim: GceSimulator;
before(async () => {
  sim = await startGceSimulator({ project: 'tpl' });
  sim.seedTemplate({
    name: 'kops-tpl',
    metadata: { 'cluster-name': 'c', 'kops-k8s-io-instance-group-name': 'nodes' },
  });
  sim.seedTemplate({ name: 'plain-tpl', metadata: { startup: 'x' } });
});
after(() => sim.close());

test('template facts are read once and remembered; missing keys are undefined', async () => {
  const templates = new TemplateGroups(simulatorCompute(sim));
  sim.clearCalls();
  const facts = await templates.facts(['kops-tpl', 'plain-tpl', 'kops-tpl']);
  assert.deepEqual(facts.get('kops-tpl'), { instanceGroup: 'nodes', clusterName: 'c' });
  assert.deepEqual(facts.get('plain-tpl'), { instanceGroup: undefined, clusterName: undefined });
  assert.equal(sim.count('instanceTemplates.get'), 2);
  await templates.facts(['kops-tpl', 'plain-tpl']);
  assert.equal(sim.count('instanceTemplates.get'), 2);
});

test('a failed read is reported and not remembered', async () => {
  const templates = new TemplateGroups(simulatorCompute(sim));
  assert.ok((await templates.facts(['late-tpl'])).get('late-tpl') instanceof NotFoundError);
  sim.seedTemplate({ name: 'late-tpl', metadata: { 'kops-k8s-io-instance-group-name': 'late' } });
  assert.deepEqual((await templates.facts(['late-tpl'])).get('late-tpl'), {
    instanceGroup: 'late',
    clusterName: undefined,
  });
});
