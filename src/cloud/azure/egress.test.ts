import assert from 'node:assert/strict';
import { Agent as HttpAgent } from 'node:http';
import { test } from 'node:test';
import { createPipelineRequest } from '@azure/core-rest-pipeline';
import { sharedEgressAgent } from '../../net/egress-proxy.ts';
import { egressPolicy } from './egress.ts';

test("egressPolicy replaces the agent the SDK's proxy policy set with the egress agent for the request's scheme", async () => {
  const policy = egressPolicy();
  const agents: unknown[] = [];
  const next = async (request: { agent?: unknown }) => {
    agents.push(request.agent);
    return undefined as never;
  };
  for (const url of ['http://169.254.169.254/metadata/identity/oauth2/token', 'https://login.example/t']) {
    const request = createPipelineRequest({ url });
    request.agent = new HttpAgent(); // as proxyPolicy sets its proxy agent before us
    await policy.sendRequest(request, next);
  }
  const tls = { ca: 'PEM' };
  const withTls = [
    createPipelineRequest({ url: 'https://a.example/' }),
    createPipelineRequest({ url: 'https://b.example/' }),
  ];
  for (const request of withTls) {
    request.tlsSettings = tls;
    await policy.sendRequest(request, next);
  }
  assert.equal(agents[0], sharedEgressAgent('http:'));
  assert.equal(agents[1], sharedEgressAgent('https:'));
  assert.notEqual(agents[2], sharedEgressAgent('https:'), 'TLS settings of its own: an agent that has them');
  assert.equal((agents[2] as { options: { ca?: string } }).options.ca, 'PEM');
  assert.equal(agents[3], agents[2], 'one agent per TLS settings');
});
