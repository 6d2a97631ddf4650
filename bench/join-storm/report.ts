/** What the benchmark prints: a row per storm, the aws ratio, and the plain comparison's medians. */
import type { PlainKind } from './plain.ts';
import type { JoinStormResult, StormFigures } from './types.ts';

/** Certificates verified per second of wall time. */
function certsPerSecond(figures: StormFigures): number {
  return figures.verified / (figures.wallMs / 1000);
}

/** The middle value (the mean of the two middle ones for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return Number.NaN;
  if (sorted.length % 2) return sorted[mid] as number;
  return ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Server CPU milliseconds per verified certificate (less sensitive to the machine's other load than wall time). */
function serverCpuMsPerCert(figures: StormFigures): number {
  return (figures.serverCpuSeconds * 1000) / Math.max(1, figures.verified);
}

const seconds = (s: number) => `${s.toFixed(1)}s`;

const header =
  `${'storm'.padEnd(44)} ${'verified'.padStart(9)} ${'wall'.padStart(8)} ${'certs/s'.padStart(7)} ` +
  `${'server CPU'.padStart(10)} ${'ms/cert'.padStart(8)} ${'client CPU'.padStart(10)} ${'client GC'.padStart(9)} ` +
  `${'loop'.padStart(5)}  key exchange`;

/** One storm's row; `numbered` adds its round to its name. */
function row(f: StormFigures, numbered: boolean): string {
  const name = numbered && f.round ? `${f.name} #${f.round}` : f.name;
  const loop = f.serverLoopBusy === undefined ? '-' : `${Math.round(f.serverLoopBusy * 100)}%`;
  let line =
    `${name.padEnd(44)} ${`${f.verified}/${f.nodes}`.padStart(9)} ${`${(f.wallMs / 1000).toFixed(2)}s`.padStart(8)} ` +
    `${certsPerSecond(f).toFixed(0).padStart(7)} ${seconds(f.serverCpuSeconds).padStart(10)} ` +
    `${serverCpuMsPerCert(f).toFixed(2).padStart(8)} ${seconds(f.clientCpuSeconds).padStart(10)} ` +
    `${`${f.clientGcMs.toFixed(0)}ms`.padStart(9)} ${loop.padStart(5)}  ${f.keyExchange.join(',')}`;
  if (f.cloud) {
    line += `   DescribeInstances=${f.cloud.describeInstances} throttled=${f.cloud.throttled} STS=${f.cloud.sts}`;
  }
  if (f.firstFailure) line += `\n  first failure: ${f.firstFailure}`;
  return line;
}

/** The aws storms' rows and the ratio of per-node to batched lookups. */
function awsLines(aws: NonNullable<JoinStormResult['aws']>, numbered: boolean): string[] {
  const { batched, perNode } = aws;
  const calls = (perNode.cloud?.describeInstances ?? 0) / Math.max(1, batched.cloud?.describeInstances ?? 0);
  return [
    'aws storms: a new TLS connection per node; the aws policy (STS replay, replay guard, EC2) with EC2 throttling on (bucket 100, refill 20/s)',
    header,
    row(batched, numbered),
    row(perNode, numbered),
    `ratio  ${calls.toFixed(0)}x fewer DescribeInstances, ${(perNode.wallMs / batched.wallMs).toFixed(1)}x less wall time (per-node / batched)`,
  ];
}

/** The ratios of the plain comparison: each round's pair run back to back, the median over rounds. */
function ratioLines(plain: StormFigures[], cfssl: StormFigures[], version: string, rounds: number): string[] {
  const ofKind = (storms: StormFigures[], kind: PlainKind) => storms.filter((f) => f.kind === kind);
  // Each round's ratio pairs storms run back to back; the median of those resists a noisy round.
  const pairs = (kind: PlainKind) => {
    const theirs = ofKind(cfssl, kind);
    return ofKind(plain, kind).flatMap((ours) => {
      const match = theirs.find((f) => f.round === ours.round);
      return match ? [{ ours, theirs: match }] : [];
    });
  };
  const rate = (kind: PlainKind) =>
    median(pairs(kind).map(({ ours, theirs }) => certsPerSecond(ours) / certsPerSecond(theirs))).toFixed(2);
  const cpu = (kind: PlainKind) =>
    median(
      pairs(kind).map(({ ours, theirs }) => serverCpuMsPerCert(theirs) / serverCpuMsPerCert(ours)),
    ).toFixed(2);
  const ms = (kind: PlainKind) => median(ofKind(plain, kind).map(serverCpuMsPerCert));
  const of = rounds > 1 ? `, median of ${rounds} rounds` : '';
  return [
    `ratio  ours/cfssl certs/s: keep-alive ${rate('keep-alive')}, new connection per node ${rate('new-tls')} ` +
      `(target ≥ 1.3${of})`,
    // The machine is shared with the clients, so CPU per certificate compares the servers alone.
    `ratio  cfssl/ours server CPU per certificate: keep-alive ${cpu('keep-alive')}, ` +
      `new connection per node ${cpu('new-tls')} (target ≥ 1.5; 1.0 = as cheap as cfssl${of})`,
    `hybrid key exchange costs this server ${(ms('hybrid') - ms('new-tls')).toFixed(2)} ms more CPU per new ` +
      `connection; cfssl ${version} (Go 1.19) cannot negotiate it`,
  ];
}

/** The report the benchmark prints. */
export function formatJoinStorm(result: JoinStormResult): string {
  const numbered = result.plain.some((p) => (p.round ?? 1) > 1);
  const lines = [
    `join-storm: ${result.nodes} nodes, ${result.concurrency} requests in flight, HTTPS to a server in its own process ` +
      '(ms/cert: server CPU per verified certificate; client CPU: this process, clients and simulators; ' +
      'client GC: its garbage-collection pauses during the storm, after a full collection before each; ' +
      "loop: share of the wall time our server's event loop was busy)",
  ];
  if (result.aws) lines.push(...awsLines(result.aws, numbered));
  const rounds = Math.max(1, ...result.plain.map((f) => f.round ?? 1));
  let plainTitle = 'plain issuance: insecure-always-approve vs cfssl serve over TLS, the same CSRs and CA';
  if (rounds > 1)
    plainTitle += `, ${rounds} rounds (both servers back to back per kind, alternating who goes first)`;
  lines.push(plainTitle);
  if (!result.aws) lines.push(header);
  if ('unavailable' in result.cfssl) {
    lines.push(
      ...result.plain.map((f) => row(f, numbered)),
      `cfssl: not measured — ${result.cfssl.unavailable}`,
    );
    return lines.join('\n');
  }
  const cfssl = result.cfssl.storms;
  const storms = [...result.plain, ...cfssl].sort((a, b) => (a.round ?? 0) - (b.round ?? 0));
  lines.push(...storms.map((f) => row(f, numbered)));
  lines.push(...ratioLines(result.plain, cfssl, result.cfssl.version, rounds));
  return lines.join('\n');
}
