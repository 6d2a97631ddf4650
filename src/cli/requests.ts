/**
 * `kops-controller requests list|show|approve|deny`: the queue of bootstrap requests waiting for a
 * human. They are CertificateSigningRequests of the signer `kops.k8s.io/node-bootstrap`, so
 * `kubectl certificate approve|deny` works the same; this command shows what a decision needs: who
 * asks (claimed name, source address, proof), every certificate approving issues with its subject
 * and every SAN, and what of it was verified. Approving only records the decision: the controller's
 * signer checks the request again and signs.
 *
 * "Verified" is shown only for what the server verified, never for what a CSR's annotations say:
 * anyone who may create CSRs can name our signer and write any evidence, and only the controller can
 * check its seal. So a request counts as the controller's only if the API server recorded as its
 * creator (spec.username, which no requester can set) an identity that may sign for our signer
 * (asked with a SubjectAccessReview, as the API server itself asks before a signer writes a
 * certificate), and its name counts as verified only on the controller's own verified mark.
 */
import {
  AuthorizationV1Api,
  type CertificatesV1Api,
  type KubeConfig,
  type V1CertificateSigningRequest,
} from '@kubernetes/client-node';
import { Command } from 'commander';
import {
  bootstrapSignerName,
  certificateLines,
  type QueuedCertificate,
  type QueuedCsrView,
  viewOfQueuedCsr,
} from '../bootstrap/queue.ts';
import { ConflictError, describeError, InvalidInputError, NotFoundError } from '../errors.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { loadKubeConfig, makeClients } from '../kube/client.ts';
import { commandLogger, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface ListOptions extends KubeOptions {
  output: string;
  all?: boolean;
}

interface ShowOptions extends KubeOptions {
  output: string;
}

interface DecideOptions extends KubeOptions {
  reason?: string;
}

/** Whether a CSR's creator may sign for our signer: true, false, or why that could not be asked. */
export type CreatorCheck = boolean | { unknown: string };

/** One queued request as the admin sees it. */
export interface RequestRow {
  name: string;
  node: string;
  claimedNode: string;
  remoteAddress: string;
  proof: string;
  /** True only for a request the controller made whose name a policy verified. */
  verified: boolean;
  /** Why it is or is not verified, in words. */
  verification: string;
  /** True only when the names a serving certificate gets were verified too, not requested by the node. */
  addressesVerified: boolean;
  /** Who created the CSR, as the API server recorded it. */
  createdBy: string;
  /** Every SAN of every certificate approving issues. */
  sans: string[];
  certificates: QueuedCertificate[];
  instanceGroup: string;
  evidence: Record<string, string>;
  status: 'Pending' | 'Approved' | 'Issued' | 'Denied' | 'Failed';
  created: string;
  /** Why the certificates could not be worked out (a malformed or altered request). */
  problem?: string;
}

function clients(options: KubeOptions): { certificates: CertificatesV1Api; kubeConfig: KubeConfig } {
  const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
  return { certificates: makeClients(kubeConfig).certificates, kubeConfig };
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

/** Whether a request is verified, and why (see the module comment). */
function verificationOf(
  view: QueuedCsrView,
  creator: CreatorCheck,
): { verified: boolean; verification: string } {
  if (creator !== true) {
    const why =
      creator === false
        ? `by ${view.createdBy || 'an unknown user'}, who may not sign for ${bootstrapSignerName}`
        : `cannot check who created it (${creator.unknown})`;
    return { verified: false, verification: `NOT created by kops-controller: ${why}; trust nothing it says` };
  }
  return view.nameVerified
    ? { verified: true, verification: 'the node name was verified by the approval policy' }
    : { verified: false, verification: 'the node name is claimed by the requester, not verified' };
}

/** The row of a queued CSR, given whether its creator may sign for our signer. */
export function rowOf(csr: V1CertificateSigningRequest, creator: CreatorCheck): RequestRow {
  const view = viewOfQueuedCsr(csr);
  const created = csr.metadata?.creationTimestamp;
  return {
    name: view.name,
    node: view.nodeName,
    claimedNode: view.claimedNode,
    remoteAddress: view.remoteAddress,
    proof: view.proof,
    ...verificationOf(view, creator),
    addressesVerified: creator === true && view.addressesVerified,
    createdBy: view.createdBy,
    sans: [...new Set(view.certificates.flatMap((c) => [...c.dnsNames, ...c.ipAddresses]))],
    certificates: [...view.certificates],
    instanceGroup: view.instanceGroup,
    evidence: view.evidence,
    status: statusOf(csr),
    created: created instanceof Date ? created.toISOString() : String(created ?? ''),
    ...(view.problem === undefined ? {} : { problem: view.problem }),
  };
}

/**
 * Asks the API server whether each CSR's creator may sign for our signer (by name, or by
 * `<domain>/*`, as the API server checks a signer), once per distinct creator.
 */
function creatorChecker(kubeConfig: KubeConfig): (csr: V1CertificateSigningRequest) => Promise<CreatorCheck> {
  const api = kubeConfig.makeApiClient(AuthorizationV1Api);
  const answers = new Map<string, Promise<CreatorCheck>>();
  const maySign = async (user: string, groups: string[], name: string): Promise<boolean> => {
    const review = await api.createSubjectAccessReview({
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user,
          groups,
          resourceAttributes: { group: 'certificates.k8s.io', resource: 'signers', verb: 'sign', name },
        },
      },
    });
    return review.status?.allowed === true;
  };
  return (csr) => {
    const user = csr.spec?.username ?? '';
    const groups = csr.spec?.groups ?? [];
    const key = JSON.stringify([user, groups]);
    let answer = answers.get(key);
    if (!answer) {
      const wildcard = `${bootstrapSignerName.split('/')[0]}/*`;
      answer = user
        ? Promise.all([maySign(user, groups, bootstrapSignerName), maySign(user, groups, wildcard)]).then(
            ([exact, domain]) => exact || domain,
            (err: unknown) => ({
              unknown: describeError(fromApiException(err, 'create a SubjectAccessReview')),
            }),
          )
        : Promise.resolve(false);
      answers.set(key, answer);
    }
    return answer;
  };
}

