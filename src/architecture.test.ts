/**
 * The import directions the code keeps, read from every source file's imports. Each rule names the
 * files it governs, the folders they must not import, and the exceptions it allows; an exception
 * that is no longer used fails too, so the table stays true. To enforce a new direction between
 * folders, add a rule.
 */
import assert from 'node:assert/strict';
import { dirname, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  type ImportOf,
  importsByFile,
  importsOf,
  isRelative,
  sourceFiles,
  targetOf,
} from './testing/imports.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** An import a rule lets through: from one file to one file, and only as `import(...)` when dynamic. */
interface Exception {
  file: string;
  target: string;
  dynamicOnly: boolean;
  why: string;
}

interface ImportRule {
  name: string;
  /** The files the rule governs (repository paths). */
  governs: (file: string) => boolean;
  /**
   * What those files must not import: folders (with a trailing slash), single files, or packages and
   * Node built-ins by the start of their name (`node:fs` also covers `node:fs/promises`).
   */
  mayNotImport: readonly string[];
  /** Files inside those folders that do no I/O, which every governed file may import. */
  mayImport?: readonly string[];
  exceptions: readonly Exception[];
}

const isTest = (file: string) => file.endsWith('.test.ts');
const isSimulatorOrTestCode = (file: string) =>
  file.startsWith('src/sim/') || file.startsWith('src/testing/') || isTest(file);

/** Production code: what the program runs, and what the container image ships. */
const isProduction = (file: string) =>
  (file.startsWith('src/') || file.startsWith('bin/')) && !isSimulatorOrTestCode(file);

/**
 * What does I/O, or starts it: the API client, the HTTPS client, the clouds, the state stores, the
 * configuration file, the runtime, the servers and controllers, the command line; and the Node
 * built-ins that reach the disk, the network or other processes.
 */
const ioModules = [
  'src/kube/',
  'src/net/',
  'src/cloud/',
  'src/statestore/',
  'src/config/loader.ts',
  'src/runtime/',
  'src/bootstrap/',
  'src/agent/',
  'src/controllers/',
  'src/metrics/',
  'src/validation-io/',
  'src/cli/',
  'src/make-directory.ts',
  'node:fs',
  'node:net',
  'node:dns',
  'node:http',
  'node:tls',
  'node:child_process',
];

/** The files inside those folders that only parse and describe: the pure cores may lean on them. */
const pureModules = [
  'src/cloud/types.ts',
  'src/cloud/aws/providerid.ts',
  'src/cloud/gce/resource-names.ts',
  'src/statestore/kops-types.ts',
];

const production = (folder: string) => (file: string) => file.startsWith(folder) && isProduction(file);

const rules: readonly ImportRule[] = [
  {
    name: 'production code never imports the simulator or test helpers',
    governs: isProduction,
    mayNotImport: ['src/sim/', 'src/testing/'],
    exceptions: [
      {
        file: 'src/cli/dev.ts',
        target: 'src/sim/dev-run.ts',
        dynamicOnly: true,
        why: '`dev` runs the simulator; it loads it only when run, and says so where it is absent (the image)',
      },
    ],
  },
  {
    name: 'nothing under src/ imports the benchmarks or the tools around it',
    governs: (file) => file.startsWith('src/'),
    mayNotImport: ['bench/', 'scripts/'],
    exceptions: [],
  },
  {
    name: 'validation is a pure function of what was read: it reads nothing itself',
    governs: production('src/validation/'),
    mayNotImport: ioModules,
    mayImport: pureModules,
    exceptions: [],
  },
  {
    name: 'node labels are computed, not fetched: src/nodelabels does no I/O',
    governs: production('src/nodelabels/'),
    mayNotImport: [...ioModules, 'src/validation/'],
    mayImport: ['src/statestore/kops-types.ts'],
    exceptions: [],
  },
  {
    name: 'the modules the pure cores lean on do no I/O either',
    governs: (file) => pureModules.includes(file),
    mayNotImport: ioModules,
    exceptions: [],
  },
  {
    name: 'the certificate authority knows nothing of who asks for certificates',
    governs: production('src/pki/'),
    mayNotImport: ['src/bootstrap/', 'src/agent/', 'src/cli/'],
    exceptions: [],
  },
  {
    name: 'the agent does not import the bootstrap server',
    governs: production('src/agent/'),
    mayNotImport: ['src/bootstrap/'],
    exceptions: [],
  },
  {
    name: 'the bootstrap server does not import the agent',
    governs: production('src/bootstrap/'),
    mayNotImport: ['src/agent/'],
    exceptions: [],
  },
  {
    // What both sides of the bootstrap protocol speak: they meet here, never in each other's folders.
    name: 'the wire protocol is pure: src/protocol imports neither side, nor anything that does I/O',
    governs: production('src/protocol/'),
    mayNotImport: [...ioModules, '@kubernetes/', '@aws-sdk/', 'google-auth-library'],
    exceptions: [],
  },
  {
    // Tests may drive the commands they test (src/testing/cli.ts runs them in-process).
    name: 'the command line is the top: only src/cli and bin import it',
    governs: (file) =>
      !file.startsWith('src/cli/') &&
      !file.startsWith('bin/') &&
      !isTest(file) &&
      !file.startsWith('src/testing/'),
    mayNotImport: ['src/cli/'],
    exceptions: [],
  },
];

