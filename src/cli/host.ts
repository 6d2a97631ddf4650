/**
 * `kops-controller host add|list|delete`: kops metal's `Host` objects (`kops-system/<host name>`), the
 * registry the `pki-tpm` policy trusts: a machine may join as `<host name>` in the Host's instance
 * group once its public key is registered here. What `kops toolbox enroll` writes, without SSH: the
 * operator copies the machine's public key (/etc/kubernetes/kops/pki/machine/public.pem) here.
 */
import { createHash, createPublicKey } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Command } from 'commander';
import { HostRegistry, hostNamespace, newHostObject } from '../cloud/metal/hosts.ts';
import { fileErrorReason, NotFoundError } from '../errors.ts';
import { loadKubeConfig } from '../kube/client.ts';
import { commandLogger, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface AddOptions extends KubeOptions {
  publicKey: string;
  instanceGroup: string;
  podCidr?: string[];
}

interface ListOptions extends KubeOptions {
  output: string;
}

function registry(options: KubeOptions): HostRegistry {
  return new HostRegistry(
    loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context }).kubeConfig,
  );
}

/** The SHA-256 of a PEM public key's DER, as `host list` shows it; '' for a key that does not parse. */
function keyFingerprint(pem: string | undefined): string {
  if (!pem) return '';
  try {
    const der = createPublicKey({ key: pem, format: 'pem' }).export({ format: 'der', type: 'spki' });
    return `SHA256:${createHash('sha256').update(der).digest('base64').replace(/=+$/, '')}`;
  } catch {
    return '<unreadable key>';
  }
}

function addCommand(): Command {
  return withKubeOptions(new Command('add'))
    .description('register a machine: its host name, its ECDSA public key and its instance group')
    .argument('<name>', "the machine's host name (its node name)")
    .requiredOption(
      '--public-key <file>',
      "the machine's PEM public key (nodeup: /etc/kubernetes/kops/pki/machine/public.pem)",
    )
    .requiredOption('--instance-group <name>', 'the kops instance group the machine joins')
    .option('--pod-cidr <cidr...>', "the host's pod ranges (spec.podCIDRs, for metal IPAM)")
    .action(async (name: string, options: AddOptions, command: Command) => {
      let publicKey: string;
      try {
        publicKey = await readFile(options.publicKey, 'utf8');
      } catch (err) {
        throw new NotFoundError(`cannot read --public-key ${options.publicKey}: ${fileErrorReason(err)}`, {
          cause: err,
        });
      }
      const host = newHostObject({
        name,
        publicKey,
        instanceGroup: options.instanceGroup,
        ...(options.podCidr ? { podCIDRs: options.podCidr } : {}),
      });
      try {
        await registry(options).create(host);
      } catch (err) {
        // The namespace, or the Host type itself, is missing: say what to install.
        if (err instanceof NotFoundError) {
          throw new NotFoundError(
            `cannot create host ${hostNamespace}/${name}: ${err.message}; create the ${hostNamespace} namespace and install kops' Host CRD (k8s/crds/kops.k8s.io_hosts.yaml)`,
            { cause: err },
          );
        }
        throw err;
      }
      commandLogger(command).info({ host: name, instanceGroup: options.instanceGroup }, 'registered host');
      writeOut(command, `host ${hostNamespace}/${name} added (instance group ${options.instanceGroup})\n`);
    });
}

function listCommand(): Command {
  return withKubeOptions(new Command('list'))
    .description('list the registered machines: name, instance group, key fingerprint')
    .addOption(outputOption())
    .action(async (options: ListOptions, command: Command) => {
      const rows = (await registry(options).list())
        .map((h) => ({
          name: h.metadata.name,
          instanceGroup: h.spec?.instanceGroup ?? '',
          publicKey: keyFingerprint(h.spec?.publicKey),
          podCIDRs: h.spec?.podCIDRs ?? [],
          created: h.metadata.creationTimestamp ?? '',
        }))
        .sort((a, b) => a.name.localeCompare(b.name));
      writeOut(
        command,
        formatOutput(options.output, rows, {
          rows,
          columns: [
            { header: 'name', value: (r) => r.name },
            { header: 'instance group', value: (r) => r.instanceGroup },
            { header: 'public key', value: (r) => r.publicKey },
            { header: 'pod cidrs', value: (r) => r.podCIDRs.join(',') },
            { header: 'created', value: (r) => r.created },
          ],
        }),
      );
    });
}

function deleteCommand(): Command {
  return withKubeOptions(new Command('delete'))
    .description('unregister a machine: it can no longer prove who it is (its node and certificates stay)')
    .argument('<name>', "the machine's host name")
    .action(async (name: string, options: KubeOptions, command: Command) => {
      try {
        await registry(options).delete(name);
      } catch (err) {
        if (err instanceof NotFoundError) {
          throw new NotFoundError(`no host ${hostNamespace}/${name}; see \`kops-controller host list\``);
        }
        throw err;
      }
      writeOut(command, `host ${hostNamespace}/${name} deleted\n`);
    });
}

/** The `host` command. */
export function hostCommand(): Command {
  return new Command('host')
    .description("kops metal's Host objects (kops-system): which machines may join, with which key and group")
    .addCommand(addCommand())
    .addCommand(listCommand())
    .addCommand(deleteCommand());
}
