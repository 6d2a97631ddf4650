/** The list of commands; each lives in its own module and exports a factory. */
import type { Command } from 'commander';
import { devCommand } from './dev.ts';
import { discoveryCommand } from './discovery.ts';
import { explainCommand } from './explain.ts';
import { joinCommand } from './join.ts';
import { labelsCommand } from './labels.ts';
import { pkiCommand } from './pki.ts';
import { requestsCommand } from './requests.ts';
import { runCommand } from './run.ts';
import { tokenCommand } from './token.ts';

/** Every subcommand of the program, in no particular order (help sorts them). */
export function commandsOf(): Command[] {
  return [
    devCommand(),
    discoveryCommand(),
    explainCommand(),
    joinCommand(),
    labelsCommand(),
    pkiCommand(),
    requestsCommand(),
    runCommand(),
    tokenCommand(),
  ];
}
