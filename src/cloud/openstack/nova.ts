/**
 * The Nova (compute v2.1) calls node identity, cloud groups and the bootstrap verifier need: one
 * server by id, and every server of the project, paginated with `limit`/`marker` as Nova's
 * `servers_links` say. Both answer only servers of the project the Keystone token is scoped to (the
 * cluster's): Nova scopes a listing without `all_tenants` itself, but shows a server of any project
 * by id to a token with the admin role, so `getServer` compares the server's `tenant_id` with the
 * token's project and refuses another project's server (reason `foreign-cluster`). Reads only, so
 * they are retried: once after a 401 with a new token, and a few times after a 429, 5xx or no answer,
 * as every cloud read is (src/cloud/retry.ts).
 */
import { ForbiddenError, InvalidInputError, KopsError, UnavailableError } from '../../errors.ts';
import { fieldsOf, isJsonObject, isStringMap } from '../../json-object.ts';
import { malformedAnswer } from '../api-answer.ts';
import { cloudTime } from '../cloud-time.ts';
import { type CloudCallRecorder, noCloudCalls } from '../metrics.ts';
import { retryCloudCall } from '../retry.ts';
import { openstackRequest } from './http.ts';
import type { KeystoneSession, KeystoneToken } from './keystone.ts';

/** One address of a server, as `addresses.<network>[]` lists it. */
export interface NovaAddress {
  addr: string;
  version?: number;
  /** `fixed` (the port's own address) or `floating`. */
  'OS-EXT-IPS:type'?: string;
}

/** The fields of a Nova server the controller reads. */
export interface NovaServer {
  id: string;
  name: string;
  /** ACTIVE, BUILD, SHUTOFF, ERROR, DELETED, ... */
  status: string;
  tenant_id?: string;
  metadata?: Record<string, string>;
  addresses?: Record<string, NovaAddress[]>;
  /** The addresses the server's owner set for reaching it (`""` or absent when unset). */
  accessIPv4?: string;
  accessIPv6?: string;
  'OS-EXT-AZ:availability_zone'?: string;
  /**
   * Its `created`, read as a time: when Nova created the server (the compute API reference: ISO 8601
   * `CCYY-MM-DDThh:mm:ss±hh:mm`, "the ±hh:mm value, if included"; Nova writes `…Z`).
   */
  createdAt?: Date;
}

/** A field that is absent (or null) or a string; a malformed answer otherwise. */
function optionalText(record: Record<string, unknown>, field: string, what: string): string | undefined {
  const value = record[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') {
    throw malformedAnswer(`${what}: its ${field} is ${JSON.stringify(value)?.slice(0, 40)}, not a string`);
  }
  return value;
}

/** The addresses of a server record: `{<network>: [{addr, version, OS-EXT-IPS:type}, ...]}`. */
function addressesOf(value: unknown, what: string): Record<string, NovaAddress[]> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isJsonObject(value)) throw malformedAnswer(`${what}: its addresses are not an object`);
  const out: Record<string, NovaAddress[]> = {};
  for (const [network, list] of Object.entries(value)) {
    if (!Array.isArray(list)) throw malformedAnswer(`${what}: its addresses on a network are not a list`);
    out[network] = list.map((entry: unknown): NovaAddress => {
      const where = `${what}: an address`;
      if (!isJsonObject(entry) || typeof entry['addr'] !== 'string') {
        throw malformedAnswer(`${where} without an addr string`);
      }
      const { version } = entry;
      if (version !== undefined && version !== null && typeof version !== 'number') {
        throw malformedAnswer(`${where}: its version is not a number`);
      }
      const type = optionalText(entry, 'OS-EXT-IPS:type', where);
      return {
        addr: entry['addr'],
        ...(typeof version === 'number' ? { version } : {}),
        ...(type === undefined ? {} : { 'OS-EXT-IPS:type': type }),
      };
    });
  }
  return out;
}

/**
 * The fields the controller reads of one server record, checked as they are read. Nova (2.1, the
 * microversion the client gets: it sends none) writes id, name, status and tenant_id as strings,
 * metadata as an object of strings (its API refuses any other value) and addresses as lists of
 * `{addr, version}` per network; a record of another shape is a malformed answer, a fault, never a
 * verdict on the server (gophercloud, which kops uses, fails to decode it too).
 */
