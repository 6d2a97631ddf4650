#!/usr/bin/env node
// Launcher: the program is TypeScript run by Node's built-in type stripping (Node >= 24.11).
import { main } from '../src/cli/main.ts';

process.exitCode = await main(process.argv.slice(2));
