import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { startGcsSim } from './server.ts';

const sim = await startGcsSim({ buckets: ['b'], token: 't' });
after(() => sim.close());
const auth = { authorization: 'Bearer t' };
const api = `${sim.endpoint}/storage/v1/b/b/o`;

describe('GCS simulator', () => {
  test('insert with uploadType=media, then metadata and media downloads', async () => {
    const insert = await fetch(`${sim.endpoint}/upload/storage/v1/b/b/o?uploadType=media&name=a%2Fb`, {
      method: 'POST',
      headers: auth,
      body: 'data',
    });
    assert.equal(insert.status, 200);
    const inserted = (await insert.json()) as { name: string; generation: string; size: string };
    assert.equal(inserted.name, 'a/b');
    assert.equal(inserted.size, '4');
    const meta = (await (await fetch(`${api}/a%2Fb`, { headers: auth })).json()) as { generation: string };
    assert.equal(meta.generation, inserted.generation);
    const media = await fetch(`${api}/a%2Fb?alt=media`, { headers: auth });
    assert.equal(await media.text(), 'data');
    assert.equal(media.headers.get('x-goog-generation'), inserted.generation);
  });

  test('list filters by prefix and pages; delete removes', async () => {
    for (const n of ['p/1', 'p/2', 'p/3', 'q/1']) sim.putObject('b', n, n);
    const first = (await (await fetch(`${api}?prefix=p%2F&maxResults=2`, { headers: auth })).json()) as {
      items: { name: string }[];
      nextPageToken?: string;
    };
    assert.deepEqual(
      first.items.map((i) => i.name),
      ['p/1', 'p/2'],
    );
    const second = (await (
      await fetch(`${api}?prefix=p%2F&maxResults=2&pageToken=${first.nextPageToken}`, { headers: auth })
    ).json()) as { items: { name: string }[]; nextPageToken?: string };
    assert.deepEqual(
      second.items.map((i) => i.name),
      ['p/3'],
    );
    assert.equal(second.nextPageToken, undefined);
    assert.equal((await fetch(`${api}/q%2F1`, { method: 'DELETE', headers: auth })).status, 204);
    assert.equal((await fetch(`${api}/q%2F1`, { method: 'DELETE', headers: auth })).status, 404);
  });

  test('requests without the token are 401; unknown routes and other upload types are refused', async () => {
    assert.equal((await fetch(`${api}/p%2F1`)).status, 401);
    assert.equal((await fetch(`${sim.endpoint}/storage/v1/b/b`, { headers: auth })).status, 404);
    const multipart = await fetch(`${sim.endpoint}/upload/storage/v1/b/b/o?uploadType=multipart`, {
      method: 'POST',
      headers: auth,
      body: 'x',
    });
    assert.equal(multipart.status, 400);
    assert.equal((await fetch(`${sim.endpoint}/storage/v1/b/nope/o`, { headers: auth })).status, 404);
  });
});
