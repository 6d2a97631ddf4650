/**
 * The subset of the Compute Engine list `filter` language the simulator understands: comparisons
 * `field = value`, `field != value`, the legacy regular-expression forms `field eq re` / `field ne re`,
 * parentheses, `AND` (or juxtaposition) and `OR`, with OR binding tighter than AND as in AIP-160.
 * Fields are dotted paths into the resource's JSON (`name`, `id`, `status`, `labels.env`).
 */
import { InvalidInputError } from '../../errors.ts';

/** A compiled filter: true when a resource matches. */
export type Filter = (resource: unknown) => boolean;

type Token = { kind: 'open' | 'close' | 'and' | 'or' } | { kind: 'word'; text: string; quoted: boolean };

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const ch = text[i] as string;
    if (/\s/.test(ch)) {
      i++;
    } else if (ch === '(' || ch === ')') {
      tokens.push({ kind: ch === '(' ? 'open' : 'close' });
      i++;
    } else if (ch === '"' || ch === "'") {
      const end = text.indexOf(ch, i + 1);
      if (end < 0) throw new InvalidInputError(`Invalid value for field 'filter': unterminated string`);
      tokens.push({ kind: 'word', text: text.slice(i + 1, end), quoted: true });
      i = end + 1;
    } else if (ch === '!' && text[i + 1] === '=') {
      tokens.push({ kind: 'word', text: '!=', quoted: false });
      i += 2;
    } else if (ch === '=') {
      tokens.push({ kind: 'word', text: '=', quoted: false });
      i++;
    } else {
      const match = /^[^\s()"'=!]+/.exec(text.slice(i));
      const word = match?.[0] ?? ch;
      i += word.length;
      if (word === 'AND') tokens.push({ kind: 'and' });
      else if (word === 'OR') tokens.push({ kind: 'or' });
      else tokens.push({ kind: 'word', text: word, quoted: false });
    }
  }
  return tokens;
}

function fieldValue(resource: unknown, path: string): string | undefined {
  let current: unknown = resource;
  for (const part of path.split('.')) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string, unknown>)[part];
  }
  if (current === undefined || current === null || typeof current === 'object') return undefined;
  return String(current);
}

/** Compiles a filter expression; an empty or absent filter matches everything. */
export function compileFilter(text: string | undefined): Filter {
  if (!text?.trim()) return () => true;
  const tokens = tokenize(text);
  let pos = 0;
  const fail = (what: string): never => {
    throw new InvalidInputError(`Invalid value for field 'filter': ${what} in "${text}"`);
  };

  const comparison = (): Filter => {
    const [field, op, value] = [tokens[pos], tokens[pos + 1], tokens[pos + 2]];
    if (field?.kind !== 'word' || op?.kind !== 'word' || value?.kind !== 'word') {
      return fail('expected "field operator value"');
    }
    pos += 3;
    const path = field.text;
    switch (op.text) {
      case '=':
        return (r) => fieldValue(r, path) === value.text;
      case '!=':
        return (r) => fieldValue(r, path) !== value.text;
      case 'eq':
      case 'ne': {
        const re = new RegExp(`^(?:${value.text})$`);
        const wanted = op.text === 'eq';
        return (r) => re.test(fieldValue(r, path) ?? '') === wanted;
      }
      default:
        return fail(`unknown operator "${op.text}"`);
    }
  };

  const primary = (): Filter => {
    if (tokens[pos]?.kind === 'open') {
      pos++;
      const inner = conjunction();
      if (tokens[pos]?.kind !== 'close') fail('missing ")"');
      pos++;
      return inner;
    }
    return comparison();
  };

  const disjunction = (): Filter => {
    const parts = [primary()];
    while (tokens[pos]?.kind === 'or') {
      pos++;
      parts.push(primary());
    }
    return parts.length === 1 ? (parts[0] as Filter) : (r) => parts.some((p) => p(r));
  };

  const conjunction = (): Filter => {
    const parts = [disjunction()];
    while (pos < tokens.length && tokens[pos]?.kind !== 'close') {
      if (tokens[pos]?.kind === 'and') pos++;
      parts.push(disjunction());
    }
    return parts.length === 1 ? (parts[0] as Filter) : (r) => parts.every((p) => p(r));
  };

  const filter = conjunction();
  if (pos !== tokens.length) fail('unexpected ")"');
  return filter;
}
