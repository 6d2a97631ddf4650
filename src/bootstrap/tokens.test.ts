import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, type V1Secret } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { ConflictError, InvalidInputError, UnavailableError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { parseToken } from '../protocol/bootstrap-token.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { contextAt, testRequest } from '../testing/bootstrap-request.ts';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { outcomeWithin, silentApiServer } from '../testing/silent-server.ts';
import { DependencyFaultError } from './dependency.ts';
import { bootstrapTokenPolicy } from './policies/bootstrap-token.ts';
import {
  apiTokenSource,
  constantTimeEqual,
  isExpired,
  newBootstrapToken,
  randomTokenString,
  runOnTokenChanges,
  storedTokenOf,
  TokenCleaner,
  type TokenSecretSource,
  TokenValidator,
  tokenSecretOf,
  validateExtraGroups,
  WatchedTokenSecrets,
} from './tokens.ts';

const now = new Date('2026-01-01T00:00:00Z');
const b64 = (s: string) => Buffer.from(s).toString('base64');

/** A token Secret as kubeadm would write it, with overrides of its data (plain text values). */
function secretWith(data: Record<string, string | undefined>, name = 'bootstrap-token-abcdef'): V1Secret {
  const plain: Record<string, string | undefined> = {
    'token-id': 'abcdef',
    'token-secret': '0123456789abcdef',
    expiration: '2026-01-02T00:00:00Z',
    'usage-bootstrap-authentication': 'true',
    'usage-bootstrap-signing': 'true',
    ...data,
  };
  return {
    metadata: { name, namespace: 'kube-system' },
    type: 'bootstrap.kubernetes.io/token',
    data: Object.fromEntries(
      Object.entries(plain).flatMap(([k, v]) => (v === undefined ? [] : [[k, b64(v)]])),
    ),
  };
}

describe('token generation', () => {
  test('ids and secrets match the kubeadm format', () => {
    for (let i = 0; i < 200; i++) {
      const token = newBootstrapToken({ now });
      assert.ok(parseToken(`${token.id}.${token.secret}`), `${token.id}.${token.secret}`);
    }
  });

  test('rejection sampling skips bytes 252..255 instead of folding them onto 0..3', () => {
    const bytes = Buffer.from([252, 253, 254, 255, 0, 35, 36, 251]);
    let calls = 0;
    const random = (size: number) => {
      calls++;
      return calls === 1 ? bytes : Buffer.alloc(size, 1);
    };
    // 0 → '0', 35 → 'z', 36 → '0', 251 → 251 % 36 = 35 → 'z'; then the second draw gives '1's.
    assert.equal(randomTokenString(6, random), '0z0z11');
  });

  test('letters are spread evenly over many draws', () => {
    const counts = new Map<string, number>();
    for (const c of randomTokenString(36 * 2000)) counts.set(c, (counts.get(c) ?? 0) + 1);
    assert.equal(counts.size, 36);
    for (const count of counts.values()) assert.ok(count > 1600 && count < 2400, String(count));
  });

  test('expiry, usages and groups are set as asked', () => {
    const token = newBootstrapToken({
      now,
      ttlMs: 3_600_000,
      usages: ['signing'],
      extraGroups: ['system:bootstrappers:kops:nodes'],
      description: 'for the workers',
    });
    assert.deepEqual(token.expires, new Date('2026-01-01T01:00:00Z'));
    assert.deepEqual(token.usages, { authentication: false, signing: true });
    assert.equal(newBootstrapToken({ now, ttlMs: 0 }).expires, undefined);
    const secret = tokenSecretOf(token);
    assert.equal(secret.metadata?.name, `bootstrap-token-${token.id}`);
    assert.equal(secret.metadata?.namespace, 'kube-system');
    assert.equal(secret.type, 'bootstrap.kubernetes.io/token');
    const data = Object.fromEntries(
      Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
    );
    assert.deepEqual(data, {
      'token-id': token.id,
      'token-secret': token.secret,
      description: 'for the workers',
      expiration: '2026-01-01T01:00:00Z',
      'usage-bootstrap-signing': 'true',
      'auth-extra-groups': 'system:bootstrappers:kops:nodes',
    });
  });

  test('bad options are refused with a clear message', () => {
    assert.throws(() => newBootstrapToken({ usages: [] }), /at least one usage/);
    assert.throws(() => newBootstrapToken({ ttlMs: -1 }), /positive duration/);
    assert.throws(() => validateExtraGroups(['system:nodes']), /system:bootstrappers/);
    assert.throws(() => validateExtraGroups(['system:bootstrappers:']), /must match/);
    assert.throws(() => validateExtraGroups(['system:bootstrappers:Upper']), /must match/);
  });
});

describe('token parsing', () => {
  test('a stored Secret is read only when well formed', () => {
    assert.equal(storedTokenOf(secretWith({}))?.id, 'abcdef');
    assert.equal(storedTokenOf(secretWith({ 'token-id': 'zzzzzz' })), undefined, 'id differs from name');
    assert.equal(storedTokenOf(secretWith({ 'token-secret': 'short' })), undefined);
    assert.equal(storedTokenOf(secretWith({}, 'bootstrap-token-ABCDEF')), undefined);
    assert.equal(storedTokenOf({ ...secretWith({}), type: 'Opaque' }), undefined);
  });

  test('usage flags are true only for the exact value "true"', () => {
    const token = storedTokenOf(
      secretWith({ 'usage-bootstrap-authentication': 'TRUE', 'usage-bootstrap-signing': 'yes' }),
    );
    assert.deepEqual(token?.usages, { authentication: false, signing: false });
  });

  test('an unparseable expiration counts as expired; no expiration never expires', () => {
    for (const expiration of ['tomorrow', '2026-13-01', '2027-01-01', '1767225600']) {
      const token = storedTokenOf(secretWith({ expiration }));
      assert.ok(token && isExpired(token, now), expiration);
    }
    const forever = storedTokenOf(secretWith({ expiration: undefined }));
    assert.ok(forever && !isExpired(forever, new Date('2100-01-01T00:00:00Z')));
    const withOffset = storedTokenOf(secretWith({ expiration: '2026-01-01T01:00:00+02:00' }));
    assert.ok(withOffset && isExpired(withOffset, now), '01:00+02:00 is 23:00 UTC the day before');
  });

  test('constant-time comparison of different lengths', () => {
    assert.equal(constantTimeEqual('abc', 'abc'), true);
    assert.equal(constantTimeEqual('abc', 'abcd'), false);
    assert.equal(constantTimeEqual('', ''), true);
  });
});

describe('validation against a source', () => {
  const source = (secrets: V1Secret[]) => ({
    get: async (id: string) => secrets.find((s) => s.metadata?.name === `bootstrap-token-${id}`),
    list: async () => secrets,
  });
  const valid = (secrets: V1Secret[], token = 'abcdef.0123456789abcdef', at = now) =>
    new TokenValidator(source(secrets)).validate(token, at);

  test('a good token yields its public facts, never the secret', async () => {
    const info = await valid([secretWith({ 'auth-extra-groups': 'system:bootstrappers:kops' })]);
    assert.deepEqual(info, {
      id: 'abcdef',
      description: undefined,
      expires: new Date('2026-01-02T00:00:00Z'),
      usages: { authentication: true, signing: true },
      extraGroups: ['system:bootstrappers:kops'],
    });
  });

  test('each reason to refuse, precise for the audit trail and never carrying the secret', async () => {
    const refused = (rejected: string) => ({ rejected });
    assert.deepEqual(
      await valid([secretWith({})], 'abcdef.0123456789abcdee'),
      refused('bootstrap token abcdef: wrong secret'),
    );
    assert.deepEqual(
      await valid([secretWith({})], 'abcdeg.0123456789abcdef'),
      refused('bootstrap token abcdeg: no such token'),
    );
    assert.deepEqual(await valid([secretWith({})], 'not a token'), refused('malformed token'));
    assert.deepEqual(
      await valid([secretWith({})], undefined, new Date('2026-01-02T00:00:00Z')),
      refused('bootstrap token abcdef: expired'),
    );
    assert.deepEqual(
      await valid([secretWith({ 'usage-bootstrap-authentication': undefined })]),
      refused('bootstrap token abcdef: not usable for authentication'),
    );
    assert.deepEqual(
      await valid([secretWith({ 'auth-extra-groups': 'system:masters' })]),
      refused('bootstrap token abcdef: invalid extra groups'),
    );
    const deleting = secretWith({});
    deleting.metadata = { ...deleting.metadata, deletionTimestamp: now };
    assert.deepEqual(await valid([deleting]), refused('bootstrap token abcdef: being deleted'));
  });
});

describe('waiting for token changes', () => {
  const polled = () => ({ get: async () => undefined, list: async () => [] });
  const subscribable = () => {
    const listeners = new Set<() => void>();
    return {
      ...polled(),
      subscribe: (listener: () => void) => {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
      change: () => {
        for (const listener of listeners) listener();
      },
      get listeners() {
        return listeners.size;
      },
    };
  };

  /**
   * Runs the leader loop over `source`; `passes` holds the ms since the start at which each pass ran.
   * Each pass reports an expiry `nextExpiryIn` ms ahead; `duringFirstPass` runs inside the first pass.
   */
  const loop = (source: TokenSecretSource, nextExpiryIn?: number, duringFirstPass?: () => void) => {
    const clock = new FakeClock();
    const start = clock.now();
    const stop = new AbortController();
    const passes: number[] = [];
    let during = duringFirstPass;
    const done = runOnTokenChanges(
      { source },
      clock,
      async () => {
        passes.push(clock.now() - start);
        during?.();
        during = undefined;
        return { nextExpiry: nextExpiryIn === undefined ? undefined : clock.now() + nextExpiryIn };
      },
      stop.signal,
    );
    return { clock, stop, passes, done };
  };

  test('a source that reports changes is only re-read every 10 minutes; one that cannot, every minute', async () => {
    const poll = loop(polled());
    await poll.clock.advance(60_000);
    assert.deepEqual(poll.passes, [0, 60_000]);
    poll.stop.abort();
    await poll.done;

    const watch = loop(subscribable());
    await watch.clock.advance(60_000);
    assert.deepEqual(watch.passes, [0]);
    await watch.clock.advance(540_000);
    assert.deepEqual(watch.passes, [0, 600_000]);
    watch.stop.abort();
    await watch.done;
  });

  test('a change between a read and the wait ends the wait at once', async () => {
    const source = subscribable();
    const run = loop(source, undefined, () => source.change());
    await settle();
    assert.deepEqual(run.passes, [0, 0]);
    run.stop.abort();
    await run.done;
    assert.equal(source.listeners, 0, 'the loop unsubscribes when it ends');
  });

  test('a pass that fails for a moment (the API server 503, a write conflict) is retried with backoff and logged at warn, not thrown; any other failure ends the loop', async () => {
    const clock = new FakeClock();
    const start = clock.now();
    const stop = new AbortController();
    const { logger, lines } = capturedLogger();
    const passes: number[] = [];
    const done = runOnTokenChanges(
      { source: subscribable(), logger },
      clock,
      async () => {
        passes.push(clock.now() - start);
        if (passes.length <= 2)
          throw new UnavailableError('read configmap kube-public/cluster-info: HTTP 503');
        // A concurrent writer replaced the ConfigMap between this pass's read and its write.
        if (passes.length === 3)
          throw new ConflictError('write configmap kube-public/cluster-info: HTTP 409');
        return { nextExpiry: undefined };
      },
      stop.signal,
    );
    await clock.advance(1_200 + 2_400 + 4_800);
    assert.equal(passes.length, 4, `passes at ${passes.join(', ')}`);
    assert.equal(
      lines.filter((line) => line.includes('"level":"warn"') && line.includes('pass failed; retrying'))
        .length,
      2,
      'the 503, then the conflict: each is news',
    );
    assert.equal(lines.filter((line) => line.includes('pass succeeded again')).length, 1);
    assert.ok(!lines.some((line) => line.includes('"level":"error"')));
    stop.abort();
    await done;

    const broken = runOnTokenChanges(
      { source: subscribable(), logger },
      new FakeClock(),
      async () => {
        throw new InvalidInputError('a token Secret that is not one');
      },
      new AbortController().signal,
    );
    await assert.rejects(broken, /a token Secret that is not one/);
  });

  test('the wait ends at the next expiry, on a change, or on abort', async () => {
    const source = subscribable();
    const run = loop(source, 5000);
    await run.clock.advance(4999);
    assert.deepEqual(run.passes, [0]);
    await run.clock.advance(1);
    assert.deepEqual(run.passes, [0, 5000], 'expiry');

    source.change();
    await settle();
    assert.deepEqual(run.passes, [0, 5000, 5000], 'change');

    run.stop.abort();
    await run.done;
    assert.equal(run.passes.length, 3, 'abort');
    assert.equal(run.clock.pending, 0, 'no timer left behind');
    assert.equal(source.listeners, 0);
  });
});

describe('against the simulated apiserver', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  before(async () => {
    sim = await startApiServer();
    core = makeClients(sim.kubeConfig()).core;
  });
  after(() => sim.close());

  const create = async (options: Parameters<typeof newBootstrapToken>[0]) => {
    const token = newBootstrapToken(options);
    await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(token) });
    return token;
  };

  test('the validator reads tokens through the API: valid, wrong secret, usage off, expired, deleted', async () => {
    const validator = new TokenValidator(apiTokenSource(core));
    const good = await create({ now: new Date() });
    const signingOnly = await create({ now: new Date(), usages: ['signing'] });
    const expired = await create({ now: new Date(Date.now() - 2 * 3_600_000), ttlMs: 3_600_000 });
    const t = (x: { id: string; secret: string }) => `${x.id}.${x.secret}`;
    const outcome = async (token: string) => {
      const result = await validator.validate(token, new Date());
      return 'rejected' in result ? result.rejected : result.id;
    };
    assert.equal(await outcome(t(good)), good.id);
    assert.equal(await outcome(`${good.id}.${'0'.repeat(16)}`), `bootstrap token ${good.id}: wrong secret`);
    assert.equal(
      await outcome(t(signingOnly)),
      `bootstrap token ${signingOnly.id}: not usable for authentication`,
    );
    assert.equal(await outcome(t(expired)), `bootstrap token ${expired.id}: expired`);
    await core.deleteNamespacedSecret({ name: `bootstrap-token-${good.id}`, namespace: 'kube-system' });
    assert.equal(await outcome(t(good)), `bootstrap token ${good.id}: no such token`);
  });

  test('the cleaner deletes expired tokens only, and not a re-created Secret of the same name', async () => {
    const keep = await create({ now: new Date() });
    const stale = await create({ now: new Date(Date.now() - 2 * 3_600_000), ttlMs: 3_600_000 });
    const cleaner = new TokenCleaner({ core, source: apiTokenSource(core) });
    const { deleted } = await cleaner.sweep();
    assert.ok(deleted.includes(stale.id) && !deleted.includes(keep.id), deleted.join());
    const ids = (await apiTokenSource(core).list()).map((s) => s.metadata?.name);
    assert.ok(ids.includes(`bootstrap-token-${keep.id}`));
    assert.ok(!ids.includes(`bootstrap-token-${stale.id}`));

    // The cleaner read an expired Secret, which was then replaced: its UID precondition protects the new one.
    const old = await create({ now: new Date(Date.now() - 2 * 3_600_000), ttlMs: 3_600_000 });
    const seen = await core.readNamespacedSecret({
      name: `bootstrap-token-${old.id}`,
      namespace: 'kube-system',
    });
    await core.deleteNamespacedSecret({ name: `bootstrap-token-${old.id}`, namespace: 'kube-system' });
    await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(old) });
    const racing = new TokenCleaner({ core, source: { get: async () => seen, list: async () => [seen] } });
    assert.deepEqual((await racing.sweep()).deleted, []);
    const survivor = await core.readNamespacedSecret({
      name: `bootstrap-token-${old.id}`,
      namespace: 'kube-system',
    });
    assert.notEqual(survivor.metadata?.uid, seen.metadata?.uid);
  });

  test('the cleaner component runs until aborted and wakes when a token expires', async () => {
    const tokens = new WatchedTokenSecrets({ kubeConfig: sim.kubeConfig(), api: apiTokenSource(core) });
    tokens.start();
    const stop = new AbortController();
    const run = new TokenCleaner({ core, source: tokens }).start(stop.signal);
    try {
      // Created after the cleaner's first pass: the watch event tells it when this one expires.
      const soon = await create({ now: new Date(), ttlMs: 1500 });
      await until('the expired token is deleted', () =>
        core.readNamespacedSecret({ name: `bootstrap-token-${soon.id}`, namespace: 'kube-system' }).then(
          () => false,
          () => true,
        ),
      );
    } finally {
      stop.abort();
      await run;
      await tokens.stop();
    }
  });
});

