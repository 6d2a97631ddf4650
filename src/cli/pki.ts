/**
 * `kops-controller pki ...`: static clustering. An admin makes the CA and every node's credentials
 * out of band and copies them to the nodes; keys are made where the command runs (`issue`) or on
 * the node itself (`sign`, from a CSR), and never leave the machine that made them otherwise.
 */
import { Command, Option } from 'commander';
import { UnauthenticatedError } from '../errors.ts';
import { type ApplyPlan, executePlan, planApply } from '../pki/apply.ts';
import { parseApplySpec, wantedEntries } from '../pki/apply-spec.ts';
import { bundlePem, type CertificateAuthority, createCa, defaultCaName, rotateCa } from '../pki/ca.ts';
import { maxCsrBytes, parseCsr, RequestRejectedError } from '../pki/csr.ts';
import {
  type CaLayout,
  caLayoutOf,
  loadCa,
  locationOf,
  nodeFilePath,
  privateFileMode,
  publicFileMode,
  readText,
  saveCa,
  saveNewCa,
} from '../pki/folder.ts';
import { renderSummaries, summarise } from '../pki/inspect.ts';
import { generateKey, keyAlgorithms, privateKeyPem } from '../pki/keys.ts';
import { kubeletClientKeyPathOnNode, renderClientKubeconfig, validateServerUrl } from '../pki/kubeconfig.ts';
import { decodePem } from '../pki/pem.ts';
import { pinOfSpki } from '../pki/pin.ts';
import {
  type CertificateRequest,
  type IssuedCertificate,
  issueCertificate,
  type ProfileName,
  profileNamed,
  profileNames,
  publicKeyRequest,
  validateDnsName,
} from '../pki/profiles.ts';
import { openVfs } from '../statestore/open.ts';
import type { Vfs } from '../statestore/types.ts';
import { collect, commandLogger, durationFlag } from './common.ts';
import { readInputFile } from './input-file.ts';
import { formatOutput, outputOption } from './output.ts';

interface FolderOptions {
  dir: string;
  caName: string;
  output: string;
}

interface IdentityOptions {
  name: string;
  ip: string[];
  dns: string[];
  lifetime?: string;
}

function withFolder(command: Command, required = true): Command {
  const dir = new Option('--dir <dir>', 'the PKI folder: a directory, file://, s3://, gs:// or memfs:// URL');
  return command
    .addOption(required ? dir.makeOptionMandatory() : dir)
    .addOption(new Option('--ca-name <name>', 'the CA (kops keyset) name').default(defaultCaName))
    .addOption(outputOption());
}

function withIdentity(command: Command): Command {
  return command
    .requiredOption('--name <node>', 'node name (for kops-controller: its DNS name)')
    .option(
      '--ip <ip>',
      'IP address the certificate is valid for (repeatable; serving profiles)',
      collect,
      [],
    )
    .option(
      '--dns <name>',
      'DNS name the certificate is valid for (repeatable; serving profiles)',
      collect,
      [],
    )
    .option(
      '--lifetime <duration>',
      'validity, e.g. 24h or 8760h (clamped to 10m..10920h); default per profile',
    );
}

/**
 * Prints command data: `human` for -o table, the data itself for json / yaml. It goes through the
 * command's configured output (standard output unless a caller, such as a test, redirects it).
 */
function print(command: Command, format: string, data: unknown, human: string): void {
  const text = format === 'table' ? human : formatOutput(format, data);
  const { writeOut } = command.configureOutput();
  if (writeOut) writeOut(text);
  else process.stdout.write(text);
}

const profilesHelp = `\nProfiles:\n${profileNames
  .map((name) => `  ${name.padEnd(16)} ${profileNamed(name).description}`)
  .join('\n')}`;

function profileArgument(value: string): ProfileName {
  profileNamed(value);
  return value as ProfileName;
}

function lifetimeOf(options: IdentityOptions): number | undefined {
  return options.lifetime === undefined ? undefined : durationFlag('--lifetime', options.lifetime);
}

function describeIssued(issued: IssuedCertificate): string {
  const names = [...issued.altNames.dnsNames, ...issued.altNames.ipAddresses];
  const subject = [
    ...issued.subject.organizations.map((o) => `O=${o}`),
    `CN=${issued.subject.commonName}`,
  ].join(', ');
  return (
    `issued ${issued.profile} certificate "${subject}"${names.length ? ` for ${names.join(', ')}` : ''}, ` +
    `valid until ${issued.notAfter.toISOString()}\n`
  );
}

