import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { createHetznerProvider, hetznerTokenVariable } from './provider.ts';

test('without HCLOUD_TOKEN the provider is a configuration error', () => {
  const saved = process.env[hetznerTokenVariable];
  delete process.env[hetznerTokenVariable];
  try {
    assert.throws(() => createHetznerProvider({ clusterName: 'c.example.com' }), ConfigError);
  } finally {
    if (saved !== undefined) process.env[hetznerTokenVariable] = saved;
  }
});
