/**
 * Label and field selectors with the API's grammar and matching rules: `!=` and `notin` match
 * objects that lack the key, field selectors accept only the fields each type indexes.
 */
import { badRequest } from './status.ts';

type LabelOperator = 'exists' | '!exists' | '=' | '!=' | 'in' | 'notin';

/** One parsed label requirement. */
export interface LabelRequirement {
  key: string;
  operator: LabelOperator;
  values: string[];
}

/** One parsed field requirement (`=`/`==` or `!=`). */
export interface FieldRequirement {
  field: string;
  equal: boolean;
  value: string;
}

const qualifiedNamePart = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** Why a label key is not a qualified name, or undefined when it is one. */
export function labelKeyProblem(key: string): string | undefined {
  const slash = key.indexOf('/');
  const name = slash < 0 ? key : key.slice(slash + 1);
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  if (prefix !== undefined && (prefix.length === 0 || prefix.length > 253 || !dnsSubdomain.test(prefix))) {
    return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
  }
  if (name.length === 0) return 'name part must be non-empty';
  if (name.length > 63) return 'name part must be no more than 63 characters';
  if (!qualifiedNamePart.test(name)) {
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
  }
  return undefined;
}

/** Why a label value is invalid, or undefined when it is valid. */
export function labelValueProblem(value: string): string | undefined {
  if (value.length > 63) return 'must be no more than 63 characters';
  if (!labelValue.test(value)) {
    return "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
  }
  return undefined;
}

type Token = { kind: 'id' | 'op' | '(' | ')' | ',' | 'end'; text: string };

function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < input.length) {
    const c = input[i] as string;
    if (/\s/.test(c)) {
      i++;
    } else if (c === '(' || c === ')' || c === ',') {
      tokens.push({ kind: c, text: c });
      i++;
    } else if (c === '!' || c === '=') {
      const two = input.slice(i, i + 2);
      if (two === '!=' || two === '==') {
        tokens.push({ kind: 'op', text: two });
        i += 2;
      } else {
        tokens.push({ kind: 'op', text: c });
        i++;
      }
    } else {
      let j = i;
      while (j < input.length && !/[\s(),!=]/.test(input[j] as string)) j++;
      tokens.push({ kind: 'id', text: input.slice(i, j) });
      i = j;
    }
  }
  tokens.push({ kind: 'end', text: '' });
  return tokens;
}

function parseError(detail: string): never {
  throw badRequest(`unable to parse requirement: ${detail}`);
}

/** Parses a label selector; an invalid one is a 400 BadRequest with the API's wording. */
export function parseLabelSelector(input: string): LabelRequirement[] {
  const tokens = tokenize(input);
  let pos = 0;
  const peek = () => tokens[pos] as Token;
  const next = () => tokens[pos++] as Token;
  const requirements: LabelRequirement[] = [];
  if (peek().kind === 'end') return requirements;
  for (;;) {
    let t = next();
    let negated = false;
    if (t.kind === 'op' && t.text === '!') {
      negated = true;
      t = next();
    }
    if (t.kind !== 'id') parseError(`found '${t.text}', expected: !, identifier, or 'end of string'`);
    const key = t.text;
    const keyProblem = labelKeyProblem(key);
    if (keyProblem) parseError(`<nil>: Invalid value: "${key}": ${keyProblem}`);
    const after = peek();
    if (negated) {
      if (after.kind !== ',' && after.kind !== 'end')
        parseError(`found '${after.text}', expected: ',' or 'end of string'`);
      requirements.push({ key, operator: '!exists', values: [] });
    } else if (after.kind === ',' || after.kind === 'end') {
      requirements.push({ key, operator: 'exists', values: [] });
    } else if (after.kind === 'op' && after.text !== '!') {
      next();
      const value = peek().kind === 'id' ? next().text : '';
      requirements.push({ key, operator: after.text === '!=' ? '!=' : '=', values: [value] });
    } else if (after.kind === 'id' && (after.text === 'in' || after.text === 'notin')) {
      next();
      if (next().kind !== '(') parseError(`found '${tokens[pos - 1]?.text}', expected: '('`);
      const values: string[] = [];
      for (;;) {
        const v = peek();
        if (v.kind === 'id') {
          values.push(next().text);
        } else if (v.kind === ',' || v.kind === ')') {
          // An empty element is the empty string, as in `in (a,)`.
          values.push('');
        } else {
          parseError(`found '${v.text}', expected: ',', ')' or identifier`);
        }
        const sep = next();
        if (sep.kind === ')') break;
        if (sep.kind !== ',') parseError(`found '${sep.text}', expected: ',' or ')'`);
      }
      requirements.push({ key, operator: after.text as 'in' | 'notin', values });
    } else {
      parseError(`found '${after.text}', expected: in, notin, =, ==, !=, gt, lt`);
    }
    for (const value of requirements.at(-1)?.values ?? []) {
      const problem = labelValueProblem(value);
      if (problem) parseError(`values[0][${key}]: Invalid value: "${value}": ${problem}`);
    }
    const sep = next();
    if (sep.kind === 'end') return requirements;
    if (sep.kind !== ',') parseError(`found '${sep.text}', expected: ',' or 'end of string'`);
  }
}

/** Whether labels satisfy every requirement. */
export function matchesLabels(
  requirements: readonly LabelRequirement[],
  labels: Record<string, string> | undefined,
): boolean {
  for (const r of requirements) {
    const has = labels !== undefined && Object.hasOwn(labels, r.key);
    const value = has ? labels[r.key] : undefined;
    switch (r.operator) {
      case 'exists':
        if (!has) return false;
        break;
      case '!exists':
        if (has) return false;
        break;
      case '=':
        if (value !== r.values[0]) return false;
        break;
      case '!=':
        if (has && value === r.values[0]) return false;
        break;
      case 'in':
        if (!has || !r.values.includes(value as string)) return false;
        break;
      case 'notin':
        if (has && r.values.includes(value as string)) return false;
        break;
    }
  }
  return true;
}

/** Splits on an unescaped separator; `\,` and `\=` are literal, as in the API's field selectors. */
function splitUnescaped(input: string, separator: string): string[] {
  const parts: string[] = [];
  let current = '';
  for (let i = 0; i < input.length; i++) {
    const c = input[i] as string;
    if (c === '\\' && i + 1 < input.length) {
      current += c + input[++i];
    } else if (c === separator) {
      parts.push(current);
      current = '';
    } else {
      current += c;
    }
  }
  parts.push(current);
  return parts;
}

function unescapeSelectorValue(value: string): string {
  return value.replace(/\\(.)/g, '$1');
}

/** Parses a field selector against the fields a type supports; unsupported fields are a 400. */
export function parseFieldSelector(input: string, supported: readonly string[]): FieldRequirement[] {
  if (input.trim() === '') return [];
  return splitUnescaped(input, ',').map((term) => {
    const match = /^(.*?)(!=|==|=)(.*)$/s.exec(term);
    if (!match || match[1] === undefined || match[1] === '') {
      throw badRequest(`invalid selector: '${input}'; can't understand '${term}'`);
    }
    const field = match[1].trim();
    if (!supported.includes(field)) throw badRequest(`field label not supported: ${field}`);
    return { field, equal: match[2] !== '!=', value: unescapeSelectorValue(match[3] ?? '') };
  });
}

/** Whether an object's field values satisfy every requirement. */
export function matchesFields(
  requirements: readonly FieldRequirement[],
  fields: (field: string) => string,
): boolean {
  for (const r of requirements) {
    if ((fields(r.field) === r.value) !== r.equal) return false;
  }
  return true;
}