async function issueInto(
  vfs: Vfs,
  ca: CertificateAuthority,
  profile: ProfileName,
  request: CertificateRequest,
  options: IdentityOptions,
): Promise<{ issued: IssuedCertificate; path: string }> {
  const issued = issueCertificate(
    ca,
    profile,
    request,
    { name: options.name, dnsNames: options.dns, ipAddresses: options.ip },
    { lifetimeMs: lifetimeOf(options) },
  );
  const path = nodeFilePath(options.name, `${profile}.crt`);
  await vfs.write(path, issued.pem, { mode: publicFileMode });
  return { issued, path };
}

function initCommand(): Command {
  return withFolder(new Command('init'))
    .description('create a new cluster CA in the PKI folder and print its pin')
    .addOption(
      new Option('--key-algorithm <algorithm>', 'CA key type').choices(keyAlgorithms).default('ecdsa-p256'),
    )
    .option('--common-name <cn>', 'CA subject common name (default: the CA name)')
    .option('--lifetime <duration>', 'CA validity', '87600h')
    .addOption(
      new Option(
        '--layout <layout>',
        'pem: <name>.crt/.key (kops-controller caBasePath); keyset: kops keyset.yaml',
      )
        .choices(['pem', 'keyset'])
        .default('pem'),
    )
    .action(
      async (
        options: FolderOptions & {
          keyAlgorithm: (typeof keyAlgorithms)[number];
          commonName?: string;
          lifetime: string;
          layout: 'pem' | 'keyset';
        },
        command: Command,
      ) => {
        const vfs = openVfs(options.dir);
        const ca = createCa({
          name: validateDnsName(options.caName, 'CA name'),
          algorithm: options.keyAlgorithm,
          lifetimeMs: durationFlag('--lifetime', options.lifetime),
          ...(options.commonName ? { commonName: options.commonName } : {}),
        });
        const saved = await saveNewCa(vfs, ca, options.layout);
        const pin = pinOfSpki(ca.signer.certificate.parsed.spki);
        commandLogger(command).info(
          { ca: ca.name, keypairId: ca.signer.certificate.keypairId, pin },
          'created CA',
        );
        print(
          command,
          options.output,
          { caCertificate: saved.certificate, caKey: saved.key, pin },
          `created CA "${ca.name}" (keypair ${ca.signer.certificate.keypairId})\n` +
            `certificate: ${saved.certificate}\nkey:         ${saved.key}\npin:         ${pin}\n`,
        );
      },
    );
}

function rotateCommand(): Command {
  return withFolder(new Command('rotate'))
    .description(
      'make a new CA key and certificate the signer; the old certificates stay trusted in the bundle',
    )
    .addOption(
      new Option('--key-algorithm <algorithm>', 'new CA key type')
        .choices(keyAlgorithms)
        .default('ecdsa-p256'),
    )
    .option('--lifetime <duration>', 'new CA validity', '87600h')
    .action(
      async (
        options: FolderOptions & { keyAlgorithm: (typeof keyAlgorithms)[number]; lifetime: string },
        command: Command,
      ) => {
        const vfs = openVfs(options.dir);
        const before = await loadCa(vfs, options.caName);
        const layout = (await caLayoutOf(vfs, options.caName)) as CaLayout;
        const ca = rotateCa(before, {
          algorithm: options.keyAlgorithm,
          lifetimeMs: durationFlag('--lifetime', options.lifetime),
        });
        const saved = await saveCa(vfs, ca, layout);
        const pins = ca.certificates.map((c) => pinOfSpki(c.parsed.spki));
        commandLogger(command).info(
          {
            ca: ca.name,
            keypairId: ca.signer.certificate.keypairId,
            previous: before.signer.certificate.keypairId,
          },
          'rotated CA',
        );
        print(
          command,
          options.output,
          { caCertificate: saved.certificate, caKey: saved.key, pin: pins[0], pins },
          `rotated CA "${ca.name}": keypair ${ca.signer.certificate.keypairId} signs now; ` +
            `${ca.certificates.length} certificates in the bundle\n` +
            `certificate: ${saved.certificate}\nkey:         ${saved.key}\npins:        ${pins.join('\n             ')}\n`,
        );
      },
    );
}