/**
 * Counts the simulated API server's requests by verb and resource (the simulator keeps no count, so
 * this wraps its per-request fault planning, which every request goes through).
 */
function countRequests(sim: SimApiServer): (verb: string, resource: string) => number {
  const counts = new Map<string, number>();
  const plan = sim.faults.plan.bind(sim.faults);
  sim.faults.plan = (resource, verb) => {
    counts.set(`${verb} ${resource}`, (counts.get(`${verb} ${resource}`) ?? 0) + 1);
    return plan(resource, verb);
  };
  return (verb, resource) => counts.get(`${verb} ${resource}`) ?? 0;
}

async function until(what: string, check: () => boolean | Promise<boolean>, withinMs = 15_000) {
  const deadline = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`not within ${withinMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('token lookups answered from a watch of the token Secrets', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  let requests: (verb: string, resource: string) => number;
  let tokens: WatchedTokenSecrets;
  let validator: TokenValidator;
  let registry: Registry;
  before(async () => {
    // The API server's one-minute bookmarks, sent only while Secrets change: the watch is current
    // because the API server accepted it, not because something was bookmarked.
    sim = await startApiServer();
    core = makeClients(sim.kubeConfig()).core;
    requests = countRequests(sim);
    registry = new Registry();
    tokens = new WatchedTokenSecrets({ kubeConfig: sim.kubeConfig(), api: apiTokenSource(core), registry });
    validator = new TokenValidator(tokens);
    tokens.start();
    await until('the watch is current', () => tokens.isCurrent());
  });
  after(async () => {
    await tokens.stop();
    await sim.close();
  });
  const create = async () => {
    const token = newBootstrapToken({ now: new Date() });
    await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(token) });
    return { ...token, text: `${token.id}.${token.secret}` };
  };
  const outcome = async (token: string) => {
    const result = await validator.validate(token, new Date());
    return 'rejected' in result ? result.rejected : `accepted ${result.id}`;
  };

  /** Token lookups so far by where they were answered, from the controller's metric. */
  const lookups = async () => {
    const values = (await registry.getSingleMetric('kops_controller_bootstrap_token_reads_total')?.get())
      ?.values;
    const of = (source: string) => values?.find((v) => v.labels['source'] === source)?.value ?? 0;
    return { watch: of('watch'), api: of('api') };
  };
  const secretReads = () => requests('get', 'secrets') + requests('list', 'secrets');

  test('a burst of guessed tokens costs the API server no read', async () => {
    const known = await create();
    await until(
      'the watch delivered the token',
      async () => (await outcome(known.text)) === `accepted ${known.id}`,
    );
    const before = { reads: secretReads(), lookups: await lookups() };
    const guesses = Array.from({ length: 500 }, () => `${randomTokenString(6)}.${randomTokenString(16)}`);
    // Token ids are public (cluster-info names them): guessing the secret of a known id costs nothing either.
    guesses.push(...Array.from({ length: 100 }, () => `${known.id}.${randomTokenString(16)}`));
    const outcomes = await Promise.all(guesses.map(outcome));
    assert.ok(
      outcomes.every((o) => o.startsWith('bootstrap token ')),
      outcomes.find((o) => o.startsWith('accepted')),
    );
    assert.equal(secretReads() - before.reads, 0, 'no Secret read for any guess');
    const after = await lookups();
    assert.deepEqual(
      { watch: after.watch - before.lookups.watch, api: after.api - before.lookups.api },
      {
        watch: 600,
        api: 0,
      },
    );
  });

  test('a malformed token never reaches the API server', async () => {
    const before = secretReads();
    for (const token of [
      '',
      'abcdef',
      'ABCDEF.0123456789abcdef',
      '../../x.0123456789abcdef',
      'abcdef.0123456789abcde',
      `${'a'.repeat(6)}.${'b'.repeat(4096)}`,
    ]) {
      assert.equal(await outcome(token), 'malformed token');
    }
    assert.equal(secretReads(), before);
  });

  test('a new token authenticates once the watch delivered it; a deleted one stops at once', async () => {
    const token = await create();
    await until(
      'the new token authenticates',
      async () => (await outcome(token.text)) === `accepted ${token.id}`,
    );
    await core.deleteNamespacedSecret({ name: `bootstrap-token-${token.id}`, namespace: 'kube-system' });
    // Acceptance always rests on a read of the Secret, so the watch's delivery delay does not matter.
    assert.equal(await outcome(token.text), `bootstrap token ${token.id}: no such token`);
  });

  test('while the watch is down every lookup reads the API server; once it is back, guesses are free again', async () => {
    // The watch cannot list or watch: the informer retries, and its cache may lag behind the API server.
    sim.faults.errors({ resource: 'secrets', verbs: ['list', 'watch'], rate: 1 });
    try {
      sim.faults.dropWatches({ resource: 'secrets' });
      await until('the watch is no longer current', () => !tokens.isCurrent());
      // A token created while the watch is down authenticates at once: the lookup read the API server.
      const token = await create();
      assert.equal(await outcome(token.text), `accepted ${token.id}`);
      const before = requests('get', 'secrets');
      const guesses = Array.from({ length: 20 }, () => `${randomTokenString(6)}.${randomTokenString(16)}`);
      for (const guess of guesses) assert.match(await outcome(guess), /: no such token$/);
      assert.equal(
        requests('get', 'secrets') - before,
        guesses.length,
        'the documented cost: one read a guess',
      );
    } finally {
      sim.faults.reset();
    }
    await until('the watch is current again', () => tokens.isCurrent());
    const before = requests('get', 'secrets');
    assert.match(await outcome(`${randomTokenString(6)}.${randomTokenString(16)}`), /: no such token$/);
    assert.equal(requests('get', 'secrets'), before);
  });

  test('with the API server failing, a guess is still refused by the watch, and a real token is neither accepted nor refused', async () => {
    const token = await create();
    await until(
      'the watch delivered the token',
      async () => (await outcome(token.text)) === `accepted ${token.id}`,
    );
    sim.faults.errors({ resource: 'secrets', verbs: ['get'], rate: 1 });
    try {
      assert.match(await outcome(`${randomTokenString(6)}.${randomTokenString(16)}`), /: no such token$/);
      await assert.rejects(outcome(token.text), (err: Error & { kind?: string }) => {
        assert.equal(err.kind, 'unavailable', err.message);
        return true;
      });
    } finally {
      sim.faults.reset();
    }
    assert.equal(await outcome(token.text), `accepted ${token.id}`);
  });
});

describe('an API server that accepts the connection and never answers', () => {
  test('the token Secret read ends at its deadline: a dependency fault (503 with Retry-After), its connection closed', async () => {
    const silent = await silentApiServer();
    try {
      const core = silent.kubeConfig.makeApiClient(CoreV1Api);
      const policy = bootstrapTokenPolicy({
        validator: new TokenValidator(apiTokenSource(core, { timeoutMs: 200 })),
      });
      const request = testRequest({
        claimedNodeName: 'node-a',
        proof: { kind: 'bootstrap-token', token: 'abcdef.0123456789abcdef' },
      });
      const started = Date.now();
      const outcome = await outcomeWithin(policy.evaluate(request, contextAt()), 5_000);
      assert.ok(!outcome.pending, 'the token read was still pending 5 s after its 200 ms deadline');
      assert.ok(Date.now() - started < 2_000, `answered after ${Date.now() - started} ms`);
      const { error } = outcome;
      assert.ok(error instanceof DependencyFaultError, String(error));
      assert.equal(error.dependency, 'kubernetes-api');
      assert.equal(error.httpStatus, 503);
      assert.ok(error.retryAfterSeconds >= 2, String(error.retryAfterSeconds));
      assert.match(String((error.cause as Error).message), /no answer within 200 ms/);
      // The call was aborted, not left running: the API server sees its connection closed.
      const deadline = Date.now() + 2_000;
      while (silent.open() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(silent.open(), 0, 'the abandoned read still holds its connection');
    } finally {
      silent.close();
    }
  });
});
