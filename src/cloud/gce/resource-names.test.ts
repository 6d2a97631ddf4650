import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../../errors.ts';
import {
  formatGceProviderID,
  parseCreatedBy,
  parseGceProviderID,
  parseTemplateUrl,
  parseZonalUrl,
} from './resource-names.ts';

test('a GCE providerID parses into project, zone and name and formats back', () => {
  const ref = parseGceProviderID('gce://my-project/us-central1-a/nodes-abcd');
  assert.deepEqual(ref, { project: 'my-project', zone: 'us-central1-a', name: 'nodes-abcd' });
  assert.equal(formatGceProviderID(ref), 'gce://my-project/us-central1-a/nodes-abcd');
  assert.equal(
    parseGceProviderID('gce://example.com:proj-1/europe-west1-b/n1').project,
    'example.com:proj-1',
  );
});

test('malformed providerIDs are input errors that say what was expected', () => {
  for (const bad of [
    '',
    'aws:///us-east-1a/i-0123',
    'gce://proj/us-central1-a',
    'gce://proj/us-central1-a/name/extra',
    'gce://my-project/us-central1/n1',
    'gce://my-project/us-central1-a/Bad_Name',
    'gce://my-project/us-central1-a/n1") OR (name = "x',
    'gce:///us-central1-a/n1',
  ]) {
    assert.throws(() => parseGceProviderID(bad), InvalidInputError, bad);
  }
  assert.throws(() => parseGceProviderID('x'), /expected gce:\/\/<project>\/<zone>\/<instance-name>/);
});

test('created-by names a zonal MIG; anything else is not a MIG', () => {
  assert.deepEqual(
    parseCreatedBy('projects/123456789012/zones/us-central1-a/instanceGroupManagers/a-nodes'),
    {
      project: '123456789012',
      zone: 'us-central1-a',
      name: 'a-nodes',
    },
  );
  assert.equal(parseCreatedBy('projects/1234/regions/us-central1/instanceGroupManagers/r-nodes'), undefined);
  assert.equal(parseCreatedBy('projects/1234/zones/us-central1-a/instances/x'), undefined);
  assert.equal(parseCreatedBy('someone'), undefined);
});

test('template and zonal URLs parse from full self links', () => {
  const base = 'https://www.googleapis.com/compute/v1/projects/p-1';
  assert.deepEqual(parseTemplateUrl(`${base}/global/instanceTemplates/nodes-tpl`), {
    project: 'p-1',
    name: 'nodes-tpl',
  });
  assert.equal(parseTemplateUrl(`${base}/regions/us-central1/instanceTemplates/nodes-tpl`), undefined);
  assert.deepEqual(parseZonalUrl(`${base}/zones/us-central1-a/instanceGroupManagers/a-nodes`), {
    project: 'p-1',
    zone: 'us-central1-a',
    collection: 'instanceGroupManagers',
    name: 'a-nodes',
  });
});
