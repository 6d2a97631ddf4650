/**
 * The docs are a contract: every exit code, command-line flag, metric name and configuration key that
 * docs/*.md mention is one the code has, and the exit-code table lists every code the CLI can end
 * with. docs/cli.md is generated from --help (`npm run docs`), so it is not read here.
 *
 * How the docs mention things, and so what is read:
 * - exit codes: the rows of the table in docs/operations.md, and "exit code N" / "exits N" in prose;
 * - flags: `--flag` inside inline code and table cells, and on the kops-controller command lines of
 *   code blocks, except in code that runs another program (kubectl, kops, openssl, ...);
 * - metrics: every `kops_…` name, anywhere;
 * - configuration keys: the key column of docs/configuration.md's tables and every inline-code
 *   dotted path that starts with a top-level key (`server.provider.aws.Region`), in every page;
 * - tests: every `file.test.ts › … › name` the threat table of docs/security.md cites.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Command } from 'commander';
import type { z } from 'zod';
import { startDevController } from './cli/dev-controller.ts';
import { buildProgram } from './cli/main.ts';
import { configSchema } from './config/schema.ts';
import { exitCodeByKind } from './errors.ts';
import { startDevCluster } from './sim/dev-cluster.ts';

const docsDir = new URL('../docs/', import.meta.url);
const pages = new Map<string, string>();
for (const name of (await readdir(docsDir)).filter((n) => n.endsWith('.md') && n !== 'cli.md')) {
  pages.set(name, await readFile(new URL(name, docsDir), 'utf8'));
}

/** Every inline code span of a page outside its code blocks, with the page name. */
function inlineCode(): { page: string; code: string }[] {
  return [...pages].flatMap(([page, text]) =>
    [...text.replace(/^```[\s\S]*?^```/gm, '').matchAll(/`([^`\n]+)`/g)].map((m) => ({
      page,
      code: m[1] as string,
    })),
  );
}

/** The lines of every code block of a page, continuation lines (ending in `\`) joined. */
function codeBlockLines(): { page: string; line: string }[] {
  return [...pages].flatMap(([page, text]) =>
    [...text.matchAll(/^```[^\n]*\n([\s\S]*?)^```/gm)].flatMap((m) =>
      (m[1] as string)
        .replace(/\\\n\s*/g, ' ')
        .split('\n')
        .map((line) => ({ page, line })),
    ),
  );
}

test('the exit-code table lists exactly the codes the CLI ends with, and prose names no other', () => {
  const operations = pages.get('operations.md') as string;
  const section = operations.slice(operations.indexOf('### Exit codes'));
  const table = section.slice(0, section.indexOf('\n\n', section.indexOf('| Code')));
  const documented = [...table.matchAll(/^\| (\d+) +\|/gm)].map((m) => Number(m[1]));
  // 0: success, help and version; 2: usage errors (Commander); the rest: one per kind of error.
  const produced = [...new Set([0, 2, ...Object.values(exitCodeByKind)])].sort((a, b) => a - b);
  assert.deepEqual(documented, produced);
  // Each kind is named in its code's row, as people say it.
  const spoken: Record<string, string> = {
    invalid: 'invalid input',
    config: 'configuration',
    timeout: 'timed out',
  };
  for (const [kind, code] of Object.entries(exitCodeByKind)) {
    const row = table.split('\n').find((line) => line.startsWith(`| ${code} `)) as string;
    assert.ok(
      row.split('|')[2]?.includes(spoken[kind] ?? kind.replace('-', ' ')),
      `${kind} in the row of ${code}`,
    );
  }
  // Node's own exit code for an uncaught error is named in the prose after the table, as a bug.
  const known = new Set([...produced, 1]);
  for (const [page, text] of pages) {
    for (const m of text.matchAll(/\bexit(?:s| code|s with(?: code)?)? (\d+)\b/gi)) {
      assert.ok(known.has(Number(m[1])), `${page}: "${m[0]}" is not an exit code of the CLI`);
    }
  }
});

/** Programs whose flags the docs show too; code that runs them is not checked against ours. */
const otherPrograms =
  /^(?:sudo )?(?:kubectl|kops|openssl|curl|wget|node|npx|promtool|docker|podman|wrk|aws|gcloud|systemctl|journalctl|kubeadm|kubelet|nodeup|ssh|git|jq|tar|helm|go)\b/;

/** The long flags the program and every subcommand accept. */
async function programFlags(): Promise<Set<string>> {
  const flags = new Set(['--help', '--version']);
  const walk = (command: Command): void => {
    for (const option of command.options) if (option.long) flags.add(option.long);
    for (const sub of command.commands) walk(sub);
  };
  walk(await buildProgram());
  return flags;
}

/**
 * Flags of other programs that the docs name on their own (in prose, not on a command line), each
 * with its program: the false positives of reading every `--flag` in inline code.
 */
const otherProgramsFlags: Record<string, string> = {
  '--openssl-config': 'node',
  '--max-semi-space-size': 'node',
  '--min-semi-space-size': 'node',
  '--initial-old-space-size': 'node',
  '--single-threaded-gc': 'node',
  '--cpu-prof': 'node',
  '--client-ca-file': 'kubelet',
  '--tls-cert-file': 'kubelet',
  '--cert-dir': 'kubelet',
  '--discovery-token-ca-cert-hash': 'kubeadm join',
  '--discovery-token-unsafe-skip-ca-verification': 'kubeadm join',
};

test('every flag the docs mention is one the program accepts', async () => {
  const flags = await programFlags();
  for (const flag of Object.keys(otherProgramsFlags)) assert.ok(!flags.has(flag), `${flag} is ours now`);
  // performance.md names the benchmarks' own flags; each must be one a benchmark (bench/*.ts) parses.
  const benchDir = new URL('../bench/', import.meta.url);
  const benchSources = (
    await Promise.all(
      (
        await readdir(benchDir, { recursive: true })
      )
        .filter((name) => name.endsWith('.ts'))
        .map((name) => readFile(new URL(name, benchDir), 'utf8')),
    )
  ).join('\n');
  const mentioned: { where: string; flag: string }[] = [];
  const flagsIn = (text: string) => [...text.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g)].map((m) => m[0]);
  for (const { page, code } of inlineCode()) {
    // `npm start -- --policy queue` and `npm run cli -- ...` pass what follows to kops-controller.
    const ours = code.replace(/^npm (?:start|run cli) --/, 'kops-controller');
    if (otherPrograms.test(ours) || /^npm /.test(ours)) continue;
    for (const flag of flagsIn(ours)) mentioned.push({ where: `${page}: \`${code}\``, flag });
  }
  for (const { page, line } of codeBlockLines()) {
    const invocation = /(?:^|[\s$(])(?:kops-controller|npm start --|npm run cli --)\s(.*)$/.exec(line);
    if (!invocation) continue;
    for (const flag of flagsIn(invocation[1] as string))
      mentioned.push({ where: `${page}: ${line.trim()}`, flag });
  }
  assert.ok(mentioned.length > 50, `found ${mentioned.length} flag mentions; the parsing broke`);
  const unknown = mentioned
    .filter(({ flag }) => !flags.has(flag) && !otherProgramsFlags[flag])
    .filter(({ where, flag }) => !(where.startsWith('performance.md') && benchSources.includes(flag)))
    .map(({ where, flag }) => `${flag} in ${where}`);
  assert.deepEqual(unknown, []);
});

