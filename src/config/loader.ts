/** Loads and validates the configuration file (YAML or JSON; kops writes JSON into a ConfigMap). */
import { readFile } from 'node:fs/promises';
import { parseDocument } from 'yaml';
import { ConfigError, fileErrorReason } from '../errors.ts';
import { describeIssue, formatIssuePath, yamlSyntaxProblem } from '../parse-problems.ts';
import { type Config, configSchema } from './schema.ts';

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
