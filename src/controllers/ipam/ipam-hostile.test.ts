/**
 * Cloud IPAM against an API server whose Nodes are malformed, over real HTTP on loopback
 * (src/testing/hostile-apiserver.ts). What must hold: a Node whose pod ranges (or providerID, or
 * resourceVersion) cannot be read is skipped with a logged reason: no ranges written over what it may
 * hold, no conflict reported from its characters.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { answer, eventually, hostileApiServer, startStream } from '../../testing/hostile-apiserver.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { IpamController } from './ipam-controller.ts';
import type { PodCidrSource } from './sources.ts';

const node = (name: string, spec: Record<string, unknown> = {}) => ({
  metadata: { name, uid: `uid-${name}`, resourceVersion: '1' },
  spec: { providerID: `aws:///z/${name}`, ...spec },
});

describe('IPAM against a hostile API server', () => {
  test('a Node whose podCIDRs, podCIDR, providerID or resourceVersion cannot be read is skipped: no patch, no Event', async () => {
    const malformed: [string, Record<string, unknown>][] = [
      ['cidrs-string', node('cidrs-string', { podCIDRs: '10.1.0.0/24' })],
      ['cidrs-number', node('cidrs-number', { podCIDRs: 5 })],
      ['cidrs-object', node('cidrs-object', { podCIDRs: { 0: '10.1.0.0/24' } })],
      ['cidrs-element', node('cidrs-element', { podCIDRs: [5] })],
      ['cidr-number', node('cidr-number', { podCIDR: 7 })],
      ['providerid-number', node('providerid-number', { providerID: 42 })],
      ['rv-missing', { ...node('rv-missing'), metadata: { name: 'rv-missing', uid: 'u' } }],
    ];
    const nodes = [...malformed.map(([, n]) => n), node('good')];
    const writes: string[] = [];
    const api = await hostileApiServer((req, res) => {
      if (req.path === '/api/v1/nodes') {
        if (req.watch) return startStream(res);
        return answer(res, 200, { kind: 'NodeList', metadata: { resourceVersion: '1' }, items: nodes });
      }
      if (req.method !== 'GET') {
        const body = JSON.parse(req.body) as { involvedObject?: { name?: string }; message?: string };
        writes.push(
          req.method === 'PATCH'
            ? `patch ${req.path.split('/').pop()}`
            : `event ${body.involvedObject?.name}: ${body.message}`,
        );
        return answer(res, req.method === 'POST' ? 201 : 200, req.method === 'PATCH' ? node('x') : body);
      }
      answer(res, 404, { kind: 'Status', code: 404 });
    });
    // A range of its own for every instance.
    const ranges = new Map<unknown, string>();
    const rangeOf = (key: unknown) => {
      if (!ranges.has(key)) ranges.set(key, `2001:db8:${ranges.size + 1}::/80`);
      return ranges.get(key) as string;
    };
    const source: PodCidrSource = {
      byNodeName: false,
      lookup: async (keys) =>
        new Map(
          keys.map((k) => [k, { ok: true, value: { ranges: { kind: 'ranges', cidrs: [rangeOf(k)] } } }]),
        ),
    };
    const { logger, lines } = capturedLogger();
    const informer = nodeInformer(api.kubeConfig, { logger });
    const controller = new IpamController({
      kubeConfig: api.kubeConfig,
      nodes: informer,
      source,
      registry: new Registry(),
      logger,
    });
    const stop = new AbortController();
    const running = controller.start(stop.signal);
    try {
      await eventually(() => writes.includes('patch good'), 'the well-formed Node given its range');
      await new Promise((resolve) => setTimeout(resolve, 300));
    } finally {
      stop.abort();
      await running;
      await informer.close();
      await api.close();
    }
    assert.deepEqual(writes, ['patch good']);
    for (const [name] of malformed) {
      assert.ok(
        lines.some((l) => l.includes(`"object":"${name}"`) && /cannot transform object; skipped/.test(l)),
        `${name} is skipped with a logged reason`,
      );
    }
  });
});
