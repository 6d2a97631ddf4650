/**
 * `kops-controller requests list|approve|deny`: the queue of bootstrap requests waiting for a human.
 * They are CertificateSigningRequests of the signer `kops.k8s.io/node-bootstrap`, so
 * `kubectl certificate approve|deny` works the same; this command shows the evidence a decision
 * needs (claimed name, source address, proof, the facts that will be certified) in one table.
 * Approving only records the decision: the controller's signer checks the request again and signs.
 */
import type { CertificatesV1Api, V1CertificateSigningRequest } from '@kubernetes/client-node';
import { Command } from 'commander';
import { bootstrapSignerName, queueAnnotations } from '../bootstrap/queue.ts';
import type { NodeFacts } from '../bootstrap/types.ts';
import { ConflictError, InvalidInputError } from '../errors.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { loadKubeConfig, makeClients } from '../kube/client.ts';
import { commandLogger, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface ListOptions extends KubeOptions {
  output: string;
  all?: boolean;
}

interface DecideOptions extends KubeOptions {
  reason?: string;
}

/** One queued request as the admin sees it. */
export interface RequestRow {
  name: string;
  node: string;
  claimedNode: string;
  remoteAddress: string;
  proof: string;
  verified: boolean;
  addresses: string[];
  instanceGroup: string;
  status: 'Pending' | 'Approved' | 'Issued' | 'Denied' | 'Failed';
  created: string;
}

function certificatesApi(options: KubeOptions): CertificatesV1Api {
  return makeClients(loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context }).kubeConfig)
    .certificates;
}

function hasCondition(csr: V1CertificateSigningRequest, type: string): boolean {
  return (csr.status?.conditions ?? []).some((c) => c.type === type && c.status === 'True');
}

/** Where a CSR stands, in one word. */
export function statusOf(csr: V1CertificateSigningRequest): RequestRow['status'] {
  if (hasCondition(csr, 'Denied')) return 'Denied';
  if (hasCondition(csr, 'Failed')) return 'Failed';
  if (csr.status?.certificate) return 'Issued';
  if (hasCondition(csr, 'Approved')) return 'Approved';
  return 'Pending';
}

function factsOf(csr: V1CertificateSigningRequest): Partial<NodeFacts> {
  try {
    const facts: unknown = JSON.parse(csr.metadata?.annotations?.[queueAnnotations.facts] ?? '{}');
    return facts !== null && typeof facts === 'object' ? (facts as Partial<NodeFacts>) : {};
  } catch {
    return {};
  }
}

/** The row of a queued CSR; the evidence comes from its annotations (the signer verifies their seal). */
export function rowOf(csr: V1CertificateSigningRequest): RequestRow {
  const annotations = csr.metadata?.annotations ?? {};
  const facts = factsOf(csr);
  const created = csr.metadata?.creationTimestamp;
  return {
    name: csr.metadata?.name ?? '',
    node: facts.nodeName ?? '',
    claimedNode: annotations[queueAnnotations.claimedNode] ?? '',
    remoteAddress: annotations[queueAnnotations.remoteAddress] ?? '',
    proof: annotations[queueAnnotations.proof] ?? '',
    verified: facts.evidence?.['verified'] !== 'false',
    addresses: [...(facts.dnsNames ?? []), ...(facts.ipAddresses ?? [])],
    instanceGroup: facts.instanceGroup ?? '',
    status: statusOf(csr),
    created: created instanceof Date ? created.toISOString() : String(created ?? ''),
  };
}

async function readOurs(api: CertificatesV1Api, name: string): Promise<V1CertificateSigningRequest> {
  let csr: V1CertificateSigningRequest;
  try {
    csr = await api.readCertificateSigningRequest({ name });
  } catch (err) {
    throw fromApiException(err, `read certificate signing request ${name}`);
  }
  if (csr.spec?.signerName !== bootstrapSignerName) {
    throw new InvalidInputError(
      `${name} is not a bootstrap request (its signer is ${csr.spec?.signerName}); use kubectl certificate approve|deny for it`,
    );
  }
  return csr;
}

