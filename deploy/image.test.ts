/**
 * What deploy/Containerfile puts in the image is enough to run the program, and no more: production
 * code (every source file but the simulator, the test helpers and the tests, which the image drops)
 * imports only Node built-ins, files the image keeps and the runtime dependencies that
 * `npm ci --omit=dev` installs; and the program runs from those files alone.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { importsByFile, isRelative, sourceFiles, targetOf } from '../src/testing/imports.ts';

const execFileAsync = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const packageJson = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  scripts: Record<string, string>;
};
const containerfile = await readFile(join(root, 'deploy', 'Containerfile'), 'utf8');

/** Whether the image keeps a source file: the Containerfile's `program` stage drops the rest. */
function keptByImage(file: string): boolean {
  return !file.startsWith('src/sim/') && !file.startsWith('src/testing/') && !file.endsWith('.test.ts');
}

function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] as string);
}

test('the image drops the simulator, the test helpers and the tests in a stage of their own', () => {
  assert.match(
    containerfile,
    /^FROM \S+ AS program\nWORKDIR \/app\nCOPY src \.\/src\nRUN rm -rf src\/sim src\/testing && find src -name '\*\.test\.ts' -delete\n/m,
  );
  // Only the pruned sources reach the final image, so no layer of it holds what was dropped.
  const finalStage = containerfile.slice(containerfile.lastIndexOf('\nFROM '));
  assert.match(finalStage, /^COPY --from=program \/app\/src \.\/src$/m);
  assert.doesNotMatch(finalStage, /^COPY src /m);
});

test('production code imports only built-ins, files the image keeps and runtime dependencies', async () => {
  const files = (await sourceFiles(root, ['src', 'bin'])).filter(keptByImage);
  assert.ok(files.length > 100, `found ${files.length} production files`);
  const problems: string[] = [];
  for (const [file, imports] of await importsByFile(root, files)) {
    for (const { specifier, dynamic } of imports) {
      if (specifier.startsWith('node:')) continue;
      if (isRelative(specifier)) {
        // A dynamic import of a dropped file is reached only when run: the dev command's load of the
        // simulator, which src/architecture.test.ts allows and the next test runs in the image's files.
        const target = targetOf(root, file, specifier);
        if (!dynamic && !keptByImage(target))
          problems.push(`${file} imports ${target}, which the image drops`);
        continue;
      }
      if (!Object.hasOwn(packageJson.dependencies, packageOf(specifier))) {
        problems.push(`${file} imports ${specifier}, which is not a runtime dependency`);
      }
    }
  }
  assert.deepEqual(problems, []);
});

test('the simulator’s own packages are development dependencies', () => {
  for (const name of ['@peculiar/x509', 'reflect-metadata']) {
    assert.ok(Object.hasOwn(packageJson.devDependencies, name), name);
    assert.ok(!Object.hasOwn(packageJson.dependencies, name), name);
  }
});

describe('the program, run from the files the image keeps', () => {
  let dir: string;
  const run = (...args: string[]) =>
    execFileAsync(
      process.execPath,
      ['--openssl-config=deploy/openssl.cnf', 'bin/kops-controller.js', ...args],
      { cwd: dir, timeout: 60_000 },
    ).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'image-files-'));
    for (const file of (await sourceFiles(root, ['src', 'bin'])).filter(keptByImage)) {
      await mkdir(join(dir, dirname(file)), { recursive: true });
      await cp(join(root, file), join(dir, file));
    }
    await cp(join(root, 'package.json'), join(dir, 'package.json'));
    await cp(join(root, 'deploy', 'openssl.cnf'), join(dir, 'deploy', 'openssl.cnf'));
    // The checkout's packages: the test above holds production code to the runtime ones.
    await symlink(join(root, 'node_modules'), join(dir, 'node_modules'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  test('holds no simulator code', async () => {
    assert.deepEqual(
      (await readdir(join(dir, 'src'))).filter((d) => d === 'sim' || d === 'testing'),
      [],
    );
  });

  test('--help loads every command', async () => {
    const { code, stdout, stderr } = await run('--help');
    assert.equal(code, 0, stderr);
    for (const command of ['run', 'join', 'validate', 'dev'])
      assert.match(stdout, new RegExp(`^  ${command}\\b`, 'm'));
  });

  test('dev says in one line that this installation has no simulator, and exits 69', async () => {
    const { code, stdout, stderr } = await run('dev', '--state-dir', join(dir, 'state'));
    assert.equal(code, 69, stderr);
    assert.equal(stdout, '');
    assert.match(
      stderr,
      /^kops-controller: dev needs the simulator, which this installation does not have \(the container image ships without it\): run it from a source checkout after npm ci, with npm start: Cannot find module '[^']*src\/sim\/dev-run\.ts'[^\n]*\n$/,
    );
  });
});

test('the Containerfile copies files that exist and starts the program', async () => {
  const copied = [...containerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) =>
    (m[1] as string).split(/\s+/),
  );
  assert.deepEqual(
    copied.sort(),
    ['bin', 'deploy/openssl.cnf', 'package-lock.json', 'package.json', 'package.json', 'src'].sort(),
  );
  for (const path of copied) await readFile(join(root, path)).catch(() => readdir(join(root, path)));
  // With the process's OpenSSL settings (no TLS session tickets; src/cli/discovery.test.ts checks them).
  assert.match(
    containerfile,
    /^ENTRYPOINT \["node", "--openssl-config=\/app\/deploy\/openssl\.cnf", "\/app\/bin\/kops-controller\.js"\]$/m,
  );
});

test('npm start and npm run cli start Node with the same OpenSSL settings as the image', () => {
  for (const name of ['start', 'cli']) {
    assert.match(
      packageJson.scripts[name] ?? '',
      /^node --openssl-config=deploy\/openssl\.cnf src\/cli\/main\.ts\b/,
      name,
    );
  }
});
