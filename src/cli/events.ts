/**
 * `kops-controller events`: tells the controller's Events about Nodes from Events written in its name
 * by someone else. Kubernetes lets every kubelet create Events about any object, and nothing in an
 * Event names its writer, so a compromised node can write Warning `IdentityRejected` Events "from
 * kops-controller" about healthy Nodes that `kubectl describe node` shows exactly like the
 * controller's (red team 3). The controller names its Events with an HMAC of what they say, keyed
 * from the replicas' Secret (src/controllers/node/node-event.ts), which no node can compute: this
 * command reads the key and each Node, computes the name again and says whether it matches. It writes
 * nothing, and exits 0 whatever it finds (it reports; the operator judges); what keeps it from
 * reporting (no key, RBAC, the API server) exits with that error's code.
 */
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import { Command, Option } from 'commander';
import { mapConcurrent } from '../cloud/concurrency.ts';
import { labelsKeySecretName, loadLabelsKey } from '../controllers/node/labels-key.ts';
import { eventName, eventNameKey, eventSource } from '../controllers/node/node-event.ts';
import { isDnsSubdomain } from '../dns-name.ts';
import { InvalidInputError, NotFoundError } from '../errors.ts';
import { loadKubeConfig } from '../kube/client.ts';
import { kubeList } from '../kube/informer.ts';
import { type KubeHttps, kubeAnswerError, kubeHttps, kubeJson, maxNodeBytes } from '../kube/kube-https.ts';
import { printable } from '../log.ts';
import { humanSpan } from './certs.ts';
import { type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface EventsOptions extends KubeOptions {
  node?: string;
  keyNamespace: string;
  output: string;
}

/** Why an Event in the controller's name is not shown to be the controller's. */
export type UnverifiedWhy = 'node-gone' | 'node-recreated' | 'name-not-keyed' | 'other-namespace';

/** What each {@link UnverifiedWhy} means, as the table's legend and the JSON's `explanation` say it. */
const explanations: Record<UnverifiedWhy, string> = {
  'node-gone':
    'no Node of that name now: the Event outlived its Node, or names one that never existed; its name cannot be checked',
  'node-recreated':
    'the Node was created after this Event (re-created since, with another uid): the Event was about an earlier Node of the name, or is forged',
  'name-not-keyed':
    'the name is not the keyed one for what the Event says about the Node as it is now: written by someone other than the controller (any kubelet may create and patch Events), or by the controller before it had read its key (or under a key since rotated)',
  'other-namespace':
    "the controller's keyed name, but the controller writes its Events only in default: a copy made by someone else",
};

/** One Event as the command prints it. */
export interface EventRow {
  namespace: string;
  name: string;
  node: string;
  type: string;
  reason: string;
  message: string;
  count: number | null;
  firstSeen: string | null;
  lastSeen: string | null;
  verdict: 'verified' | 'unverified';
  why?: UnverifiedWhy;
  explanation?: string;
}

/** The command's whole answer (`-o json`). */
export interface EventsReport {
  events: EventRow[];
  summary: {
    events: number;
    verified: number;
    unverified: number;
    unverifiedBy: Partial<Record<UnverifiedWhy, number>>;
  };
}

/** An Event in its wire shape (timestamps as strings), as much of it as is read. */
interface WireEvent extends KubernetesObject {
  involvedObject?: { kind?: string; name?: string };
  type?: string;
  reason?: string;
  message?: string;
  count?: number;
  firstTimestamp?: string;
  lastTimestamp?: string;
  eventTime?: string;
  series?: { count?: number; lastObservedTime?: string };
  source?: { component?: string };
  reportingComponent?: string;
}

/** What the check needs of a Node: its uid, and when the API server created it. */
export interface NodeFacts {
  uid: string;
  created: string | undefined;
}

/** Node reads in flight at once: one per distinct Node, without opening hundreds of calls. */
const nodeReadConcurrency = 8;

/** Events read per list page. */
const pageSize = 500;

const stringOr = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/** Whether an Event claims to come from the controller, by either of the fields kubectl shows. */
function inControllersName(event: WireEvent): boolean {
  return event.source?.component === eventSource || event.reportingComponent === eventSource;
}

/**
 * The verdict on one Event in the controller's name: `verified` when its name is the one the
 * controller gives that report about the Node as it is now (name, uid, type, reason, message), keyed
 * with `nameKey`, and it is in `default`, where the controller writes; else why not. `node` is the
 * Node the Event names, undefined when there is none.
 */
export function verdictOf(
  event: WireEvent,
  node: NodeFacts | undefined,
  nameKey: Uint8Array,
): { verdict: 'verified' } | { verdict: 'unverified'; why: UnverifiedWhy } {
  const nodeName = event.involvedObject?.name ?? '';
  if (!node || nodeName === '') return { verdict: 'unverified', why: 'node-gone' };
  // The name covers only Normal and Warning reports; any other type simply matches no keyed name.
  const type = (event.type ?? '') as 'Normal' | 'Warning';
  const keyed = eventName(
    { name: nodeName, uid: node.uid },
    type,
    event.reason ?? '',
    event.message ?? '',
    nameKey,
  );
  if (keyed === event.metadata?.name) {
    return event.metadata?.namespace === 'default'
      ? { verdict: 'verified' }
      : { verdict: 'unverified', why: 'other-namespace' };
  }
  // The API server stamps creationTimestamp itself (the writer cannot choose it): an Event made
  // before its Node was about another Node of the same name.
  const eventCreated = Date.parse(String(event.metadata?.creationTimestamp ?? ''));
  const nodeCreated = Date.parse(node.created ?? '');
  if (eventCreated < nodeCreated) return { verdict: 'unverified', why: 'node-recreated' };
  return { verdict: 'unverified', why: 'name-not-keyed' };
}

/** The Events about Nodes in the controller's name, in every namespace; of `node` only when given. */
async function listEvents(options: EventsOptions, kubeConfig: KubeConfig): Promise<WireEvent[]> {
  // Every namespace: a forger may write anywhere, and `kubectl describe node` shows them all. The
  // component is either of two fields, which no one field selector can say: chosen here.
  const list = kubeList<WireEvent>(kubeConfig, '/api/v1/events');
  const fieldSelector = [
    'involvedObject.kind=Node',
    ...(options.node ? [`involvedObject.name=${options.node}`] : []),
  ].join(',');
  const events: WireEvent[] = [];
  let next: string | undefined;
  do {
    const page = await list({ fieldSelector, limit: pageSize, ...(next ? { _continue: next } : {}) });
    for (const item of page.items ?? []) if (inControllersName(item)) events.push(item);
    next = page.metadata?._continue || undefined;
  } while (next);
  return events;
}

/** The Node named `name`: its uid and creation, or undefined when there is none. */
async function readNode(call: KubeHttps, name: string): Promise<NodeFacts | undefined> {
  const action = `read node ${name}`;
  const answer = await call({
    action,
    method: 'GET',
    path: `/api/v1/nodes/${encodeURIComponent(name)}`,
    maxBodyBytes: maxNodeBytes,
  });
  if (answer.status === 404) return undefined;
  if (answer.status !== 200) throw kubeAnswerError(answer, action);
  const node = kubeJson<{ metadata?: { uid?: unknown; creationTimestamp?: unknown } }>(answer, action);
  return { uid: stringOr(node.metadata?.uid) ?? '', created: stringOr(node.metadata?.creationTimestamp) };
}

/**
 * The key Event names are made with, through the controller's own loader, which would make a key
 * where it finds none: here a write is refused before it is sent, so this command never creates or
 * fills the Secret, and says there is no key to verify with.
 */
async function readNameKey(call: KubeHttps, namespace: string): Promise<Uint8Array> {
  const readOnly: KubeHttps = async (request) => {
    if (request.method === 'GET') return call(request);
    const where = `${namespace}/${labelsKeySecretName}`;
    const advice = `so no Event can be verified; pass --key-namespace if its leaderElection.namespace is not ${namespace}`;
    throw new NotFoundError(
      request.method === 'POST'
        ? `no key Secret ${where}: the controller has not made its key yet (it does as it first leads), ${advice}`
        : `Secret ${where} holds no key yet: the controller fills it as it first leads, ${advice}`,
      { reason: 'no-labels-key' },
    );
  };
  const { key } = await loadLabelsKey(readOnly, namespace, new AbortController().signal);
  return eventNameKey(key);
}

/** When the Event was last seen, as kubectl's LAST SEEN reads it: its series, its lastTimestamp, its eventTime. */
function lastSeenOf(event: WireEvent): string | null {
  return (
    stringOr(event.series?.lastObservedTime) ??
    stringOr(event.lastTimestamp) ??
    stringOr(event.eventTime) ??
    stringOr(event.firstTimestamp) ??
    null
  );
}

/** The rows of the Events and their verdicts, by Node, then namespace and name. */
export function eventRows(
  events: readonly WireEvent[],
  nodes: ReadonlyMap<string, NodeFacts | undefined>,
  nameKey: Uint8Array,
): EventRow[] {
  const rows = events.map((event): EventRow => {
    const node = event.involvedObject?.name ?? '';
    const verdict = verdictOf(event, nodes.get(node), nameKey);
    const count = event.series?.count ?? event.count;
    return {
      namespace: event.metadata?.namespace ?? '',
      name: event.metadata?.name ?? '',
      node,
      type: event.type ?? '',
      reason: event.reason ?? '',
      message: event.message ?? '',
      count: typeof count === 'number' ? count : null,
      firstSeen: stringOr(event.firstTimestamp) ?? stringOr(event.eventTime) ?? null,
      lastSeen: lastSeenOf(event),
      ...(verdict.verdict === 'verified'
        ? { verdict: 'verified' as const }
        : { verdict: 'unverified' as const, why: verdict.why, explanation: explanations[verdict.why] }),
    };
  });
  const order = (r: EventRow) => [r.node, r.namespace, r.name];
  return rows.sort((a, b) => {
    const [x, y] = [order(a), order(b)];
    for (let i = 0; i < x.length; i++) {
      const c = (x[i] as string).localeCompare(y[i] as string);
      if (c !== 0) return c;
    }
    return 0;
  });
}

/** The report of `rows`: them, and how many verified and why the others did not. */
export function eventsReport(rows: EventRow[]): EventsReport {
  const unverifiedBy: Partial<Record<UnverifiedWhy, number>> = {};
  for (const row of rows) if (row.why) unverifiedBy[row.why] = (unverifiedBy[row.why] ?? 0) + 1;
  const verified = rows.filter((r) => r.verdict === 'verified').length;
  return {
    events: rows,
    summary: { events: rows.length, verified, unverified: rows.length - verified, unverifiedBy },
  };
}

/** The summary and legend printed under the table. */
function summaryLines(report: EventsReport): string[] {
  const { events, verified, unverified, unverifiedBy } = report.summary;
  const lines = [
    `${events} Event${events === 1 ? '' : 's'} about Nodes in ${eventSource}'s name: ` +
      `${verified} verified (written by the controller), ${unverified} unverified` +
      (unverified > 0 ? " (not shown to be the controller's: may be forged)" : ''),
  ];
  for (const [why, n] of Object.entries(unverifiedBy)) {
    lines.push(`${why} (${n}): ${explanations[why as UnverifiedWhy]}`);
  }
  return lines;
}

function render(command: Command, format: string, report: EventsReport): void {
  const now = Date.now();
  // Everything but the verdict is the writer's choice, a forger's included: no terminal escapes.
  const cell = (text: string, max?: number) => printable(text, max);
  const text = formatOutput(format, report, {
    rows: report.events,
    columns: [
      { header: 'event', value: (r) => cell(`${r.namespace}/${r.name}`) },
      { header: 'node', value: (r) => cell(r.node) || '-' },
      { header: 'type', value: (r) => cell(r.type) },
      { header: 'reason', value: (r) => cell(r.reason) },
      { header: 'verdict', value: (r) => (r.why ? `unverified: ${r.why}` : r.verdict) },
      { header: 'count', value: (r) => r.count ?? '-' },
      {
        header: 'last seen',
        value: (r) => {
          const at = Date.parse(r.lastSeen ?? '');
          return Number.isNaN(at) ? '-' : humanSpan((now - at) / 1000);
        },
      },
      { header: 'message', value: (r) => cell(r.message, 60) },
    ],
  });
  if (format !== 'table') {
    writeOut(command, text);
    return;
  }
  const lines = report.events.length > 0 ? [text.trimEnd()] : [];
  writeOut(command, [...lines, ...summaryLines(report)].join('\n') + '\n');
}

/** `--node`: a Node's name, which is a DNS subdomain (and so safe in a field selector). */
function nodeFlag(value: string): string {
  if (!isDnsSubdomain(value)) {
    throw new InvalidInputError(`--node ${value}: expected a Node's name (a DNS subdomain)`);
  }
  return value;
}

/** The `events` command. */
export function eventsCommand(): Command {
  return withKubeOptions(new Command('events'))
    .description(
      "list the Events about Nodes in kops-controller's name, in every namespace, and verify each by its " +
        'keyed name (any kubelet can write the others); reads only, exits 0 whatever it finds',
    )
    .addOption(new Option('--node <name>', 'only the Events about this Node').argParser(nodeFlag))
    .addOption(
      new Option(
        '--key-namespace <name>',
        `where the key Secret ${labelsKeySecretName} is: the controller's leaderElection.namespace`,
      ).default('kube-system'),
    )
    .addOption(outputOption())
    .action(async (options: EventsOptions, command: Command) => {
      const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
      const call = kubeHttps(kubeConfig, { timeoutMs: 30_000 });
      const nameKey = await readNameKey(call, options.keyNamespace);
      const events = await listEvents(options, kubeConfig);
      // A Node's name is a DNS subdomain: an Event naming anything else names no Node, and no path is
      // made of it.
      const names = [...new Set(events.map((e) => e.involvedObject?.name ?? ''))].filter(isDnsSubdomain);
      const facts = await mapConcurrent(names, nodeReadConcurrency, (name) => readNode(call, name));
      const nodes = new Map(names.map((name, i) => [name, facts[i]]));
      render(command, options.output, eventsReport(eventRows(events, nodes, nameKey)));
    });
}