/** Every key path of a zod schema: `server.provider.aws.Region`; array elements add `[]`. */
function schemaKeys(schema: z.core.$ZodType, prefix: string, out: Set<string>): Set<string> {
  const def = schema._zod.def as unknown as {
    type: string;
    innerType?: z.core.$ZodType;
    in?: z.core.$ZodType;
    shape?: Record<string, z.core.$ZodType>;
    element?: z.core.$ZodType;
    options?: z.core.$ZodType[];
  };
  switch (def.type) {
    case 'optional':
    case 'default':
    case 'prefault':
    case 'nullable':
      return schemaKeys(def.innerType as z.core.$ZodType, prefix, out);
    case 'pipe':
      return schemaKeys(def.in as z.core.$ZodType, prefix, out);
    case 'object':
      for (const [key, value] of Object.entries(def.shape ?? {})) {
        const path = prefix ? `${prefix}.${key}` : key;
        out.add(path);
        schemaKeys(value, path, out);
      }
      return out;
    case 'array':
      return schemaKeys(def.element as z.core.$ZodType, `${prefix}[]`, out);
    case 'union':
      for (const option of def.options ?? []) schemaKeys(option, prefix, out);
      return out;
    default:
      return out;
  }
}

/** `a.{b,c}` → `a.b`, `a.c`. */
function expandBraces(path: string): string[] {
  const m = /^(.*)\{([^}]*)\}(.*)$/.exec(path);
  if (!m) return [path];
  return (m[2] as string).split(',').flatMap((part) => expandBraces(`${m[1]}${part.trim()}${m[3]}`));
}

