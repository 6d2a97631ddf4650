/**
 * The alerting rules and the Grafana dashboard of deploy/: promtool accepts the rules and their unit
 * tests pass, and every metric they query is one the controller really exports (scraped from a
 * controller running against the simulated cluster), so a renamed metric cannot silently blind them.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { startDevController } from '../src/cli/dev-controller.ts';
import { startDevCluster } from '../src/sim/dev-cluster.ts';
import { toolPath } from '../src/testing/tools.ts';

const run = promisify(execFile);
const prometheusDir = fileURLToPath(new URL('prometheus/', import.meta.url));
const rulesFile = 'kops-controller.rules.yaml';

interface RuleFile {
  groups: { rules: { alert: string; expr: string; labels?: { severity?: string } }[] }[];
}
interface Dashboard {
  panels: { id: number; title: string; targets: { expr: string }[] }[];
}

const rules = parse(await readFile(join(prometheusDir, rulesFile), 'utf8')) as RuleFile;
const dashboard = JSON.parse(
  await readFile(new URL('grafana/kops-controller.json', import.meta.url), 'utf8'),
) as Dashboard;
const expressions = [
  ...rules.groups.flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }))),
  ...dashboard.panels.flatMap((p) => p.targets.map((t) => ({ where: `panel "${p.title}"`, expr: t.expr }))),
];

/** The metric families a PromQL expression selects: every `name{` (every selector here has labels). */
function metricsOf(expr: string): string[] {
  return [...expr.matchAll(/\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{/g)].map((m) =>
    (m[1] as string).replace(/_(bucket|sum|count)$/, ''),
  );
}

test('promtool accepts the rules, and their unit tests pass', async () => {
  const promtool = toolPath('promtool');
  const check = await run(promtool, ['check', 'rules', rulesFile], { cwd: prometheusDir });
  assert.match(check.stdout, /SUCCESS: 24 rules found/);
  const unit = await run(promtool, ['test', 'rules', 'kops-controller.rules.test.yaml'], {
    cwd: prometheusDir,
  });
  assert.match(unit.stdout, /SUCCESS/);
});

test('every series the rules and the dashboard select is the controller’s, from its scrape job', () => {
  for (const { where, expr } of expressions) {
    const selectors = [...expr.matchAll(/\{([^}]*)\}/g)].map((m) => m[1] as string);
    assert.ok(selectors.length > 0, `${where} selects something`);
    for (const labels of selectors) assert.match(labels, /job="kops-controller"/, `${where}: ${expr}`);
  }
  const ids = dashboard.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');
});

test('every metric they query is exported by the controller', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'deploy-metrics-'));
  const cluster = await startDevCluster({ stateDir: dir, awsThrottling: false });
  const controller = await startDevController(cluster, { bootstrapPolicy: 'aws' });
  try {
    let scrape = '';
    for (
      let i = 0;
      i < 200 && !/controller_component_running\{component="csr-approver"\} 1/.test(scrape);
      i++
    ) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      scrape = await (await fetch(`${controller.url}/metrics`)).text();
    }
    const exported = new Set([...scrape.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1] as string));
    exported.add('up'); // written by Prometheus itself for every scrape target
    const missing = expressions.flatMap(({ where, expr }) =>
      metricsOf(expr)
        .filter((name) => !exported.has(name))
        .map((name) => `${where}: ${name}`),
    );
    assert.deepEqual(missing, []);
  } finally {
    await controller.stop();
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test('docs/deploy.md lists every alert: its table names exactly the rules, with their severities, and its count is theirs', async () => {
  const doc = await readFile(new URL('../docs/deploy.md', import.meta.url), 'utf8');
  const alerts = rules.groups.flatMap((g) => g.rules.map((r) => `${r.alert} ${r.labels?.severity}`));
  const section = doc.slice(doc.indexOf('\n## Alerts'), doc.indexOf('\n## ', doc.indexOf('\n## Alerts') + 1));
  const table = [...section.matchAll(/^\| `(\w+)` *\| (\w+) +\|/gm)].map((m) => `${m[1]} ${m[2]}`);
  assert.deepEqual(table.sort(), [...alerts].sort());
  const counted = /`deploy\/prometheus\/kops-controller\.rules\.yaml` *\| (\d+) alerting rules/.exec(doc);
  assert.equal(Number(counted?.[1]), alerts.length, 'the count in the table of deployed files');
});
