import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { scratchFile } from '../testing/openssl.ts';
import { toolPath } from '../testing/tools.ts';
import { renderClientKubeconfig, validateServerUrl } from './kubeconfig.ts';

const config = {
  server: 'https://api.example.com:6443',
  caBundlePem: 'CA\n',
  certificatePem: 'CERT\n',
  key: { pem: 'KEY\n' },
  user: 'system:node:node-a',
};

test('kubectl reads the kubeconfig: cluster, user and context, everything inline', () => {
  const file = scratchFile('kubeconfig', renderClientKubeconfig(config));
  const view = JSON.parse(
    execFileSync(toolPath('kubectl'), ['--kubeconfig', file, 'config', 'view', '--raw', '-o', 'json'], {
      encoding: 'utf8',
    }),
  );
  assert.equal(view['current-context'], 'system:node:node-a@kubernetes');
  assert.deepEqual(view.clusters[0], {
    name: 'kubernetes',
    cluster: {
      server: 'https://api.example.com:6443',
      'certificate-authority-data': Buffer.from('CA\n').toString('base64'),
    },
  });
  assert.deepEqual(view.users[0], {
    name: 'system:node:node-a',
    user: {
      'client-certificate-data': Buffer.from('CERT\n').toString('base64'),
      'client-key-data': Buffer.from('KEY\n').toString('base64'),
    },
  });
  assert.deepEqual(view.contexts[0].context, { cluster: 'kubernetes', user: 'system:node:node-a' });
});

test('a key that stays on the node is referenced by its path', () => {
  const text = renderClientKubeconfig({
    ...config,
    key: { path: '/var/lib/kubelet/pki/kubelet-client.key' },
  });
  assert.match(text, /client-key: \/var\/lib\/kubelet\/pki\/kubelet-client\.key\n/);
  assert.doesNotMatch(text, /client-key-data/);
});

test('only plain https URLs are accepted as the server', () => {
  assert.equal(validateServerUrl('https://10.0.0.1:6443'), 'https://10.0.0.1:6443');
  for (const bad of [
    'http://api:6443',
    'api.example.com',
    'https://user:pw@api',
    'https://api/?x=1',
    'https://api/#f',
  ]) {
    assert.throws(() => validateServerUrl(bad), /--server/, bad);
  }
});
