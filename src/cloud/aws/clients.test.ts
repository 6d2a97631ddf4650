import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DescribeAutoScalingGroupsCommand } from '@aws-sdk/client-auto-scaling';
import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { GetCallerIdentityCommand } from '@aws-sdk/client-sts';
import { Registry } from 'prom-client';
import { ConfigError } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import { eventually } from '../../net/testing.ts';
import { clusterInstances } from '../../sim/aws/scenario.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { outcomeWithin, silentServer } from '../../testing/silent-server.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { createAwsClients } from './clients.ts';

describe('createAwsClients', () => {
  it('configures every client with the region, adaptive retries and the endpoint', async () => {
    const clients = await createAwsClients({
      region: 'eu-west-1',
      endpoint: 'http://127.0.0.1:1',
      credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'secret' },
    });
    try {
      for (const client of [clients.ec2, clients.autoscaling, clients.sts]) {
        assert.equal(await client.config.region(), 'eu-west-1');
        assert.equal(((await client.config.retryStrategy()) as { mode?: string }).mode, 'adaptive');
        assert.equal(await client.config.maxAttempts(), 8);
      }
      assert.equal(clients.region, 'eu-west-1');
    } finally {
      clients.destroy();
    }
  });

  it('fails with a configuration error when no region is configured and IMDS is unreachable', async () => {
    await assert.rejects(
      createAwsClients({ imds: { endpoint: 'http://127.0.0.1:9', timeoutMs: 200 } }),
      ConfigError,
    );
  });
});

describe('an AWS endpoint that accepts the connection and never answers', () => {
  const credentials = { accessKeyId: 'AKIDTEST', secretAccessKey: 'secret' };

  it('each attempt ends at its request timeout, its connection closed', async () => {
    const silent = await silentServer();
    const clients = await createAwsClients({
      region: 'us-test-1',
      endpoint: silent.endpoint,
      credentials,
      maxAttempts: 1,
      requestTimeoutMs: 300,
    });
    try {
      const started = Date.now();
      const outcome = await outcomeWithin(clients.ec2.send(new DescribeInstancesCommand({})), 5_000);
      assert.ok(!outcome.pending, 'still pending 5 s after its 300 ms timeout');
      assert.ok(Date.now() - started < 2_000, `failed after ${Date.now() - started} ms`);
      assert.equal((outcome.error as Error).name, 'TimeoutError', String(outcome.error));
      assert.equal(await eventually(() => silent.open(), 0), 0, 'the attempt still holds its connection');
    } finally {
      clients.destroy();
      silent.close();
    }
  });

  it('destroy gives up the calls in flight at once: their connections closed, no retry reconnecting', async () => {
    const silent = await silentServer();
    // The defaults: 8 attempts, each with the 20 s request timeout.
    const clients = await createAwsClients({ region: 'us-test-1', endpoint: silent.endpoint, credentials });
    try {
      const calls: Promise<unknown>[] = [
        clients.ec2.send(new DescribeInstancesCommand({})),
        clients.autoscaling.send(new DescribeAutoScalingGroupsCommand({})),
      ];
      for (const call of calls) call.catch(() => undefined); // awaited below, unless an assertion fails first
      assert.equal(await eventually(() => silent.accepted(), 2), 2);
      const handler = clients.ec2.config.requestHandler as { httpHandlerConfigs(): Record<string, unknown> };
      assert.deepEqual(
        [handler.httpHandlerConfigs()['connectionTimeout'], handler.httpHandlerConfigs()['requestTimeout']],
        [5_000, 20_000],
      );
      clients.destroy();
      for (const call of calls) {
        const outcome = await outcomeWithin(call, 3_000);
        assert.ok(!outcome.pending, 'a call was still pending 3 s after destroy');
        assert.equal((outcome.error as Error).name, 'AbortError', String(outcome.error));
      }
      assert.equal(await eventually(() => silent.open(), 0), 0, 'a call still holds its connection');
      assert.equal(silent.accepted(), 2, 'a retry connected again after destroy');
    } finally {
      silent.close();
    }
  });
});