function novaServerOf(value: unknown, what: string): NovaServer {
  if (!isJsonObject(value)) throw malformedAnswer(`${what} is not a server record`);
  const { id } = value;
  if (typeof id !== 'string' || !id) throw malformedAnswer(`${what} has no server id`);
  const where = `${what}, server ${id.slice(0, 80)}`;
  const status = optionalText(value, 'status', where);
  if (status === undefined) throw malformedAnswer(`${where} has no status`);
  const { metadata } = value;
  if (metadata !== undefined && metadata !== null && !isStringMap(metadata)) {
    throw malformedAnswer(`${where}: its metadata is not an object of strings`);
  }
  const tenantId = optionalText(value, 'tenant_id', where);
  const addresses = addressesOf(value['addresses'], where);
  const zone = optionalText(value, 'OS-EXT-AZ:availability_zone', where);
  const accessIPv4 = optionalText(value, 'accessIPv4', where);
  const accessIPv6 = optionalText(value, 'accessIPv6', where);
  // Without an offset, UTC: the API reference makes the offset optional, and Nova keeps UTC.
  const createdAt = cloudTime(value['created'], `${where}: its created`, { utcWithoutOffset: true });
  return {
    id,
    name: optionalText(value, 'name', where) ?? '',
    status,
    ...(tenantId === undefined ? {} : { tenant_id: tenantId }),
    ...(isStringMap(metadata) ? { metadata } : {}),
    ...(addresses ? { addresses } : {}),
    ...(zone === undefined ? {} : { 'OS-EXT-AZ:availability_zone': zone }),
    ...(accessIPv4 ? { accessIPv4 } : {}),
    ...(accessIPv6 ? { accessIPv6 } : {}),
    ...(createdAt ? { createdAt } : {}),
  };
}

/** Options of {@link NovaClient}. */
export interface NovaClientOptions {
  session: KeystoneSession;
  /** Deadline of one request (default 15 s: a page of 1,000 servers is a few megabytes). */
  timeoutMs?: number;
  /**
   * Servers per page. Nova caps it at `osapi_max_limit` (1,000 unless the operator changed it) and
   * then pages anyway, so asking for more is harmless.
   */
  pageSize?: number;
  /** Retries after a 429, 5xx or no answer (default 3). */
  retries?: number;
  /** First retry delay without a Retry-After; doubles per retry (default 500 ms). */
  retryDelayMs?: number;
  /** The longest Retry-After waited out; a longer one fails the call at once (default 10 s). */
  maxRetryWaitMs?: number;
  calls?: CloudCallRecorder;
  /** Aborted when the provider is closed: the calls in flight end, their retries with them. */
  signal?: AbortSignal;
}

/** Server ids are UUIDs; anything else is refused before it is put in a URL. */
const serverIdPattern = /^[0-9A-Za-z][0-9A-Za-z-]{0,63}$/;

/** Whether `id` can be a Nova server id. */
export function isServerId(id: string): boolean {
  return serverIdPattern.test(id);
}

/** Most pages one listing may take; a loop beyond it is a misbehaving API, not a large project. */
const maxPages = 1_000;

/** A Nova client on a Keystone session. */
export class NovaClient {
  readonly #session: KeystoneSession;
  readonly #options: NovaClientOptions;

  constructor(options: NovaClientOptions) {
    this.#session = options.session;
    this.#options = options;
  }

