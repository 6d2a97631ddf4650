/** Runs CLI commands in this process for tests, capturing what they print. */
import type { Command } from 'commander';
import { buildProgram, commandsNeeded } from '../cli/main.ts';

/**
 * Runs `kops-controller -v 0 ...args` in process and returns everything it printed (standard output and
 * error, in order); rejects with the command's error, as main() would see it.
 */
export async function runCli(...args: string[]): Promise<string> {
  const argv = ['-v', '0', ...args];
  const program = await buildProgram(commandsNeeded(argv));
  let out = '';
  const capture = (command: Command): void => {
    command.configureOutput({ writeOut: (text) => (out += text), writeErr: (text) => (out += text) });
    for (const sub of command.commands) capture(sub);
  };
  capture(program);
  await program.parseAsync(argv, { from: 'user' });
  return out;
}
