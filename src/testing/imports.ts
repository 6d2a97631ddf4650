/**
 * What a source file imports, read from its text: for the tests that hold the code's shape (which
 * folder may import which, what the container image must contain). A scanner, not a parser: comments
 * are dropped first, then every `import`/`export ... from`, side-effect import and `import('...')`
 * (including `typeof import('...')`) is read. Only literal specifiers can be checked, so a dynamic
 * import of anything else is reported as such.
 */
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';

/** One import of a file: static (`import`/`export ... from`, side effects) or `import(...)`. */
export interface ImportOf {
  specifier: string;
  dynamic: boolean;
}

/** The text without comments, strings and template literals kept as they are. */
function withoutComments(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i] as string;
    const next = text[i + 1];
    if (c === '/' && next === '/') {
      while (i < text.length && text[i] !== '\n') i++;
    } else if (c === '/' && next === '*') {
      const end = text.indexOf('*/', i + 2);
      i = end < 0 ? text.length : end + 2;
      out += ' ';
    } else if (c === "'" || c === '"' || c === '`') {
      let j = i + 1;
      while (j < text.length && text[j] !== c) j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** The imports of a TypeScript or JavaScript source text. */
export function importsOf(text: string): ImportOf[] {
  const code = withoutComments(text);
  const found: ImportOf[] = [];
  for (const m of code.matchAll(/(?:^|[\s;}])(?:import|export)\s[^;'"`]*?\bfrom\s*(['"])([^'"]+)\1/g)) {
    found.push({ specifier: m[2] as string, dynamic: false });
  }
  for (const m of code.matchAll(/(?:^|[\s;])import\s*(['"])([^'"]+)\1/g)) {
    found.push({ specifier: m[2] as string, dynamic: false });
  }
  for (const m of code.matchAll(/\bimport\s*\(\s*(?:(['"])([^'"]+)\1\s*\)|([^)]*)\))/g)) {
    found.push({ specifier: m[2] ?? `<not a literal: ${(m[3] as string).trim()}>`, dynamic: true });
  }
  return found;
}

/** Whether a specifier names a file of the repository rather than a package or a Node built-in. */
export function isRelative(specifier: string): boolean {
  return specifier.startsWith('./') || specifier.startsWith('../');
}

/** The repository path (forward slashes) a relative specifier of `file` points at. */
export function targetOf(root: string, file: string, specifier: string): string {
  return toRepoPath(relative(root, resolve(dirname(join(root, file)), specifier)));
}

function toRepoPath(path: string): string {
  return path.split(sep).join('/');
}

/** Every .ts and .js file under the given folders of `root`, as repository paths. */
export async function sourceFiles(root: string, folders: readonly string[]): Promise<string[]> {
  const files: string[] = [];
  for (const folder of folders) {
    for (const entry of await readdir(join(root, folder), { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !/\.(ts|js)$/.test(entry.name)) continue;
      files.push(toRepoPath(relative(root, join(entry.parentPath, entry.name))));
    }
  }
  return files.sort();
}

/** The imports of each file, read from disk. */
export async function importsByFile(
  root: string,
  files: readonly string[],
): Promise<Map<string, ImportOf[]>> {
  const texts = await Promise.all(files.map((file) => readFile(join(root, file), 'utf8')));
  return new Map(files.map((file, i) => [file, importsOf(texts[i] as string)]));
}
