/**
 * The plain issuance comparison: our server under `insecure-always-approve` and `cfssl serve`, the
 * same CSRs and CA, in rounds over each kind of connection.
 */
import { classicalGroups } from './client.ts';
import { measureStorm, type StormCheck } from './measure.ts';
import type { ServerProcess, StormFigures, StormRequest } from './types.ts';

/** A server of the plain comparison, warmed up, with the storm requests it answers. */
export interface PlainSigner {
  name: string;
  server: ServerProcess;
  requests: StormRequest[];
  check: StormCheck;
}

/** The connection kinds of the plain comparison. */
const plainKinds = {
  'keep-alive': { label: 'keep-alive', keepAlive: true, groups: classicalGroups },
  'new-tls': { label: 'new TLS connection per node', keepAlive: false, groups: classicalGroups },
  // The handshake a current client gets by default: post-quantum hybrid key exchange.
  hybrid: { label: 'new TLS per node, hybrid kx', keepAlive: false, groups: undefined },
} as const;

export type PlainKind = keyof typeof plainKinds;

/** One plain storm of `signer` over connections of `kind`. */
async function plainStorm(
  signer: PlainSigner,
  kind: PlainKind,
  round: number,
  concurrency: number,
): Promise<StormFigures> {
  const { label, keepAlive, groups } = plainKinds[kind];
  const options = { keepAlive, concurrency, groups };
  const figure = await measureStorm(
    `${signer.name}, ${label}`,
    signer.server,
    signer.requests,
    signer.check,
    options,
  );
  return { ...figure, kind, round };
}

/**
 * Runs the plain storms in rounds, each round both servers back to back for each kind of
 * connection, so a change in the machine's load during the run hits both sides of a pair.
 */
export async function plainRounds(
  ours: PlainSigner,
  cfssl: PlainSigner | undefined,
  rounds: number,
  concurrency: number,
): Promise<{ ours: StormFigures[]; cfssl: StormFigures[] }> {
  const figures = { ours: [] as StormFigures[], cfssl: [] as StormFigures[] };
  for (let round = 1; round <= rounds; round++) {
    for (const kind of ['keep-alive', 'new-tls'] as const) {
      // Odd rounds start with ours, even ones with cfssl, so neither side always runs first.
      const runOurs = async () => figures.ours.push(await plainStorm(ours, kind, round, concurrency));
      const runTheirs = async () =>
        cfssl && figures.cfssl.push(await plainStorm(cfssl, kind, round, concurrency));
      if (round % 2) await runOurs().then(runTheirs);
      else await runTheirs().then(runOurs);
    }
    figures.ours.push(await plainStorm(ours, 'hybrid', round, concurrency));
  }
  return figures;
}
