/**
 * `pki apply`: brings a folder to the certificates a file declares (apply-spec.ts). First a plan —
 * every entry read from the folder and decided (apply-plan.ts) — then, unless only the plan was
 * asked for, every certificate and kubeconfig made in memory, and only then written.
 *
 * Nothing is written when anything cannot be issued. Once writing starts, each file is replaced
 * atomically (Vfs.write) and an entry's files are written key first, certificate next, kubeconfig
 * last; a renewal keeps the key, so it replaces the certificate alone. When a new key must replace
 * an old one, the old certificate is removed first: an interrupted run leaves a missing certificate
 * (which the next run issues), never a certificate beside a key that is not its own.
 */
import type { KeyObject } from 'node:crypto';
import type { Vfs } from '../statestore/types.ts';
import { decideEntry, type EntryDecision, type OnDisk } from './apply-plan.ts';
import type { WantedEntry } from './apply-spec.ts';
import { bundlePem, type CertificateAuthority } from './ca.ts';
import { privateFileMode, publicFileMode, readText } from './folder.ts';
import { generateKey, type KeyAlgorithm, parsePrivateKeyPem, privateKeyPem } from './keys.ts';
import { kubeletClientKeyPathOnNode, renderClientKubeconfig } from './kubeconfig.ts';
import { type IssuedCertificate, issueCertificate, publicKeyRequest, wantedCertificate } from './profiles.ts';

/** The planned change of one entry. */
export interface PlannedEntry {
  entry: WantedEntry;
  decision: EntryDecision;
  /** The kubeconfig's fate, for entries that have one. */
  kubeconfig?: { action: 'write' | 'keep'; reason: string };
  disk: OnDisk;
}

/** What `pki apply` will do. */
export interface ApplyPlan {
  ca: CertificateAuthority;
  entries: PlannedEntry[];
}

/** Options of a plan. */
export interface PlanOptions {
  now?: Date;
  /** Renew certificates with less than this left (default: a third of each one's lifetime). */
  renewBeforeMs?: number | undefined;
}

/** Entries read at once: enough to hide a state store's latency, few enough not to flood it. */
const concurrentReads = 32;

const filesOf = (entry: WantedEntry) => ({
  certificate: `${entry.path}.crt`,
  key: `${entry.path}.key`,
  kubeconfig: `${entry.path}.kubeconfig`,
});

/**
 * The kubeconfig of an entry for a certificate and its key; without the key (a kubelet whose key was
 * made on the node, `pki sign`), where the node keeps it.
 */
function kubeconfigOf(
  entry: WantedEntry,
  ca: CertificateAuthority,
  certificatePem: string,
  keyPem: string | undefined,
): string | undefined {
  if (!entry.kubeconfig) return undefined;
  const key = keyPem !== undefined ? { pem: keyPem } : { path: kubeletClientKeyPathOnNode };
  return renderClientKubeconfig({
    server: entry.kubeconfig.server,
    caBundlePem: bundlePem(ca),
    certificatePem,
    key,
    user: entry.kubeconfig.user,
  });
}

function kubeconfigFate(
  entry: WantedEntry,
  decision: EntryDecision,
  disk: OnDisk,
  ca: CertificateAuthority,
): PlannedEntry['kubeconfig'] {
  if (!entry.kubeconfig) return undefined;
  if (decision.action !== 'keep') return { action: 'write', reason: 'its certificate changes' };
  if (disk.kubeconfig === undefined) return { action: 'write', reason: 'not written yet' };
  const wanted = kubeconfigOf(entry, ca, disk.certificatePem as string, disk.keyPem);
  return wanted === disk.kubeconfig
    ? { action: 'keep', reason: 'unchanged' }
    : { action: 'write', reason: 'the server, CA bundle or credentials differ' };
}

/**
 * Reads every entry's files and decides what to do. Throws (before anything is read) when an entry
 * cannot be issued at all, e.g. a node named after the API server.
 */
