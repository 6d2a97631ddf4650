/**
 * Compute Engine zone names in every form Google uses, and none that is not a path-safe label.
 * Google's AI zones (docs.cloud.google.com/compute/docs/regions-zones/ai-zones: `us-central1-ai1a`,
 * `us-south1-ai1b`) and the S3NS universe's zones (`u-france-east1-a`) are real zones; kops takes a
 * zone as written (gcetpmverifier: only `HasPrefix(zone, region+"-")`). The same pattern checks TPM proofs,
 * so a zone it refused would deny a node at bootstrap as well as at identification.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isGceZone, parseGceProviderID } from './resource-names.ts';

test('GCE AI zones and S3NS zones are zones', () => {
  for (const zone of ['us-central1-a', 'us-central1-ai1a', 'us-south1-ai1b', 'u-france-east1-a']) {
    assert.equal(isGceZone(zone), true, zone);
    assert.doesNotThrow(() => parseGceProviderID(`gce://my-project/${zone}/node-1`), zone);
  }
  for (const zone of [
    '..',
    '.',
    'US-CENTRAL1-A',
    'us-central1',
    'us-central1-a/..',
    'us-central1-a.',
    '-central1-a',
  ]) {
    assert.equal(isGceZone(zone), false, zone);
  }
});
