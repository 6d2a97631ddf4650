/**
 * Real command-line tools the tests check the product against (kubectl, promtool, cfssl). They come
 * from Debian packages fetched with `apt-get download` and unpacked with `dpkg -x` into the
 * git-ignored `.tools/` folder of the project; nothing is installed on the system.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, symlinkSync, unlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';

const projectRoot = resolve(import.meta.dirname, '../..');
const toolsDir = join(projectRoot, '.tools');

/** Each tool: the Debian package that ships it and the binary's path inside the package. */
const tools = {
  kubectl: { pkg: 'kubernetes-client', binary: 'usr/bin/kubectl' },
  promtool: { pkg: 'prometheus', binary: 'usr/bin/promtool' },
  cfssl: { pkg: 'golang-cfssl', binary: 'usr/bin/cfssl' },
} as const;

export type ToolName = keyof typeof tools;

function download(pkg: string, into: string): void {
  const run = () => execFileSync('apt-get', ['download', pkg], { cwd: into, stdio: 'pipe' });
  try {
    run();
  } catch {
    // A fresh machine may have no package lists yet.
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'pipe' });
    run();
  }
}

/** Returns the path of a tool's binary, fetching and unpacking its package on first use. */
export function toolPath(name: ToolName): string {
  const { pkg, binary } = tools[name];
  const link = join(toolsDir, 'bin', name);
  if (existsSync(link)) return link;
  const debs = join(toolsDir, 'debs');
  const root = join(toolsDir, 'root', pkg);
  mkdirSync(debs, { recursive: true });
  mkdirSync(join(toolsDir, 'bin'), { recursive: true });
  let deb = readdirSync(debs).find((f) => f.startsWith(`${pkg}_`) && f.endsWith('.deb'));
  if (!deb) {
    download(pkg, debs);
    deb = readdirSync(debs).find((f) => f.startsWith(`${pkg}_`) && f.endsWith('.deb'));
    if (!deb) throw new Error(`apt-get download ${pkg} produced no .deb in ${debs}`);
  }
  mkdirSync(root, { recursive: true });
  execFileSync('dpkg', ['-x', join(debs, deb), root], { stdio: 'pipe' });
  const target = join(root, binary);
  if (!existsSync(target)) throw new Error(`${deb} has no ${binary}`);
  if (existsSync(link)) unlinkSync(link);
  symlinkSync(target, link);
  return link;
}

/** Fetches every tool; the test script calls this once before the tests run. */
export function ensureAllTools(names: readonly ToolName[] = Object.keys(tools) as ToolName[]): void {
  for (const name of names) toolPath(name);
}
