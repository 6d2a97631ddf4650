import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { document, el, escapeXml, list, wrap } from './xml.ts';

describe('XML writing', () => {
  it('escapes markup characters', () => {
    assert.equal(escapeXml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;');
  });

  it('omits absent values and renders empty lists as empty elements', () => {
    assert.equal(el('a', undefined), '');
    assert.equal(el('a', 0), '<a>0</a>');
    assert.equal(el('a', false), '<a>false</a>');
    assert.equal(
      list('tagSet', 'item', [], () => ''),
      '<tagSet/>',
    );
    assert.equal(
      list('Zones', 'member', ['x', 'y'], (z) => z),
      '<Zones><member>x</member><member>y</member></Zones>',
    );
    assert.equal(wrap('a', '<b/>'), '<a><b/></a>');
  });

  it('writes the declaration and namespace', () => {
    assert.equal(
      document('R', 'urn:x', '<a/>'),
      '<?xml version="1.0" encoding="UTF-8"?>\n<R xmlns="urn:x"><a/></R>',
    );
  });
});
