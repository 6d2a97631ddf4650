import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { EC2Client } from '@aws-sdk/client-ec2';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import { ConfigError, InternalError } from '../../errors.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { ipamControllerFromConfig } from './from-config.ts';
import { IpamController } from './ipam-controller.ts';

const kubeConfig = new KubeConfig();
kubeConfig.loadFromOptions({
  clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }],
  users: [{ name: 'u' }],
  contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
  currentContext: 'x',
});
const aws = new AwsNodeIdentifier({ ec2: {} as EC2Client, clusterName: 'c.example.com' });

test('aws, gce and metal have cloud IPAM, as in kops', async () => {
  const registry = new Registry();
  assert.ok(
    (await ipamControllerFromConfig({
      cloud: 'aws',
      nodeIdentifier: aws,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      registry,
    })) instanceof IpamController,
  );
  assert.ok(
    (await ipamControllerFromConfig({
      cloud: 'metal',
      nodeIdentifier: aws,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      registry,
    })) instanceof IpamController,
  );
});

test('enableCloudIPAM on another cloud is refused at start-up with a line naming it', async () => {
  await assert.rejects(
    () =>
      ipamControllerFromConfig({
        cloud: 'hetzner',
        nodeIdentifier: aws,
        kubeConfig,
        nodes: nodeInformer(kubeConfig),
        registry: new Registry(),
      }),
    (err: unknown) =>
      err instanceof ConfigError && /enableCloudIPAM.*aws, gce, metal only, not hetzner/.test(err.message),
  );
});

test("a provider's identifier of another type is a wiring bug, not a silent no-op", async () => {
  await assert.rejects(
    () =>
      ipamControllerFromConfig({
        cloud: 'gce',
        nodeIdentifier: aws,
        kubeConfig,
        nodes: nodeInformer(kubeConfig),
        registry: new Registry(),
      }),
    InternalError,
  );
});
