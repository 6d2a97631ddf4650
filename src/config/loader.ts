/** Loads and validates the configuration file (YAML or JSON; kops writes JSON into a ConfigMap). */
import { readFile } from 'node:fs/promises';
import { ConfigError, fileErrorReason } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { describeIssue, formatIssuePath, yamlTextValue } from '../parse-problems.ts';
import { type Config, configSchema } from './schema.ts';

/** Validates an already-parsed configuration object. */
export function parseConfig(raw: unknown, source = 'config'): Config {
  if (!isJsonObject(raw)) {
    const got = raw === null ? 'nothing' : Array.isArray(raw) ? 'a list' : `a ${typeof raw}`;
    throw new ConfigError(`${source}: expected a mapping of settings, got ${got}`);
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
 * The plain value of YAML or JSON text an operator wrote (this file, the metal inventory); every
 * failure a ConfigError naming `source`: a syntax error with its line and column, or what the yaml library
 * throws (src/parse-problems.ts `yamlAttempt`).
 */
export function parseYamlText(text: string, source: string): unknown {
  return yamlTextValue(text, source, (message, cause) => new ConfigError(message, { cause }));
}

/**
 * Parses YAML or JSON text into a configuration; syntax errors name the line and column. A file is
 * the whole configuration, so a `server` section must also say how nodes are approved (see
 * {@link approvalChainProblem}); {@link parseConfig} leaves that to callers that bring their own chain.
 */
export function parseConfigText(text: string, source = 'config'): Config {
  const config = parseConfig(parseYamlText(text, source), source);
  const chain = approvalChainProblem(config);
  if (chain) throw new ConfigError(`${source}: ${chain}`);
  return config;
}

/**
 * Why the bootstrap server of `config` would deny every node, or undefined: a `server` section with no
 * approval policy — no `server.provider.<cloud>`, no `server.pki` and no `bootstrap.policies` (the
 * default chain is one policy per provider, src/bootstrap/policies/build.ts) — or an empty
 * `bootstrap.policies`. kops' kops-controller exits on start-up then ("no verifiers").
 */
export function approvalChainProblem(config: Config): string | undefined {
  if (!config.server) return undefined;
  const { policies } = config.bootstrap;
  if (policies?.length === 0) {
    return 'bootstrap.policies: an empty chain denies every node; name at least one policy (always-reject to deny every node on purpose)';
  }
  const providers = Object.values(config.server.provider).filter((options) => options !== undefined);
  if (policies || providers.length > 0 || config.server.pki) return undefined;
  return (
    'server.provider: no approval policy is configured, so the bootstrap server would deny every node ' +
    '(kops refuses to start: "no verifiers"); set the cloud\'s provider as kops writes it ' +
    '(server.provider.aws, .gce, .hetzner, .openstack, .do, .scaleway, .azure or .linode), ' +
    'server.pki for kops metal, or bootstrap.policies (e.g. [{name: queue}] to approve each node by hand)'
  );
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