  /**
   * `GET /servers/{id}`: NotFoundError when the project has no such server, ForbiddenError (reason
   * `foreign-cluster`, final) when Nova shows one of another project, as it does to an admin token.
   */
  async getServer(id: string): Promise<NovaServer> {
    if (!isServerId(id)) throw new InvalidInputError(`"${id.slice(0, 80)}" is not a Nova server id`);
    let projectId: string | undefined;
    const body = await this.#get('servers.get', `/servers/${id}`, (token) => {
      projectId = token.projectId;
    });
    const server = novaServerOf(fieldsOf(body)['server'], `Nova's answer to servers.get ${id}`);
    if (server.id !== id) {
      // Another server than the one asked for (a proxy or cache mixing up answers): its record says
      // nothing about the asked one, and must not be answered under its id.
      throw malformedAnswer(
        `Nova answered servers.get ${id} with server ${server.id.slice(0, 80)}, not the server asked for`,
      );
    }
    if (!projectId || server.tenant_id !== projectId) {
      throw new ForbiddenError(
        `server ${server.id} is in project ${server.tenant_id || '(none)'}, not this controller's project ${projectId ?? '(the Keystone token is scoped to none)'}; it is not this cluster's`,
        { details: { instanceId: server.id, reason: 'foreign-cluster' } },
      );
    }
    return server;
  }

  /** `GET /servers/detail`, every page: all servers of the project. */
  async listServers(): Promise<NovaServer[]> {
    const servers: NovaServer[] = [];
    const limit = this.#options.pageSize ?? 1_000;
    let marker: string | undefined;
    // Every marker followed: a cycle of them (A, B, A…) ends at once instead of after maxPages pages.
    const markers = new Set<string>();
    for (let page = 0; page < maxPages; page++) {
      const query = new URLSearchParams({ limit: String(limit), ...(marker ? { marker } : {}) });
      const body = fieldsOf(await this.#get('servers.list', `/servers/detail?${query}`));
      const what = `Nova's page ${page + 1} of servers.list`;
      // Nova always answers the list, and a `servers_links` list only when a next page may follow.
      if (!Array.isArray(body['servers'])) throw malformedAnswer(`${what} has no list of servers`);
      const links = body['servers_links'] ?? [];
      if (!Array.isArray(links)) throw malformedAnswer(`${what}: its servers_links are not a list`);
      servers.push(...body['servers'].map((record: unknown) => novaServerOf(record, what)));
      const nextLink: unknown = links.find((link: unknown) => fieldsOf(link)['rel'] === 'next');
      if (nextLink === undefined) return servers;
      const next = fieldsOf(nextLink)['href'];
      if (typeof next !== 'string' || !next) throw malformedAnswer(`${what}: its next link has no href`);
      // Only the marker is taken from the link: the next page is asked of the catalog's endpoint,
      // not of whatever host a proxy wrote into the href.
      const nextMarker = new URL(next, 'http://nova.invalid').searchParams.get('marker') ?? undefined;
      if (!nextMarker || nextMarker === marker || markers.has(nextMarker)) {
        throw new UnavailableError('Nova answered a next page link without a new marker');
      }
      markers.add(nextMarker);
      marker = nextMarker;
    }
    throw new UnavailableError(`Nova listed more than ${maxPages} pages of servers`);
  }

  /**
   * One read, retried as every cloud read is (retry.ts), on a token renewed once if it expired;
   * `answeredWith` learns the token whose request Nova answered.
   */
  #get(call: string, pathAndQuery: string, answeredWith?: (token: KeystoneToken) => void): Promise<unknown> {
    const policy = {
      retries: this.#options.retries ?? 3,
      retryDelayMs: this.#options.retryDelayMs ?? 500,
      maxRetryWaitMs: this.#options.maxRetryWaitMs ?? 10_000,
      ...(this.#options.signal ? { signal: this.#options.signal } : {}),
    };
    const tokens = this.#session.forCall();
    const attempt = async (): Promise<unknown> => {
      const token = await tokens.token();
      try {
        const body = await this.#send(call, `${token.endpointOf('compute')}${pathAndQuery}`, token.token);
        answeredWith?.(token);
        return body;
      } catch (err) {
        // The token expired or was revoked under us: one new token, then the answer stands.
        if (err instanceof KopsError && err.kind === 'unauthenticated' && tokens.renew(token)) {
          return attempt();
        }
        throw err;
      }
    };
    return retryCloudCall(policy, attempt);
  }

  async #send(call: string, url: string, token: string): Promise<unknown> {
    const answer = await openstackRequest({
      call,
      url: new URL(url),
      token,
      timeoutMs: this.#options.timeoutMs ?? 15_000,
      maxBodyBytes: 64 * 1024 * 1024,
      calls: this.#options.calls ?? noCloudCalls,
      ...(this.#options.signal ? { signal: this.#options.signal } : {}),
    });
    try {
      return JSON.parse(answer.body.toString('utf8'));
    } catch {
      throw malformedAnswer(`Nova answered ${call} with a body that is not JSON`);
    }
  }
}
