/** Runs CLI commands in this process for tests, capturing what they print. */
import type { Command } from 'commander';
import { buildProgram, commandsNeeded } from '../cli/main.ts';

/**
 * Runs `kops-controller -v 0 ...args` in process and returns everything it printed (standard output and
 * error, in order); rejects with the command's error, as main() would see it.
 */
export async function runCli(...args: string[]): Promise<string> {
  const { output, error } = await runCliResult(...args);
  if (error !== undefined) throw error;
  return output;
}

/** Like {@link runCli}, but resolves with what was printed and the error, for commands that print and then fail. */
export async function runCliResult(...args: string[]): Promise<{ output: string; error?: unknown }> {
  const argv = ['-v', '0', ...args];
  const program = await buildProgram(commandsNeeded(argv));
  let out = '';
  const capture = (command: Command): void => {
    command.configureOutput({ writeOut: (text) => (out += text), writeErr: (text) => (out += text) });
    for (const sub of command.commands) capture(sub);
  };
  capture(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return { output: out };
  } catch (error) {
    return { output: out, error };
  }
}