function issueCommand(): Command {
  return withIdentity(withFolder(new Command('issue')))
    .description(
      'make a key pair here and issue a certificate for it (for nodes that cannot make their own key)',
    )
    .argument('<profile>', `certificate profile: ${profileNames.join(', ')}`, profileArgument)
    .addHelpText('after', profilesHelp)
    .addOption(
      new Option('--key-algorithm <algorithm>', 'key type of the new key')
        .choices(keyAlgorithms)
        .default('ecdsa-p256'),
    )
    .action(
      async (
        profile: ProfileName,
        options: FolderOptions & IdentityOptions & { keyAlgorithm: (typeof keyAlgorithms)[number] },
        command: Command,
      ) => {
        const vfs = openVfs(options.dir);
        const ca = await loadCa(vfs, options.caName);
        const key = generateKey(options.keyAlgorithm);
        const { issued, path } = await issueInto(vfs, ca, profile, publicKeyRequest(key), options);
        const keyPath = nodeFilePath(options.name, `${profile}.key`);
        await vfs.write(keyPath, privateKeyPem(key), { mode: privateFileMode });
        commandLogger(command).info(
          { profile, node: options.name, serial: issued.serialHex },
          'issued certificate',
        );
        const locations = { certificate: locationOf(vfs, path), key: locationOf(vfs, keyPath) };
        print(
          command,
          options.output,
          locations,
          describeIssued(issued) + `certificate: ${locations.certificate}\nkey:         ${locations.key}\n`,
        );
      },
    );
}

/** PEM inputs other than CSRs (certificates, bundles) are refused above this size. */
const maxPemFileBytes = 1024 * 1024;

/** A CSR that is too large is a rejected request, like any other bad CSR. */
const csrTooLarge = (message: string) => new RequestRejectedError('too-large', message);

function signCommand(): Command {
  return withIdentity(withFolder(new Command('sign')))
    .description("issue a certificate for a CSR made on the node (the node's key never leaves it)")
    .argument('<profile>', `certificate profile: ${profileNames.join(', ')}`, profileArgument)
    .addHelpText('after', profilesHelp)
    .requiredOption('--csr <file>', 'PKCS#10 request (PEM), e.g. from openssl req')
    .action(
      async (
        profile: ProfileName,
        options: FolderOptions & IdentityOptions & { csr: string },
        command: Command,
      ) => {
        const csr = parseCsr(await readInputFile(options.csr, maxCsrBytes, 'CSR file', csrTooLarge));
        const vfs = openVfs(options.dir);
        const ca = await loadCa(vfs, options.caName);
        const { issued, path } = await issueInto(vfs, ca, profile, csr, options);
        commandLogger(command).info(
          { profile, node: options.name, serial: issued.serialHex },
          'signed request',
        );
        const certificate = locationOf(vfs, path);
        print(
          command,
          options.output,
          { certificate },
          describeIssued(issued) + `certificate: ${certificate}\n`,
        );
      },
    );
}

async function readServerCa(path: string): Promise<string> {
  const text = (await readInputFile(path, maxPemFileBytes, '--server-ca')).toString('utf8');
  decodePem(text, 'CERTIFICATE', path);
  return text;
}

interface KubeconfigOptions extends FolderOptions {
  server: string;
  name: string;
  clusterName: string;
  serverCa?: string;
  nodeKeyPath: string;
}

/**
 * The node's kubelet client credentials: the pair in the folder; or, when only the certificate is
 * there (`pki sign`: the key stays on the node), the certificate and the key's path on the node;
 * or, when there is nothing yet, a new pair made as `pki issue kubelet` would.
 */
