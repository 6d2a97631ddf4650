/**
 * What deploy/Containerfile puts in the image is enough to run the program: production code (every
 * source file but tests and src/testing, which the image drops) imports only Node built-ins, its own
 * files and the runtime dependencies that `npm ci --omit=dev` installs.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const packageJson = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
};

/** Source files the image keeps. */
async function productionFiles(): Promise<string[]> {
  const files: string[] = [];
  for (const top of ['src', 'bin']) {
    for (const entry of await readdir(join(root, top), { recursive: true, withFileTypes: true })) {
      const path = join(entry.parentPath, entry.name);
      if (!entry.isFile() || !/\.(ts|js)$/.test(entry.name) || entry.name.endsWith('.test.ts')) continue;
      if (relative(root, path).startsWith(join('src', 'testing'))) continue;
      files.push(path);
    }
  }
  return files;
}

/** The module specifiers a file imports, statically or dynamically. */
function importsOf(text: string): string[] {
  const specifiers = [...text.matchAll(/(?:^|\s)(?:import|export)\b[^'"]*?from\s+'([^']+)'/gm)].map(
    (m) => m[1],
  );
  const dynamic = [...text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g)].map((m) => m[1]);
  const sideEffects = [...text.matchAll(/^import\s+'([^']+)'/gm)].map((m) => m[1]);
  return [...specifiers, ...dynamic, ...sideEffects].filter((s): s is string => s !== undefined);
}

function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] as string);
}

test('production code imports only built-ins, its own files and runtime dependencies', async () => {
  const files = await productionFiles();
  assert.ok(files.length > 100, `found ${files.length} production files`);
  const problems: string[] = [];
  for (const file of files) {
    for (const specifier of importsOf(await readFile(file, 'utf8'))) {
      const where = relative(root, file);
      if (specifier.startsWith('node:')) continue;
      if (specifier.startsWith('.')) {
        const target = relative(root, resolve(dirname(file), specifier));
        if (target.startsWith(join('src', 'testing')) || target.endsWith('.test.ts')) {
          problems.push(`${where} imports test code ${target}`);
        }
        continue;
      }
      if (!Object.hasOwn(packageJson.dependencies, packageOf(specifier))) {
        problems.push(`${where} imports ${specifier}, which is not a runtime dependency`);
      }
    }
  }
  assert.deepEqual(problems, []);
});

test('the Containerfile copies files that exist and starts the program', async () => {
  const containerfile = await readFile(join(root, 'deploy', 'Containerfile'), 'utf8');
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
  const { scripts } = packageJson as unknown as { scripts: Record<string, string> };
  for (const name of ['start', 'cli']) {
    assert.match(
      scripts[name] ?? '',
      /^node --openssl-config=deploy\/openssl\.cnf src\/cli\/main\.ts\b/,
      name,
    );
  }
});
