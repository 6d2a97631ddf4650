/**
 * Builds docs/cli.md from the commands' own help, so the CLI reference can never drift from the code
 * (a test compares the file with this output; `npm run docs` rewrites it).
 */
import type { Command } from 'commander';
import { buildProgram } from './main.ts';

function commandPath(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

function section(command: Command, depth: number, out: string[]): void {
  out.push(`${'#'.repeat(Math.min(depth + 2, 6))} \`${commandPath(command)}\``, '');
  // Help wraps to the terminal width; pin it so the reference is the same on every machine.
  command.configureOutput({ getOutHelpWidth: () => 100, getErrHelpWidth: () => 100 });
  out.push('```text', command.helpInformation().trimEnd(), '```', '');
  const subs = [...command.commands].sort((a, b) => a.name().localeCompare(b.name()));
  for (const sub of subs) section(sub, depth + 1, out);
}

/** The full CLI reference as Markdown. */
export async function cliReference(): Promise<string> {
  const out = [
    '# CLI reference',
    '',
    "Generated from the commands' own `--help` by `npm run docs`; a test fails when this file is stale.",
    '',
  ];
  section(await buildProgram(), 0, out);
  return out.join('\n');
}
