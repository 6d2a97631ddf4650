/**
 * `kops-controller certs list|expiring`: the certificate expiry ledger (src/ledger) for people and
 * scripts. It reads the ledger the controller keeps in the API server, so it answers the same
 * whichever replica leads and after restarts. `expiring` exits 69 (the code `validate` uses for a
 * cluster that is not ready) when any certificate expires within `--within` without being renewed
 * (the alerts' rule, src/ledger/ledger.ts), after printing them, so that a script can gate on it.
 */
import { Command, Option } from 'commander';
import { InvalidInputError, KopsError } from '../errors.ts';
import { loadKubeConfig, makeClients } from '../kube/client.ts';
import { epochSeconds, expiringWithin, isCurrent, type LedgerEntry } from '../ledger/ledger.ts';
import { ConfigMapLedgerStore } from '../ledger/store.ts';
import { durationFlag, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface CertsOptions extends KubeOptions {
  namespace: string;
  output: string;
}

interface ExpiringOptions extends CertsOptions {
  within: number;
  includeRenewing?: boolean;
}

/** One certificate as the commands print it. */
export interface CertificateRow {
  kind: string;
  instanceGroup: string;
  instance: string;
  serial: string;
  notAfter: string;
  /** Seconds from now until it expires. */
  expiresInSeconds: number;
}

/** `--within`: a Go duration (`48h`) or whole days (`14d`), in seconds. */
function withinFlag(value: string): number {
  const days = /^(\d{1,4})d$/.exec(value);
  if (days) return Number(days[1]) * 86_400;
  const ms = durationFlag('--within', value);
  if (ms <= 0)
    throw new InvalidInputError(`--within ${value}: expected a positive duration such as 14d or 48h`);
  return Math.ceil(ms / 1000);
}

/** A span for people: `13d4h`, `14d`, `5h12m`, `42m`. */
export function humanSpan(seconds: number): string {
  const minutes = Math.max(0, Math.floor(seconds / 60));
  const [d, h, m] = [Math.floor(minutes / 1440), Math.floor((minutes % 1440) / 60), minutes % 60];
  if (d > 0) return h > 0 ? `${d}d${h}h` : `${d}d`;
  if (h > 0) return m > 0 ? `${h}h${m}m` : `${h}h`;
  return `${m}m`;
}

function rowOf(entry: LedgerEntry, now: number): CertificateRow {
  return {
    kind: entry.kind,
    instanceGroup: entry.instanceGroup,
    instance: entry.instance,
    serial: entry.serial,
    notAfter: new Date(entry.notAfter * 1000).toISOString(),
    expiresInSeconds: entry.notAfter - now,
  };
}

function render(command: Command, format: string, rows: readonly CertificateRow[]): void {
  writeOut(
    command,
    formatOutput(format, rows, {
      rows,
      columns: [
        { header: 'kind', value: (r) => r.kind },
        { header: 'instance group', value: (r) => r.instanceGroup || '-' },
        { header: 'instance', value: (r) => r.instance },
        { header: 'serial', value: (r) => r.serial },
        { header: 'not after', value: (r) => r.notAfter },
        { header: 'expires in', value: (r) => humanSpan(r.expiresInSeconds) },
      ],
    }),
  );
}

async function readLedger(options: CertsOptions): Promise<LedgerEntry[]> {
  const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
  return new ConfigMapLedgerStore({
    core: makeClients(kubeConfig).core,
    namespace: options.namespace,
  }).list();
}

function withLedgerOptions(command: Command): Command {
  return withKubeOptions(command)
    .addOption(
      new Option(
        '-n, --namespace <name>',
        "where the ledger is: the controller's bootstrap.replayNamespace",
      ).default('kube-system'),
    )
    .addOption(outputOption());
}

function listCommand(): Command {
  return withLedgerOptions(new Command('list'))
    .description('list every certificate in the expiry ledger, soonest to expire first')
    .action(async (options: CertsOptions, command: Command) => {
      const now = epochSeconds(new Date());
      const rows = (await readLedger(options))
        .filter((entry) => isCurrent(entry, now))
        .sort((a, b) => a.notAfter - b.notAfter)
        .map((entry) => rowOf(entry, now));
      render(command, options.output, rows);
    });
}

function expiringCommand(): Command {
  return withLedgerOptions(new Command('expiring'))
    .description(
      'list the certificates that expire within --within and are not being renewed (as the alerts); exits 69 if there are any',
    )
    .addOption(
      new Option('--within <duration>', 'how soon: whole days (14d) or a Go duration (48h)')
        .argParser(withinFlag)
        .default(14 * 86_400, '14d'),
    )
    .option(
      '--include-renewing',
      'also list certificates with more than a tenth of their lifetime left, which a routine renewal replaces (a kubelet renews at 70-90 %)',
    )
    .action(async (options: ExpiringOptions, command: Command) => {
      const now = epochSeconds(new Date());
      const entries = await readLedger(options);
      const rows = expiringWithin(entries, now, options.within, options.includeRenewing).map((entry) =>
        rowOf(entry, now),
      );
      render(command, options.output, rows);
      if (rows.length > 0) {
        throw new KopsError(
          'unavailable',
          `${rows.length} certificate${rows.length === 1 ? '' : 's'} expire within ${humanSpan(options.within)}; rotate them`,
          { details: { reason: 'certificates-expiring' } },
        );
      }
    });
}

export function certsCommand(): Command {
  return new Command('certs')
    .description('the certificate expiry ledger: every certificate kops-controller issued or holds')
    .addCommand(listCommand())
    .addCommand(expiringCommand());
}
