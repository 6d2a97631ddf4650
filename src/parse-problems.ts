/**
 * How a file that failed to parse is described to the user, the same way for every file the program
 * reads (its configuration, the kops objects of the state store, the metal inventory): a YAML syntax
 * error as a line and column, a schema issue as the field path a user writes.
 */
import { type Document, parseDocument } from 'yaml';
import type { z } from 'zod';

/** Renders a zod issue path the way a user writes it: `server.provider.aws.nodesRoles[0]`. */
export function formatIssuePath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out || '(top level)';
}

/** One schema issue as `path: what is wrong`; unknown fields are named one by one. */
export function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') {
    const base = issue.path.length ? `${formatIssuePath(issue.path)}.` : '';
    return issue.keys.map((k) => `${base}${k}: unknown field`).join('; ');
  }
  return `${formatIssuePath(issue.path)}: ${issue.message.replace(/^Invalid input: /, '')}`;
}

/**
 * A parsed YAML document's first syntax error as one line, `source: line L, column C: what is wrong`
 * (the message's own trailing position and code excerpt dropped), or undefined when it parsed.
 */
export function yamlSyntaxProblem(doc: Pick<Document, 'errors'>, source: string): string | undefined {
  const [first] = doc.errors;
  if (!first) return undefined;
  const pos = first.linePos?.[0];
  const where = pos ? `line ${pos.line}, column ${pos.col}` : 'unknown position';
  return `${source}: ${where}: ${first.message.split(' at line')[0]?.split('\n')[0]}`;
}

/**
 * What a step of the yaml library (parsing text, expanding a document) returns, or why it failed
 * where it throws rather than reports: an alias that names no anchor or more than its 100 alias
 * expansions (its `maxAliasCount`, which stops alias bombs), a ReferenceError; nesting deep enough
 * to overflow the stack (its parser's or its expansion's), a RangeError. The caller names its source
 * and its error type; anything else `step` throws is rethrown.
 */
export function yamlAttempt<T>(step: () => T): { value: T } | { problem: string; cause: Error } {
  try {
    return { value: step() };
  } catch (err) {
    if (err instanceof RangeError)
      return { problem: `collections nested too deeply (${err.message})`, cause: err };
    if (err instanceof ReferenceError) return { problem: err.message, cause: err };
    throw err;
  }
}

/**
 * The plain value of YAML or JSON text a person wrote; a syntax error (with its line and column) or
 * what the yaml library throws ({@link yamlAttempt}) is `fail`'s error, its message naming `source`.
 */
export function yamlTextValue(
  text: string,
  source: string,
  fail: (message: string, cause?: Error) => Error,
): unknown {
  const result = yamlAttempt((): unknown => {
    const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
    const problem = yamlSyntaxProblem(doc, source);
    if (problem) throw fail(problem);
    return doc.toJS();
  });
  if ('problem' in result) throw fail(`${source}: ${result.problem}`, result.cause);
  return result.value;
}
