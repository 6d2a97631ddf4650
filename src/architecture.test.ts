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
  /** Folders (with a trailing slash) those files must not import from. */
  mayNotImport: readonly string[];
  exceptions: readonly Exception[];
}

const isTest = (file: string) => file.endsWith('.test.ts');
const isSimulatorOrTestCode = (file: string) =>
  file.startsWith('src/sim/') || file.startsWith('src/testing/') || isTest(file);

/** Production code: what the program runs, and what the container image ships. */
const isProduction = (file: string) =>
  (file.startsWith('src/') || file.startsWith('bin/')) && !isSimulatorOrTestCode(file);

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
];

interface Violation {
  rule: string;
  file: string;
  target: string;
}

/** The imports in `imports` that break a rule, and the exceptions that nothing used. */
function check(
  imports: ReadonlyMap<string, readonly ImportOf[]>,
  ruleTable: readonly ImportRule[],
): { violations: Violation[]; unusedExceptions: Exception[] } {
  const violations: Violation[] = [];
  const used = new Set<Exception>();
  for (const [file, list] of imports) {
    for (const rule of ruleTable) {
      if (!rule.governs(file)) continue;
      for (const { specifier, dynamic } of list) {
        if (dynamic && specifier.startsWith('<not a literal')) {
          violations.push({ rule: rule.name, file, target: specifier });
          continue;
        }
        if (!isRelative(specifier)) continue;
        const target = targetOf(root, file, specifier);
        if (!rule.mayNotImport.some((folder) => target.startsWith(folder))) continue;
        const exception = rule.exceptions.find(
          (e) => e.file === file && e.target === target && (dynamic || !e.dynamicOnly),
        );
        if (exception) used.add(exception);
        else violations.push({ rule: rule.name, file, target });
      }
    }
  }
  const unusedExceptions = ruleTable.flatMap((r) => r.exceptions).filter((e) => !used.has(e));
  return { violations, unusedExceptions };
}

describe('import directions', async () => {
  const files = await sourceFiles(root, ['src', 'bin']);
  const imports = await importsByFile(root, files);

  test('every source file keeps every rule, and every exception is still needed', () => {
    assert.ok(files.filter(isProduction).length > 100, `found ${files.length} files`);
    const { violations, unusedExceptions } = check(imports, rules);
    assert.deepEqual(violations, []);
    assert.deepEqual(unusedExceptions, []);
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
        // Both rules govern src/agent/planted.ts, and neither can check a computed specifier.
        'src/agent/planted.ts -> <not a literal: name>',
        'src/agent/planted.ts -> <not a literal: name>',
      ],
    );
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