test('every configuration key the docs mention is in the configuration schema', () => {
  const keys = schemaKeys(configSchema, '', new Set());
  const topLevel = [...keys].filter((k) => !k.includes('.') && !k.includes('['));
  const policyOptions = new Set(
    [...keys]
      .filter((k) => k.startsWith('bootstrap.policies[].'))
      .map((k) => k.slice('bootstrap.policies[].'.length)),
  );
  const mentioned: { where: string; key: string }[] = [];
  // The key columns of configuration.md: `a.b`, `a.b`, `.c` (a sibling of the cell's first key).
  const configuration = pages.get('configuration.md') as string;
  const policyTable = configuration.slice(configuration.indexOf('Policies and their options:'));
  const keyTables = configuration.slice(0, configuration.length - policyTable.length);
  for (const row of keyTables.matchAll(/^\| (`[^|]*`) +\|(.*)$/gm)) {
    const cell = row[1] as string;
    const spans = [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
    const first = spans[0] as string;
    for (const span of spans) {
      const path = span.startsWith('.') ? `${first.slice(0, first.lastIndexOf('.'))}${span}` : span;
      for (const key of expandBraces(path)) mentioned.push({ where: `configuration.md: ${cell}`, key });
    }
  }
  // Dotted paths from a top-level key anywhere in the docs' prose.
  const dotted = new RegExp(`^(?:${topLevel.join('|')})(?:\\.[A-Za-z][A-Za-z0-9]*|\\.\\{[^}]+\\})+$`);
  for (const { page, code } of inlineCode()) {
    if (dotted.test(code))
      for (const key of expandBraces(code)) mentioned.push({ where: `${page}: \`${code}\``, key });
  }
  // The policy table's options: the inline code a clause starts with (`maxProofAge` (duration, ...)).
  const policyRows = policyTable.slice(0, policyTable.indexOf('\n\n', 30));
  for (const row of policyRows.matchAll(/^\| `([a-z-]+)` +\| (.*) \|$/gm)) {
    const policy = row[1] as string;
    for (const clause of (row[2] as string).split(/; |\. /)) {
      const lead = /^((?:`[A-Za-z]+`(?:, | and )?)+)/.exec(clause.trim());
      for (const m of lead ? (lead[1] as string).matchAll(/`([A-Za-z]+)`/g) : []) {
        assert.ok(
          policyOptions.has(m[1] as string),
          `configuration.md: policy ${policy}: option ${m[1]} is not in the schema`,
        );
      }
    }
  }
  assert.ok(mentioned.length > 30, `found ${mentioned.length} key mentions; the parsing broke`);
  const unknown = mentioned.filter(({ key }) => !keys.has(key)).map(({ where, key }) => `${key} in ${where}`);
  assert.deepEqual(unknown, []);
});

test('every metric the docs mention is one the controller exports, and operations.md names them all', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'docs-contract-'));
  const cluster = await startDevCluster({ stateDir: dir, awsThrottling: false });
  const controller = await startDevController(cluster, { bootstrapPolicy: 'aws' });
  let scrape = '';
  try {
    // The leader-only components register their metrics when they start.
    for (
      let i = 0;
      i < 400 && !/controller_component_running\{component="csr-approver"\} 1/.test(scrape);
      i++
    ) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      scrape = await (await fetch(`${controller.url}/metrics`)).text();
    }
  } finally {
    await controller.stop();
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  }
  const exported = new Set(
    [...scrape.matchAll(/^# TYPE (kops_\S+) (\S+)/gm)].flatMap(([, name, type]) =>
      type === 'histogram' ? [name, `${name}_bucket`, `${name}_sum`, `${name}_count`] : [name],
    ),
  ) as Set<string>;
  assert.ok(exported.size > 10, `scraped ${exported.size} kops_ metrics`);
  const unknown = [...pages].flatMap(([page, text]) =>
    [...new Set([...text.matchAll(/\bkops_[A-Za-z0-9_]*[A-Za-z0-9]/g)].map((m) => m[0]))]
      .filter((name) => !exported.has(name))
      .map((name) => `${name} in ${page}`),
  );
  assert.deepEqual(unknown, []);
  const operations = pages.get('operations.md') as string;
  const undocumented = [...scrape.matchAll(/^# TYPE (kops_\S+) /gm)]
    .map((m) => m[1] as string)
    .filter((name) => !operations.includes(name));
  assert.deepEqual(undocumented, []);
});

test("configuration.md names run's default --conf path", async () => {
  const run = (await buildProgram(['run'])).commands.find((c) => c.name() === 'run') as Command;
  const conf = run.options.find((o) => o.long === '--conf');
  const stated = /reads one YAML or JSON file \(default\s+`([^`]+)`/.exec(
    pages.get('configuration.md') as string,
  );
  assert.equal(stated?.[1], conf?.defaultValue);
});

/** Curly quotes, escaped pipes and backticks as the test titles in the source spell them. */
function plainTitle(text: string): string {
  return text.replace(/[’‘]/g, "'").replace(/[“”]/g, '"').replace(/\\\|/g, '|').replace(/`/g, '').trim();
}

