import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exitCodeOf } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { epochSeconds, type LedgerEntry } from '../ledger/ledger.ts';
import { ConfigMapLedgerStore } from '../ledger/store.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { runCli, runCliResult } from '../testing/cli.ts';
import { humanSpan } from './certs.ts';
import { errorLine } from './main.ts';

const day = 86_400;
const root = mkdtempSync(join(tmpdir(), 'kops-certs-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));

describe('kops-controller certs', () => {
  let sim: SimApiServer;
  let kubeconfig = '';
  const now = epochSeconds(new Date());
  const entry = (instance: string, kind: string, inDays: number, instanceGroup = 'nodes'): LedgerEntry => ({
    kind,
    instanceGroup,
    instance,
    serial: `serial-${instance}-${kind}`,
    notBefore: now + inDays * day - 365 * day,
    notAfter: now + inDays * day,
  });

  before(async () => {
    sim = await startApiServer();
    kubeconfig = join(root, 'kubeconfig');
    writeFileSync(kubeconfig, sim.kubeconfig());
    await new ConfigMapLedgerStore({ core: makeClients(sim.kubeConfig()).core }).add([
      entry('node-a', 'kubelet', 300),
      entry('node-b', 'kubelet', 10),
      entry('node-b', 'kubelet-server', 1),
      entry('kubernetes-ca.1', 'ca', 3000, ''),
      // A one-day certificate with 20 hours left: the kubelet's routine renewal is not due yet.
      { ...entry('node-c', 'kubelet', 20 / 24), notBefore: now + 20 * 3600 - day },
    ]);
  });
  after(() => sim.close());

  const certs = (...args: string[]) => ['certs', ...args, '--kubeconfig', kubeconfig];

  test('list prints every certificate, soonest to expire first, as a table or JSON', async () => {
    const table = await runCli(...certs('list'));
    const lines = table.trim().split('\n');
    assert.match(lines[0] as string, /^KIND\s+INSTANCE GROUP\s+INSTANCE\s+SERIAL\s+NOT AFTER\s+EXPIRES IN$/);
    assert.deepEqual(
      lines.slice(1).map((l) => l.split(/\s+/).slice(0, 3).join(' ')),
      [
        'kubelet nodes node-c',
        'kubelet-server nodes node-b',
        'kubelet nodes node-b',
        'kubelet nodes node-a',
        'ca - kubernetes-ca.1',
      ],
    );
    const rows = JSON.parse(await runCli(...certs('list', '-o', 'json'))) as {
      instance: string;
      notAfter: string;
    }[];
    assert.equal(rows.length, 5);
    assert.equal(rows[1]?.notAfter, new Date((now + day) * 1000).toISOString());
  });

  test('expiring exits 69 after listing what expires within the window and is not being renewed, 0 when nothing does', async () => {
    const soon = await runCliResult(...certs('expiring', '--within', '14d', '-o', 'json'));
    assert.deepEqual(
      (JSON.parse(soon.output) as { kind: string; instance: string }[]).map((r) => `${r.kind}/${r.instance}`),
      ['kubelet-server/node-b', 'kubelet/node-b'],
    );
    assert.equal(exitCodeOf(soon.error), 69);
    assert.equal(errorLine(soon.error), '2 certificates expire within 14d; rotate them');

    const critical = await runCliResult(...certs('expiring', '--within', '48h'));
    assert.equal(exitCodeOf(critical.error), 69);
    assert.match(critical.output, /kubelet-server\s+nodes\s+node-b/);

    const all = await runCliResult(
      ...certs('expiring', '--within', '48h', '--include-renewing', '-o', 'json'),
    );
    assert.deepEqual(
      (JSON.parse(all.output) as { kind: string; instance: string }[]).map((r) => `${r.kind}/${r.instance}`),
      ['kubelet/node-c', 'kubelet-server/node-b'],
    );
    assert.equal(exitCodeOf(all.error), 69);

    assert.equal(await runCli(...certs('expiring', '--within', '12h', '-o', 'json')), '[]\n');
  });

  test('a malformed --within names the flag (65); an unreachable API server is 69 with its own line', async () => {
    const bad = await runCliResult(...certs('expiring', '--within', 'banana'));
    assert.equal(exitCodeOf(bad.error), 65);
    assert.match(errorLine(bad.error), /--within banana/);
    const unreachable = join(root, 'unreachable');
    writeFileSync(unreachable, sim.kubeconfig().replace(/https:\/\/127\.0\.0\.1:\d+/, 'https://127.0.0.1:9'));
    const down = await runCliResult('certs', 'list', '--kubeconfig', unreachable);
    assert.equal(exitCodeOf(down.error), 69);
    assert.match(
      errorLine(down.error),
      /list the certificate ledger in kube-system failed: cannot reach the API server/,
    );
  });

  test('humanSpan: days and hours, hours and minutes, minutes', () => {
    assert.deepEqual(
      [
        humanSpan(13 * day + 4 * 3600 + 59),
        humanSpan(5 * 3600 + 12 * 60),
        humanSpan(42 * 60),
        humanSpan(14 * day),
        humanSpan(-5),
      ],
      ['13d4h', '5h12m', '42m', '14d', '0m'],
    );
  });
});
