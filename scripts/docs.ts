/** Regenerates docs/cli.md from the program's help text. */
import { writeFileSync } from 'node:fs';
import { cliReference } from '../src/cli/reference.ts';

writeFileSync(new URL('../docs/cli.md', import.meta.url), await cliReference());