describe('cloud call counting', () => {
  it('counts every request against the simulator by command and result, and times each call', async () => {
    const frozen = new Date();
    const sim = await startAwsSimulator({ now: () => frozen });
    sim.ec2.addInstances(clusterInstances({ cluster: 'c.example.com', instanceGroup: 'nodes', count: 2 }));
    const registry = new Registry();
    const cloudCalls = cloudCallMetrics(registry);
    const options = { region: sim.region, endpoint: sim.endpoint, cloudCalls };
    const clients = await createAwsClients({ ...options, credentials: sim.credentials, maxAttempts: 2 });
    const wrongSecret = await createAwsClients({
      ...options,
      credentials: { ...sim.credentials, secretAccessKey: 'wrong' },
      maxAttempts: 1,
    });
    const unreachable = await createAwsClients({
      ...options,
      endpoint: 'http://127.0.0.1:1',
      credentials: sim.credentials,
      maxAttempts: 1,
    });
    try {
      await clients.ec2.send(new DescribeInstancesCommand({}));
      await clients.autoscaling.send(new DescribeAutoScalingGroupsCommand({}));
      await clients.sts.send(new GetCallerIdentityCommand({}));
      while (sim.throttling.bucket.take()) {
        // empty EC2's request bucket; the frozen clock never refills it
      }
      // Both attempts are refused: the retry the SDK makes is counted too.
      await assert.rejects(clients.ec2.send(new DescribeInstancesCommand({})), {
        name: 'RequestLimitExceeded',
      });
      await assert.rejects(wrongSecret.sts.send(new GetCallerIdentityCommand({})), {
        name: 'SignatureDoesNotMatch',
      });
      await assert.rejects(unreachable.autoscaling.send(new DescribeAutoScalingGroupsCommand({})));
      assert.deepEqual(await cloudRequests(registry), {
        'aws DescribeInstances ok': 1,
        'aws DescribeAutoScalingGroups ok': 1,
        'aws GetCallerIdentity ok': 1,
        'aws DescribeInstances throttled': 2,
        'aws GetCallerIdentity rejected': 1,
        'aws DescribeAutoScalingGroups error': 1,
      });
      assert.equal(
        sim.calls.throttled('DescribeInstances'),
        2,
        'the simulator refused as many as were counted',
      );
      assert.equal(
        await cloudCallsTimed(registry, 'aws', 'DescribeInstances'),
        2,
        'one per call, not per attempt',
      );
    } finally {
      clients.destroy();
      wrongSecret.destroy();
      unreachable.destroy();
      await sim.close();
    }
  });
});

describe('the SDK logger', () => {
  it('skips the redaction walk of every answer, and logs a failed call in one debug line without its input', async () => {
    const sim = await startAwsSimulator();
    sim.ec2.addInstances(clusterInstances({ cluster: 'c.example.com', instanceGroup: 'nodes', count: 3 }));
    const lines: string[] = [];
    const destination = { write: (line: string) => lines.push(line) };
    const clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
      logger: createLogger({ level: 'debug', destination }),
    });
    // Counts the SDK's redaction of answers for its info log record (schemaLogFilter).
    let answersRedacted = 0;
    clients.ec2.middlewareStack.add(
      (next, context) => (args) => {
        const filter = context.outputFilterSensitiveLog;
        context.outputFilterSensitiveLog = (output: unknown) => {
          answersRedacted += 1;
          return filter(output);
        };
        return next(args);
      },
      { step: 'initialize', name: 'countRedactions', priority: 'high' },
    );
    try {
      const answer = await clients.ec2.send(new DescribeInstancesCommand({}));
      assert.equal(answer.Reservations?.flatMap((r) => r.Instances ?? []).length, 3);
      assert.equal(answersRedacted, 0, 'no info record built');
      assert.equal(lines.length, 0, 'a successful call logs nothing');
      await assert.rejects(
        clients.ec2.send(new DescribeInstancesCommand({ InstanceIds: ['i-0123456789abcdef0'] })),
        { name: 'InvalidInstanceID.NotFound' },
      );
      assert.equal(lines.length, 1);
      const record = JSON.parse(lines[0] as string) as Record<string, unknown>;
      assert.deepEqual(
        { level: record['level'], msg: record['msg'], command: record['command'], err: record['err'] },
        {
          level: 'debug',
          msg: 'AWS call failed',
          command: 'DescribeInstancesCommand',
          err: 'InvalidInstanceID.NotFound',
        },
      );
      assert.equal(record['status'], 400);
      assert.doesNotMatch(lines[0] as string, /i-0123456789abcdef0/, 'the input is not logged');
    } finally {
      clients.destroy();
      await sim.close();
    }
  });
});