/**
 * Whether `source` has a test titled `title`: written out, or made by a template literal
 * (`${status} on ${path}: …`) whose fixed parts the title as cited (`whole`) has in order.
 */
function titledIn(source: string, title: string, whole: string): boolean {
  if (plainTitle(source).includes(title.slice(0, 40))) return true;
  return [...source.matchAll(/test\(\s*`([^`]+)`/g)].some((m) => {
    const fixed = plainTitle(m[1] as string)
      .split(/\$\{[^}]*\}/)
      .map((part) => part.replace(/[.*+?^()|[\]\\{}$]/g, '\\$&'));
    return new RegExp(`^${fixed.join('.*')}`).test(whole);
  });
}

test('every test the threat table cites exists, under that title', async () => {
  const security = pages.get('security.md') as string;
  const table = security.slice(security.indexOf('## Threat table'));
  const root = new URL('../', import.meta.url);
  const missing: string[] = [];
  let cited = 0;
  for (const line of table.split('\n').filter((l) => l.startsWith('| '))) {
    const cell = line.split(/(?<!\\)\|/)[3] ?? '';
    // `file › suite › title; › another title of the same file; other-file › title`
    let files: string[] = [];
    for (const part of cell.split(';')) {
      const path = /((?:src|bench|deploy)\/[\w/.{},-]+\.test\.ts)/.exec(part)?.[1];
      if (path) {
        const brace = /\{([^}]+)\}/.exec(path);
        files = brace ? (brace[1] as string).split(',').map((alt) => path.replace(brace[0], alt)) : [path];
      }
      if (!part.includes('›') || files.length === 0) continue;
      const titles = part.split('›').map(plainTitle);
      // The test's own title, up to an ellipsis or a parenthesised remark the table adds.
      const whole = titles[titles.length - 1] as string;
      const title =
        whole
          .replace(/\s*\(.*$/, '')
          .split('…')[0]
          ?.trim() ?? '';
      for (const file of files) {
        cited++;
        const source = await readFile(new URL(file, root), 'utf8').catch(() => undefined);
        if (source === undefined) missing.push(`${file}: no such file`);
        else if (title.length > 8 && !titledIn(source, title, whole)) missing.push(`${file} › ${title}`);
      }
    }
  }
  assert.ok(cited > 100, `the threat table cites ${cited} tests`);
  assert.deepEqual(missing, []);
});