interface Violation {
  rule: string;
  file: string;
  target: string;
}

/** The rule every computed `import(...)` breaks: no rule can check what it loads. */
const literalImports = 'every import names its module literally, so the rules can check it';

/** The imports in `imports` that break a rule, and the exceptions and allowances that nothing used. */
function check(
  imports: ReadonlyMap<string, readonly ImportOf[]>,
  ruleTable: readonly ImportRule[],
): { violations: Violation[]; unusedExceptions: Exception[]; unusedAllowances: string[] } {
  const violations: Violation[] = [];
  const used = new Set<Exception>();
  const allowed = new Set<string>();
  for (const [file, list] of imports) {
    for (const { specifier, dynamic } of list) {
      if (dynamic && specifier.startsWith('<not a literal')) {
        violations.push({ rule: literalImports, file, target: specifier });
        continue;
      }
      const target = isRelative(specifier) ? targetOf(root, file, specifier) : specifier;
      for (const rule of ruleTable) {
        if (!rule.governs(file)) continue;
        if (!rule.mayNotImport.some((forbidden) => target.startsWith(forbidden))) continue;
        if (rule.mayImport?.includes(target)) {
          allowed.add(`${rule.name}: ${target}`);
          continue;
        }
        const exception = rule.exceptions.find(
          (e) => e.file === file && e.target === target && (dynamic || !e.dynamicOnly),
        );
        if (exception) used.add(exception);
        else violations.push({ rule: rule.name, file, target });
      }
    }
  }
  const unusedExceptions = ruleTable.flatMap((r) => r.exceptions).filter((e) => !used.has(e));
  const unusedAllowances = ruleTable
    .flatMap((r) => (r.mayImport ?? []).map((target) => `${r.name}: ${target}`))
    .filter((allowance) => !allowed.has(allowance));
  return { violations, unusedExceptions, unusedAllowances };
}