async function kubeletCredentials(
  vfs: Vfs,
  ca: CertificateAuthority,
  options: KubeconfigOptions,
  command: Command,
): Promise<{ certificatePem: string; key: { pem: string } | { path: string } }> {
  const certificatePath = nodeFilePath(options.name, 'kubelet.crt');
  const keyPath = nodeFilePath(options.name, 'kubelet.key');
  const certificatePem = await readText(vfs, certificatePath);
  const keyPem = await readText(vfs, keyPath);
  if (certificatePem !== undefined) {
    return { certificatePem, key: keyPem === undefined ? { path: options.nodeKeyPath } : { pem: keyPem } };
  }
  const key = generateKey();
  const { issued } = await issueInto(vfs, ca, 'kubelet', publicKeyRequest(key), {
    name: options.name,
    ip: [],
    dns: [],
  });
  await vfs.write(keyPath, privateKeyPem(key), { mode: privateFileMode });
  commandLogger(command).info({ node: options.name, serial: issued.serialHex }, 'issued kubelet certificate');
  return { certificatePem: issued.pem, key: { pem: privateKeyPem(key) } };
}

function kubeconfigCommand(): Command {
  return withFolder(new Command('kubeconfig'))
    .description("write a kubelet kubeconfig embedding the CA bundle and the node's kubelet client pair")
    .requiredOption('--server <url>', 'API server URL (https)')
    .requiredOption('--name <node>', 'node name')
    .option('--cluster-name <name>', 'cluster entry name in the kubeconfig', 'kubernetes')
    .option('--server-ca <file>', "PEM bundle the API server's certificate chains to, if not the cluster CA")
    .option(
      '--node-key-path <path>',
      'where the kubelet key is on the node, when it was made there (pki sign)',
      kubeletClientKeyPathOnNode,
    )
    .action(async (options: KubeconfigOptions, command: Command) => {
      validateDnsName(options.name, 'node name');
      validateServerUrl(options.server);
      const vfs = openVfs(options.dir);
      const ca = await loadCa(vfs, options.caName);
      const { certificatePem, key } = await kubeletCredentials(vfs, ca, options, command);
      const kubeconfig = renderClientKubeconfig({
        server: options.server,
        caBundlePem: options.serverCa ? await readServerCa(options.serverCa) : bundlePem(ca),
        certificatePem,
        key,
        user: `system:node:${options.name}`,
        clusterName: options.clusterName,
      });
      const path = nodeFilePath(options.name, 'kubelet.kubeconfig');
      await vfs.write(path, kubeconfig, { mode: privateFileMode });
      const location = locationOf(vfs, path);
      print(command, options.output, { kubeconfig: location }, `kubeconfig: ${location}\n`);
    });
}

function pinCommand(): Command {
  return withFolder(new Command('pin'))
    .description('print the CA pin (sha256 of its public key, kubeadm format); all pins while rotating')
    .action(async (options: FolderOptions, command: Command) => {
      const ca = await loadCa(openVfs(options.dir), options.caName);
      const pins = ca.certificates.map((c) => pinOfSpki(c.parsed.spki));
      print(command, options.output, { pin: pins[0], pins }, `${pins.join('\n')}\n`);
    });
}

function inspectCommand(): Command {
  return withFolder(new Command('inspect'), false)
    .description(
      'summarise a certificate (or bundle) or a certificate request; with --dir, whether the CA signed it',
    )
    .argument('<file>', 'PEM file')
    .action(
      async (
        file: string,
        options: Partial<FolderOptions> & { caName: string; output: string },
        command: Command,
      ) => {
        const text = (await readInputFile(file, maxPemFileBytes, 'file')).toString('utf8');
        const ca = options.dir ? await loadCa(openVfs(options.dir), options.caName) : undefined;
        const summaries = summarise(text, ca);
        print(
          command,
          options.output,
          summaries.length === 1 ? summaries[0] : summaries,
          renderSummaries(summaries),
        );
        // "Did this CA sign it?" is what --dir asks; a script reads the answer from the exit code.
        const foreign = summaries.filter((s) => s.type === 'certificate' && s.signedByCa === false);
        if (foreign.length > 0) {
          throw new UnauthenticatedError(
            `${file}: ${foreign.map((s) => `"${s.subject}"`).join(', ')} not signed by CA ${options.caName} in ${options.dir}`,
          );
        }
      },
    );
}

/** Apply files larger than this are refused: thousands of nodes fit well below it. */
const maxApplyFileBytes = 4 * 1024 * 1024;

/** The plan as scripts read it: one item per certificate. */
function planItems(plan: ApplyPlan) {
  return plan.entries.map(({ entry, decision, kubeconfig }) => ({
    path: entry.path,
    profile: entry.profile,
    action: decision.action,
    reasons: decision.reasons,
    ...(kubeconfig ? { kubeconfig: kubeconfig.action } : {}),
  }));
}

