import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CommanderError } from 'commander';
import { ConfigError, InternalError } from '../errors.ts';
import { commandNames } from './commands.ts';
import { buildProgram, commandsNeeded, errorLine } from './main.ts';

const cli = (args: string[]) =>
  spawnSync(process.execPath, ['src/cli/main.ts', ...args], {
    encoding: 'utf8',
    cwd: new URL('../..', import.meta.url),
  });

test('--version prints the package version and exits 0', () => {
  const run = cli(['--version']);
  assert.equal(run.status, 0);
  assert.match(run.stdout, /^\d+\.\d+\.\d+\n$/);
});

test('an unknown option is a usage error: exit 2 with one readable line', () => {
  const run = cli(['--no-such-option']);
  assert.equal(run.status, 2);
  assert.match(run.stderr, /unknown option '--no-such-option'/);
});

test('every command has help', async () => {
  const program = await buildProgram();
  const walk = (command: typeof program): void => {
    assert.ok(command.description(), `${command.name()} has a description`);
    for (const sub of command.commands) walk(sub);
  };
  walk(program);
});

test('typed errors become one line; unexpected ones are labelled as bugs', () => {
  assert.equal(errorLine(new ConfigError('bad\nthing')), 'bad thing');
  assert.match(errorLine(new InternalError('boom')), /^internal error: boom \(this is a bug/);
  assert.match(errorLine(new TypeError('x is undefined')), /^internal error: x is undefined/);
});

test('usage errors in nested subcommands are reported, not thrown out of the process', async () => {
  const program = await buildProgram();
  for (const command of program.commands) {
    for (const sub of command.commands) {
      sub.configureOutput({ writeErr: () => undefined });
      assert.throws(
        () => sub.parse(['--definitely-not-an-option'], { from: 'user' }),
        CommanderError,
        `${command.name()} ${sub.name()}`,
      );
    }
  }
});

test('a command line loads only the command it names; help and unknown words load them all', () => {
  assert.deepEqual(commandsNeeded(['-v', '4', 'pki', 'pin', '--dir', 'x']), ['pki']);
  assert.deepEqual(commandsNeeded(['--v', 'run']), commandNames);
  assert.deepEqual(commandsNeeded(['--help']), commandNames);
  assert.deepEqual(commandsNeeded(['--version']), []);
  assert.deepEqual(commandsNeeded(['no-such-command']), commandNames);
  assert.deepEqual(commandsNeeded(['--log-format', 'json', 'pki', 'pin']), ['pki']);
});

test('commands people type log readable lines, JSON only with --log-format json', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kops-log-format-'));
  try {
    const text = cli(['pki', 'init', '--dir', join(dir, 'a')]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stderr, /^kops-controller: info: created CA ca=kubernetes-ca keypairId=/m);
    assert.doesNotMatch(text.stderr, /^\{/m);
    const json = cli(['--log-format', 'json', 'pki', 'init', '--dir', join(dir, 'b')]);
    assert.equal(json.status, 0, json.stderr);
    const records = json.stderr
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.ok(records.some((r) => r['level'] === 'info' && r['msg'] === 'created CA'));
    assert.equal(cli(['pki', 'init', '--log-format', 'xml', '--dir', join(dir, 'c')]).status, 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