describe('import directions', async () => {
  const files = await sourceFiles(root, ['src', 'bin']);
  const imports = await importsByFile(root, files);

  test('every source file keeps every rule, and every exception is still needed', () => {
    assert.ok(files.filter(isProduction).length > 100, `found ${files.length} files`);
    const { violations, unusedExceptions, unusedAllowances } = check(imports, rules);
    assert.deepEqual(violations, []);
    assert.deepEqual(unusedExceptions, []);
    assert.deepEqual(unusedAllowances, []);
  });

  test('the check catches an import into the simulator, a test helper, bench/ or scripts/', () => {
    const planted = new Map<string, ImportOf[]>([
      ['src/cloud/aws/planted.ts', [{ specifier: '../../sim/aws/sigv4-verify.ts', dynamic: false }]],
      ['src/kube/planted.ts', [{ specifier: '../testing/fake-clock.ts', dynamic: true }]],
      ['src/sim/planted.ts', [{ specifier: '../../bench/join-storm.ts', dynamic: false }]],
      ['src/cli/planted.test.ts', [{ specifier: '../../scripts/test.ts', dynamic: false }]],
      // The dev command may load the simulator only dynamically; a static import would load it
      // with every command (help loads them all) and break the image.
      ['src/cli/dev.ts', [{ specifier: '../sim/dev-run.ts', dynamic: false }]],
      ['src/agent/planted.ts', [{ specifier: '<not a literal: name>', dynamic: true }]],
    ]);
    assert.deepEqual(
      check(planted, rules).violations.map(({ file, target }) => `${file} -> ${target}`),
      [
        'src/cloud/aws/planted.ts -> src/sim/aws/sigv4-verify.ts',
        'src/kube/planted.ts -> src/testing/fake-clock.ts',
        'src/sim/planted.ts -> bench/join-storm.ts',
        'src/cli/planted.test.ts -> scripts/test.ts',
        'src/cli/dev.ts -> src/sim/dev-run.ts',
        // Reported once, whichever rules govern the file: none of them can check it.
        'src/agent/planted.ts -> <not a literal: name>',
      ],
    );
  });

  test('the check catches I/O in the pure cores, and crossings between the folders', () => {
    const planted = new Map<string, ImportOf[]>([
      ['src/validation/planted.ts', [{ specifier: '../kube/informer.ts', dynamic: false }]],
      ['src/validation/dns.ts', [{ specifier: 'node:dns/promises', dynamic: false }]],
      ['src/validation/store.ts', [{ specifier: '../statestore/cluster-store.ts', dynamic: false }]],
      ['src/nodelabels/planted.ts', [{ specifier: '../cloud/from-config.ts', dynamic: false }]],
      ['src/statestore/kops-types.ts', [{ specifier: './open.ts', dynamic: false }]],
      ['src/pki/planted.ts', [{ specifier: '../bootstrap/tokens.ts', dynamic: false }]],
      ['src/agent/planted.ts', [{ specifier: '../bootstrap/discovery.ts', dynamic: false }]],
      ['src/bootstrap/planted.ts', [{ specifier: '../agent/join.ts', dynamic: false }]],
      ['src/protocol/planted.ts', [{ specifier: '../bootstrap/tokens.ts', dynamic: false }]],
      ['src/protocol/sdk.ts', [{ specifier: '@kubernetes/client-node', dynamic: false }]],
      ['src/controllers/planted.ts', [{ specifier: '../cli/common.ts', dynamic: false }]],
      // The simulator is handed the product's parts; it never reaches for the commands that build them.
      ['src/sim/planted.ts', [{ specifier: '../cli/bootstrap-server.ts', dynamic: false }]],
    ]);
    assert.deepEqual(
      check(planted, rules).violations.map(({ file, target }) => `${file} -> ${target}`),
      [
        'src/validation/planted.ts -> src/kube/informer.ts',
        'src/validation/dns.ts -> node:dns/promises',
        'src/validation/store.ts -> src/statestore/cluster-store.ts',
        'src/nodelabels/planted.ts -> src/cloud/from-config.ts',
        'src/statestore/kops-types.ts -> src/statestore/open.ts',
        'src/pki/planted.ts -> src/bootstrap/tokens.ts',
        // The agent and the server meet only in src/protocol.
        'src/agent/planted.ts -> src/bootstrap/discovery.ts',
        'src/bootstrap/planted.ts -> src/agent/join.ts',
        'src/protocol/planted.ts -> src/bootstrap/tokens.ts',
        'src/protocol/sdk.ts -> @kubernetes/client-node',
        'src/controllers/planted.ts -> src/cli/common.ts',
        'src/sim/planted.ts -> src/cli/bootstrap-server.ts',
      ],
    );
  });

  test('the pure cores may import the modules that only parse, both sides the protocol, and tests anything', () => {
    const planted = new Map<string, ImportOf[]>([
      ['src/validation/planted.ts', [{ specifier: '../statestore/kops-types.ts', dynamic: false }]],
      ['src/nodelabels/planted.ts', [{ specifier: '../statestore/kops-types.ts', dynamic: false }]],
      ['src/agent/planted.ts', [{ specifier: '../protocol/cluster-info.ts', dynamic: false }]],
      ['src/bootstrap/planted.ts', [{ specifier: '../protocol/bootstrap-token.ts', dynamic: false }]],
      ['src/validation/planted.test.ts', [{ specifier: '../kube/informer.ts', dynamic: false }]],
      ['src/planted.test.ts', [{ specifier: './cli/main.ts', dynamic: false }]],
    ]);
    assert.deepEqual(check(planted, rules).violations, []);
  });

  test('the scanner reads every form of import, and not what comments mention', () => {
    const text = [
      "import assert from 'node:assert/strict';",
      'import {',
      '  a,',
      '  type B,',
      "} from './multi-line.ts';",
      "import type { C } from './types-only.ts';",
      "export { d } from './re-exported.ts';",
      "export * from './all.ts';",
      "import './side-effect.ts';",
      "const sim = await import('./dynamic.ts');",
      "type Sim = typeof import('./type-of.ts');",
      // Split, or the scan of this very file would find a computed import in the string.
      `const loaded = await ${'import'}(name);`,
      "// import { e } from './line-comment.ts';",
      "/** A doc comment: import('./block-comment.ts'), import x from './also-comment.ts'. */",
      "const notAnImport = Array.from('abc');",
    ].join('\n');
    assert.deepEqual(importsOf(text), [
      { specifier: 'node:assert/strict', dynamic: false },
      { specifier: './multi-line.ts', dynamic: false },
      { specifier: './types-only.ts', dynamic: false },
      { specifier: './re-exported.ts', dynamic: false },
      { specifier: './all.ts', dynamic: false },
      { specifier: './side-effect.ts', dynamic: false },
      { specifier: './dynamic.ts', dynamic: true },
      { specifier: './type-of.ts', dynamic: true },
      { specifier: '<not a literal: name>', dynamic: true },
    ]);
  });

  test('simulator and test code may import production code', () => {
    const planted = new Map<string, ImportOf[]>([
      ['src/sim/aws/planted.ts', [{ specifier: '../../cloud/aws/sigv4.ts', dynamic: false }]],
      ['src/cloud/planted.test.ts', [{ specifier: '../sim/dev-cluster.ts', dynamic: false }]],
    ]);
    assert.deepEqual(check(planted, rules).violations, []);
  });
});