/** The plan for people: a count per action, then one line per certificate. */
function renderPlan(plan: ApplyPlan): string {
  const count = (action: string) => plan.entries.filter((p) => p.decision.action === action).length;
  const kubeconfigs = plan.entries.filter((p) => p.kubeconfig?.action === 'write').length;
  const width = Math.max(...plan.entries.map((p) => p.entry.path.length), 0);
  const lines = plan.entries.map(({ entry, decision, kubeconfig }) => {
    const written = kubeconfig?.action === 'write' ? ' (+ kubeconfig)' : '';
    return `  ${decision.action.padEnd(8)} ${entry.path.padEnd(width)}  ${entry.profile}: ${decision.reasons.join('; ')}${written}`;
  });
  return (
    `plan: ${count('issue')} to issue, ${count('reissue')} to re-issue, ${count('renew')} to renew, ` +
    `${count('keep')} unchanged; ${kubeconfigs} kubeconfigs to write\n${lines.join('\n')}\n`
  );
}

function applyCommand(): Command {
  return withFolder(new Command('apply'))
    .description(
      'issue every certificate and kubeconfig a file declares (control plane, admins, nodes): plan, then apply; unchanged ones are kept',
    )
    .argument('<file>', 'YAML or JSON file: cluster, server, controlPlane, admins, nodes (see docs/pki.md)')
    .option('--out <dir>', 'where the certificates and kubeconfigs go (default: --dir)')
    .option('--dry-run', 'print the plan only; write nothing')
    .option(
      '--renew-before <duration>',
      "renew certificates with less than this left (default: a third of each one's lifetime)",
    )
    .addOption(
      new Option('--key-algorithm <algorithm>', 'key type of new keys')
        .choices(keyAlgorithms)
        .default('ecdsa-p256'),
    )
    .action(
      async (
        file: string,
        options: FolderOptions & {
          out?: string;
          dryRun?: boolean;
          renewBefore?: string;
          keyAlgorithm: (typeof keyAlgorithms)[number];
        },
        command: Command,
      ) => {
        const text = (await readInputFile(file, maxApplyFileBytes, 'apply file')).toString('utf8');
        const entries = wantedEntries(parseApplySpec(text, file));
        const renewBeforeMs =
          options.renewBefore === undefined ? undefined : durationFlag('--renew-before', options.renewBefore);
        const ca = await loadCa(openVfs(options.dir), options.caName);
        const out = openVfs(options.out ?? options.dir);
        const plan = await planApply(out, ca, entries, { renewBeforeMs });
        if (options.dryRun) {
          print(command, options.output, { plan: planItems(plan) }, renderPlan(plan));
          return;
        }
        const applied = await executePlan(out, plan, { keyAlgorithm: options.keyAlgorithm });
        commandLogger(command).info(
          { certificates: applied.issued.length, kubeconfigs: applied.kubeconfigs, out: out.url },
          'applied',
        );
        const summary = {
          certificates: applied.issued.length,
          kubeconfigs: applied.kubeconfigs,
          files: applied.files,
          out: locationOf(out, '').replace(/\/$/, ''),
        };
        print(
          command,
          options.output,
          { plan: planItems(plan), applied: summary },
          `${renderPlan(plan)}applied: issued ${summary.certificates} certificates, wrote ${summary.kubeconfigs} kubeconfigs (${summary.files} files) in ${summary.out}\n`,
        );
      },
    );
}

/** `kops-controller pki`: the CA and static clustering. */
export function pkiCommand(): Command {
  const pki = new Command('pki').description(
    'cluster CA and static clustering: create the CA, issue and sign certificates, kubeconfigs, pins; apply a whole cluster from a file',
  );
  for (const sub of [
    initCommand(),
    rotateCommand(),
    issueCommand(),
    signCommand(),
    kubeconfigCommand(),
    pinCommand(),
    inspectCommand(),
    applyCommand(),
  ]) {
    // Added commands do not inherit the program's settings: errors must reach main(), not exit (the
    // program sets exitOverride and the usage hint on every command again, src/cli/main.ts).
    pki.addCommand(sub.exitOverride());
  }
  return pki;
}
