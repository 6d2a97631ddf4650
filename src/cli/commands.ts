/**
 * The commands, each in its own module, loaded on demand: a command's dependencies (the Kubernetes
 * client, the AWS SDK, ...) cost a second or more to import, so `kops-controller pki pin` should not
 * pay for `run`'s.
 */
import type { Command } from 'commander';

const loaders: Record<string, () => Promise<Command>> = {
  certs: async () => (await import('./certs.ts')).certsCommand(),
  dev: async () => (await import('./dev.ts')).devCommand(),
  discovery: async () => (await import('./discovery.ts')).discoveryCommand(),
  events: async () => (await import('./events.ts')).eventsCommand(),
  explain: async () => (await import('./explain.ts')).explainCommand(),
  host: async () => (await import('./host.ts')).hostCommand(),
  join: async () => (await import('./join.ts')).joinCommand(),
  labels: async () => (await import('./labels.ts')).labelsCommand(),
  pki: async () => (await import('./pki.ts')).pkiCommand(),
  requests: async () => (await import('./requests.ts')).requestsCommand(),
  run: async () => (await import('./run.ts')).runCommand(),
  token: async () => (await import('./token.ts')).tokenCommand(),
  validate: async () => (await import('./validate.ts')).validateCommand(),
};

/** The names of every subcommand. */
export const commandNames: readonly string[] = Object.keys(loaders);

/** Loads the named subcommands, or all of them (for help and the CLI reference). */
export async function loadCommands(names: readonly string[] = commandNames): Promise<Command[]> {
  return Promise.all(names.map((name) => (loaders[name] as () => Promise<Command>)()));
}
