import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { CommanderError } from 'commander';
import { ConfigError, InternalError, InvalidInputError } from '../errors.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { commandNames } from './commands.ts';
import { verbosityOf } from './common.ts';
import { buildProgram, commandsNeeded, errorLine, implicitRunArgs } from './main.ts';

const projectRoot = new URL('../..', import.meta.url);

const cli = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
  spawnSync(process.execPath, ['src/cli/main.ts', ...args], { encoding: 'utf8', cwd: projectRoot, env });

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

test('a usage error of any command, at any depth, prints the message and the --help hint', async () => {
  const program = await buildProgram();
  // Every command that runs something (a group without an action prints its help instead).
  const walk = (command: typeof program, path: string[]): void => {
    for (const sub of command.commands) walk(sub, [...path, sub.name()]);
    if (command.commands.length > 0) return;
    let printed = '';
    command.configureOutput({ writeErr: (text) => (printed += text) });
    assert.throws(() => command.parse(['--definitely-not-an-option'], { from: 'user' }), CommanderError);
    assert.match(
      printed,
      // The unknown option, or a required option missing, whichever Commander checks first.
      /^error: (unknown option '--definitely-not-an-option'|required option .* not specified)\n\(run with --help for usage\)\n$/,
      path.join(' '),
    );
  };
  walk(program, []);
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

test("kops' DaemonSet arguments, with no command, run the controller as the Go binary does", async () => {
  const sim = await startApiServer();
  const dir = mkdtempSync(join(tmpdir(), 'kops-argv-'));
  const kubeconfig = join(dir, 'kubeconfig');
  const conf = join(dir, 'config.yaml');
  writeFileSync(kubeconfig, sim.kubeconfig());
  writeFileSync(
    conf,
    ['clusterName: argv.example.com', 'cloud: metal', 'metrics:', '  listen: 127.0.0.1:0', ''].join('\n'),
  );
  // Exactly what kops' manifest passes (KopsControllerArgv): no `run`; the pod's credentials come
  // from its service account, here from $KUBECONFIG.
  const child = spawn(process.execPath, ['src/cli/main.ts', '--v=2', `--conf=${conf}`], {
    cwd: projectRoot,
    env: { ...process.env, KUBECONFIG: kubeconfig },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const stderr: string[] = [];
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stderr! }).on('line', (line) => {
        stderr.push(line);
        try {
          const record = JSON.parse(line) as { url?: string };
          if (record.url) resolve(record.url);
        } catch {
          // not a log record
        }
      });
      exit.then((code) => reject(new Error(`exited with ${code}: ${stderr.join('\n')}`)));
    });
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
    assert.ok(
      stderr.some((line) => line.includes('"level":"info"') && line.includes('starting kops-controller')),
      '--v=2 logs info, as JSON: the format of run',
    );
    child.kill('SIGTERM');
    assert.equal(await exit, 0, stderr.join('\n'));
  } finally {
    child.kill('SIGKILL');
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("without a command, the spellings of run's options Go accepts reach run; the rest is unchanged", () => {
  const missing = '/nonexistent/kops-controller/config.yaml';
  const runsWith = `kops-controller: cannot read config file ${missing}: no such file; pass --conf FILE\n`;
  // Through the real entry, one line per kind of spelling (the unit test below covers each form).
  for (const args of [
    ['-v=2', `--conf=${missing}`],
    ['-v2', '--log-format', 'text', '--conf', missing],
    ['-conf', missing],
  ]) {
    const run = cli(args);
    assert.equal(run.status, 78, `${args.join(' ')}: ${run.stderr}`);
    assert.equal(run.stderr, runsWith, args.join(' '));
  }
  // An unknown option, a command: as before.
  const unknown = cli(['--no-such-option']);
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /^error: unknown option '--no-such-option'\n\(run with --help for usage\)\n$/);
  const typo = cli(['rnu', `--conf=${missing}`]);
  assert.equal(typo.status, 2);
  assert.match(typo.stderr, /unknown (command 'rnu'|option '--conf=)/);
});

test('-v takes a whole number of 0 or more', () => {
  for (const v of ['abc', '-1', '2.5', '', ' 2']) assert.throws(() => verbosityOf(v), InvalidInputError, v);
  assert.equal(verbosityOf('0'), '0');
  assert.equal(verbosityOf('6'), '6');
});

test('which command lines are an implicit run', async () => {
  const program = await buildProgram(['run']);
  const implicit = (...args: string[]) => implicitRunArgs(program, args);
  assert.deepEqual(implicit('--v=2', '--conf=/c.yaml'), ['run', '--v=2', '--conf=/c.yaml']);
  assert.deepEqual(implicit('--conf', '/c.yaml', '-v', '4'), ['run', '--conf', '/c.yaml', '-v', '4']);
  assert.deepEqual(implicit('-conf=/c.yaml', '-v=2'), ['run', '--conf=/c.yaml', '--v=2']);
  assert.deepEqual(implicit('-kubeconfig', '/k'), ['run', '--kubeconfig', '/k']);
  assert.deepEqual(implicit('--v=2'), ['run', '--v=2']);
  // A run option beside an unknown one: run names the unknown one.
  assert.deepEqual(implicit('--conf=/c.yaml', '--bogus'), ['run', '--conf=/c.yaml', '--bogus']);
  for (const args of [
    [],
    ['--help'],
    ['-h'],
    ['--version'],
    ['--bogus'],
    ['run', '--conf', '/c.yaml'],
    ['pki', 'init'],
    ['--conf', '/c.yaml', 'pki'],
    ['--', '--conf'],
    ['--conf=/c.yaml', '--help'],
  ]) {
    assert.equal(implicit(...args), undefined, args.join(' '));
  }
});

test('a verbosity that is not a whole number is refused with one line, not read as trace', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kops-verbosity-'));
  try {
    for (const v of ['abc', '2.5']) {
      const run = cli(['--v', v, 'pki', 'init', '--dir', join(dir, 'x')]);
      assert.equal(run.status, 65, `--v ${v}: ${run.stderr}`);
      assert.equal(
        run.stderr,
        `kops-controller: --v ${v}: expected a whole number of 0 or more (0 warnings, 2 info, 4 debug, 6 trace)\n`,
      );
    }
    const klog = cli(['-v=0', 'pki', 'init', '--dir', join(dir, 'y')]);
    assert.equal(klog.status, 0, klog.stderr);
    assert.equal(klog.stderr, '', "-v=0 is klog's spelling of warnings only");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