async function readOurs(api: CertificatesV1Api, name: string): Promise<V1CertificateSigningRequest> {
  let csr: V1CertificateSigningRequest;
  try {
    csr = await api.readCertificateSigningRequest({ name });
  } catch (err) {
    const error = fromApiException(err, `read certificate signing request ${name}`);
    // The API server's answer says no more than this line, and its raw text runs to hundreds of characters.
    if (error.kind === 'not-found') {
      throw new NotFoundError(`no bootstrap request ${name}: \`kops-controller requests list\` shows them`);
    }
    throw error;
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

async function rowsOf(options: KubeOptions, items: V1CertificateSigningRequest[]): Promise<RequestRow[]> {
  const check = creatorChecker(clients(options).kubeConfig);
  return Promise.all(items.map(async (csr) => rowOf(csr, await check(csr))));
}

function listCommand(): Command {
  return withKubeOptions(new Command('list'))
    .description('list bootstrap requests waiting for a decision, with their evidence and every SAN')
    .option('--all', 'also list decided requests (approved, issued, denied, failed)')
    .addOption(outputOption())
    .action(async (options: ListOptions, command: Command) => {
      const api = clients(options).certificates;
      let items: V1CertificateSigningRequest[];
      try {
        items = (
          await api.listCertificateSigningRequest({ fieldSelector: `spec.signerName=${bootstrapSignerName}` })
        ).items;
      } catch (err) {
        throw fromApiException(err, 'list certificate signing requests');
      }
      const wanted = items.filter((csr) => options.all || statusOf(csr) === 'Pending');
      const rows = (await rowsOf(options, wanted)).sort(
        (a, b) => a.created.localeCompare(b.created) || a.name.localeCompare(b.name),
      );
      writeOut(
        command,
        formatOutput(options.output, rows, {
          rows,
          columns: [
            { header: 'name', value: (r) => r.name },
            { header: 'node', value: (r) => r.node },
            {
              header: 'verified',
              value: (r) =>
                r.verified
                  ? 'yes'
                  : r.verification.startsWith('NOT')
                    ? 'NO (not made by kops-controller)'
                    : 'NO (claimed)',
            },
            { header: 'from', value: (r) => r.remoteAddress },
            { header: 'proof', value: (r) => r.proof },
            { header: 'sans', value: (r) => r.sans.join(',') },
            { header: 'status', value: (r) => r.status },
          ],
        }),
      );
    });
}

/** A request in full, for people: who asks, what was verified, and every certificate and SAN. */
function describeRow(row: RequestRow, creator: CreatorCheck): string {
  const field = (label: string, value: string) => `${`${label}:`.padEnd(16)}${value}`;
  const createdBy =
    creator === true
      ? `${row.createdBy} (may sign for ${bootstrapSignerName})`
      : `${row.createdBy || 'unknown'} (NOT kops-controller: ${
          creator === false
            ? `it may not sign for ${bootstrapSignerName}`
            : `cannot check: ${creator.unknown}`
        }; trust nothing this request says)`;
  const lines = [
    field('name', row.name),
    field('status', row.status),
    field('created', row.created),
    field('created by', createdBy),
    field('from', row.remoteAddress),
    field('proof', row.proof),
    field('node', `${row.node} (${row.verified ? 'verified by the approval policy' : 'NOT verified'})`),
    ...(row.sans.length
      ? [
          field(
            'addresses',
            row.addressesVerified ? 'verified by the approval policy' : 'NOT verified (requested)',
          ),
        ]
      : []),
    ...(row.claimedNode && row.claimedNode !== row.node ? [field('claimed node', row.claimedNode)] : []),
    ...(row.instanceGroup ? [field('instance group', row.instanceGroup)] : []),
    field(
      'evidence',
      Object.entries(row.evidence)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([key, value]) => `${key}=${value}`)
        .join(', '),
    ),
    ...(row.problem ? [field('problem', `${row.problem} (the signer will refuse it)`)] : []),
    'approving issues:',
    ...certificateLines(row.certificates).map((line) => `  ${line}`),
  ];
  return `${lines.join('\n')}\n`;
}

function showCommand(): Command {
  return withKubeOptions(new Command('show'))
    .description('show one bootstrap request in full: who asks, what was verified, every certificate and SAN')
    .argument('<name>', 'the request (CSR) name, from `requests list`')
    .addOption(outputOption())
    .action(async (name: string, options: ShowOptions, command: Command) => {
      const csr = await readOurs(clients(options).certificates, name);
      const creator = await creatorChecker(clients(options).kubeConfig)(csr);
      const row = rowOf(csr, creator);
      writeOut(
        command,
        options.output === 'table' ? describeRow(row, creator) : formatOutput(options.output, row),
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
      await decide(clients(options).certificates, name, type, message);
      commandLogger(command).info({ csr: name, decision: type }, 'bootstrap request decided');
      writeOut(command, `certificatesigningrequest/${name} ${verb === 'approve' ? 'approved' : 'denied'}\n`);
    });
}

/** The `requests` command. */
export function requestsCommand(): Command {
  return new Command('requests')
    .description(
      'list, show, approve and deny queued node bootstrap requests (CSRs of kops.k8s.io/node-bootstrap)',
    )
    .addCommand(listCommand())
    .addCommand(showCommand())
    .addCommand(decideCommand('approve'))
    .addCommand(decideCommand('deny'));
}
