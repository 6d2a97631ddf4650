/** Loads and validates the configuration file (YAML or JSON; kops writes JSON into a ConfigMap). */
import { readFile } from 'node:fs/promises';
import { type Document, parseDocument } from 'yaml';
import type { z } from 'zod';
import { ConfigError, fileErrorReason } from '../errors.ts';
import { type Config, configSchema } from './schema.ts';

/** Renders a zod issue path the way a user writes it: `server.provider.aws.nodesRoles[0]`. */
export function formatIssuePath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out || '(top level)';
}

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') {
    const base = issue.path.length ? `${formatIssuePath(issue.path)}.` : '';
    return issue.keys.map((k) => `${base}${k}: unknown field`).join('; ');
  }
  return `${formatIssuePath(issue.path)}: ${issue.message.replace(/^Invalid input: /, '')}`;
}

/** Validates an already-parsed configuration object. */
export function parseConfig(raw: unknown, source = 'config'): Config {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ConfigError(
      `${source}: expected a mapping of settings, got ${raw === null ? 'nothing' : typeof raw}`,
    );
  }
  const result = configSchema.safeParse(raw);
  if (!result.success) {
    throw new ConfigError(`${source}: ${result.error.issues.map(describeIssue).join('; ')}`, {
      details: {
        issues: result.error.issues.map((i) => ({ path: formatIssuePath(i.path), message: i.message })),
      },
    });
  }
  return result.data;
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

/** Parses YAML or JSON text into a configuration; syntax errors name the line and column. */
export function parseConfigText(text: string, source = 'config'): Config {
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  const problem = yamlSyntaxProblem(doc, source);
  if (problem) throw new ConfigError(problem);
  return parseConfig(doc.toJS(), source);
}

/** Reads and validates a configuration file. */
export async function loadConfigFile(path: string): Promise<Config> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${path}: ${fileErrorReason(err)}; pass --conf FILE`);
  }
  return parseConfigText(text, path);
}