export async function planApply(
  vfs: Vfs,
  ca: CertificateAuthority,
  entries: readonly WantedEntry[],
  options: PlanOptions = {},
): Promise<ApplyPlan> {
  const wanted = entries.map((entry) => ({
    entry,
    certificate: wantedCertificate(entry.profile, entry.identity, entry.reserved),
  }));
  const now = options.now ?? new Date();
  const planEntry = async ({ entry, certificate }: (typeof wanted)[number]): Promise<PlannedEntry> => {
    const files = filesOf(entry);
    const disk: OnDisk = {
      certificatePem: await readText(vfs, files.certificate),
      keyPem: await readText(vfs, files.key),
      kubeconfig: entry.kubeconfig ? await readText(vfs, files.kubeconfig) : undefined,
    };
    const decision = decideEntry(entry.profile, certificate, disk, ca, {
      now,
      renewBeforeMs: options.renewBeforeMs,
    });
    const kubeconfig = kubeconfigFate(entry, decision, disk, ca);
    return { entry, decision, disk, ...(kubeconfig ? { kubeconfig } : {}) };
  };
  const planned: PlannedEntry[] = [];
  let next = 0;
  const reader = async () => {
    for (let i = next++; i < wanted.length; i = next++)
      planned[i] = await planEntry(wanted[i] as (typeof wanted)[number]);
  };
  await Promise.all(Array.from({ length: Math.min(concurrentReads, wanted.length) }, reader));
  return { ca, entries: planned };
}

/** One file to write (or remove, when `data` is undefined). */
interface FileChange {
  path: string;
  data?: string;
  mode?: number;
}

/** What was done. */
export interface ApplyResult {
  issued: IssuedCertificate[];
  kubeconfigs: number;
  files: number;
}

/**
 * Makes every planned certificate, key and kubeconfig in memory (any failure throws before a file is
 * touched), then writes them entry by entry in the order the module comment explains.
 */
export async function executePlan(
  vfs: Vfs,
  plan: ApplyPlan,
  options: { now?: Date; keyAlgorithm?: KeyAlgorithm } = {},
): Promise<ApplyResult> {
  const { ca } = plan;
  const issued: IssuedCertificate[] = [];
  const changes: FileChange[][] = [];
  for (const { entry, decision, disk, kubeconfig } of plan.entries) {
    const files = filesOf(entry);
    const entryChanges: FileChange[] = [];
    let certificatePem = disk.certificatePem;
    let keyPem = disk.keyPem;
    if (decision.action !== 'keep') {
      let key: KeyObject;
      if (decision.key === 'reuse' && disk.keyPem !== undefined) key = parsePrivateKeyPem(disk.keyPem);
      else {
        key = generateKey(options.keyAlgorithm);
        keyPem = privateKeyPem(key);
        if (disk.certificatePem !== undefined) entryChanges.push({ path: files.certificate });
        entryChanges.push({ path: files.key, data: keyPem, mode: privateFileMode });
      }
      const certificate = issueCertificate(ca, entry.profile, publicKeyRequest(key), entry.identity, {
        ...(entry.lifetimeMs === undefined ? {} : { lifetimeMs: entry.lifetimeMs }),
        ...(options.now ? { now: options.now } : {}),
        ...(entry.reserved ? { reserved: entry.reserved } : {}),
      });
      issued.push(certificate);
      certificatePem = certificate.pem;
      entryChanges.push({ path: files.certificate, data: certificate.pem, mode: publicFileMode });
    }
    if (kubeconfig?.action === 'write') {
      entryChanges.push({
        path: files.kubeconfig,
        data: kubeconfigOf(entry, ca, certificatePem as string, keyPem),
        mode: privateFileMode,
      });
    }
    changes.push(entryChanges);
  }
  let files = 0;
  for (const entryChanges of changes) {
    for (const change of entryChanges) {
      if (change.data === undefined) await vfs.delete(change.path);
      else await vfs.write(change.path, change.data, { mode: change.mode ?? publicFileMode });
      files++;
    }
  }
  const kubeconfigs = plan.entries.filter((p) => p.kubeconfig?.action === 'write').length;
  return { issued, kubeconfigs, files };
}
