/**
 * The real `openssl` for tests: the PKI is checked against it rather than against itself. Files go
 * to one temporary folder per test process.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Runs openssl and returns its standard output; throws with its standard error if it fails. */
export function openssl(args: readonly string[], input?: string | Buffer): string {
  return execFileSync('openssl', args, { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

/** Runs openssl and returns its exit status and both outputs, for checks that expect failure. */
export function opensslStatus(args: readonly string[]): {
  status: number | null;
  stdout: string;
  stderr: string;
} {
  const run = spawnSync('openssl', args, { encoding: 'utf8' });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

let scratch: string | undefined;
let counter = 0;

/** Writes a file into a temporary folder (one per process, removed at exit) and returns its path. */
export function scratchFile(name: string, data: string | Buffer): string {
  if (!scratch) {
    const dir = mkdtempSync(join(tmpdir(), 'kops-pki-test-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    scratch = dir;
  }
  const path = join(scratch, `${counter++}-${name}`);
  writeFileSync(path, data);
  return path;
}

/** Verifies `certificatePem` against `caBundlePem` with `openssl verify`; returns openssl's verdict. */
export function opensslVerify(
  caBundlePem: string,
  certificatePem: string,
  purpose?: 'sslclient' | 'sslserver',
): string {
  const ca = scratchFile('ca.pem', caBundlePem);
  const leaf = scratchFile('leaf.pem', certificatePem);
  return openssl(['verify', ...(purpose ? ['-purpose', purpose] : []), '-CAfile', ca, leaf]).trim();
}

/** The `openssl x509 -text` rendering of a certificate. */
export function opensslText(certificatePem: string): string {
  return openssl(['x509', '-noout', '-text'], certificatePem);
}