/** Adds the Approved or Denied condition through the `/approval` subresource. */
async function decide(
  api: CertificatesV1Api,
  name: string,
  type: 'Approved' | 'Denied',
  message: string,
): Promise<void> {
  const csr = await readOurs(api, name);
  if (hasCondition(csr, 'Approved') || hasCondition(csr, 'Denied')) {
    throw new ConflictError(
      `${name} is already ${statusOf(csr).toLowerCase()}; a decision cannot be changed`,
    );
  }
  const now = new Date();
  const condition = {
    type,
    status: 'True',
    reason: type === 'Approved' ? 'KopsControllerApprove' : 'KopsControllerDeny',
    message,
    lastUpdateTime: now,
    lastTransitionTime: now,
  };
  const body = {
    ...csr,
    status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), condition] },
  };
  try {
    await api.replaceCertificateSigningRequestApproval({ name, body });
  } catch (err) {
    throw fromApiException(err, `${type === 'Approved' ? 'approve' : 'deny'} ${name}`);
  }
}

function listCommand(): Command {
  return withKubeOptions(new Command('list'))
    .description('list bootstrap requests waiting for a decision, with their evidence')
    .option('--all', 'also list decided requests (approved, issued, denied, failed)')
    .addOption(outputOption())
    .action(async (options: ListOptions, command: Command) => {
      const api = certificatesApi(options);
      let items: V1CertificateSigningRequest[];
      try {
        items = (
          await api.listCertificateSigningRequest({ fieldSelector: `spec.signerName=${bootstrapSignerName}` })
        ).items;
      } catch (err) {
        throw fromApiException(err, 'list certificate signing requests');
      }
      const rows = items
        .map(rowOf)
        .filter((row) => options.all || row.status === 'Pending')
        .sort((a, b) => a.created.localeCompare(b.created) || a.name.localeCompare(b.name));
      writeOut(
        command,
        formatOutput(options.output, rows, {
          rows,
          columns: [
            { header: 'name', value: (r) => r.name },
            { header: 'node', value: (r) => r.node },
            { header: 'verified', value: (r) => (r.verified ? 'yes' : 'NO (claimed)') },
            { header: 'from', value: (r) => r.remoteAddress },
            { header: 'proof', value: (r) => r.proof },
            { header: 'addresses', value: (r) => r.addresses.join(',') },
            { header: 'status', value: (r) => r.status },
          ],
        }),
      );
    });
}

function decideCommand(verb: 'approve' | 'deny'): Command {
  const type = verb === 'approve' ? 'Approved' : 'Denied';
  return withKubeOptions(new Command(verb))
    .description(
      verb === 'approve'
        ? 'approve a bootstrap request; the controller then signs exactly the facts it shows'
        : 'deny a bootstrap request; the node gets the reason',
    )
    .argument('<name>', 'the request (CSR) name, from `requests list`')
    .option('--reason <text>', 'why, recorded in the condition message and shown to the node')
    .action(async (name: string, options: DecideOptions, command: Command) => {
      const message =
        options.reason ??
        `${verb === 'approve' ? 'approved' : 'denied'} with kops-controller requests ${verb}`;
      await decide(certificatesApi(options), name, type, message);
      commandLogger(command).info({ csr: name, decision: type }, 'bootstrap request decided');
      writeOut(command, `certificatesigningrequest/${name} ${verb === 'approve' ? 'approved' : 'denied'}\n`);
    });
}

/** The `requests` command. */
export function requestsCommand(): Command {
  return new Command('requests')
    .description('list, approve and deny queued node bootstrap requests (CSRs of kops.k8s.io/node-bootstrap)')
    .addCommand(listCommand())
    .addCommand(decideCommand('approve'))
    .addCommand(decideCommand('deny'));
}
