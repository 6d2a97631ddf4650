/**
 * `kops-controller token create|list|delete`: bootstrap tokens in the kubeadm format, stored as
 * Secrets in kube-system. The secret half is printed once, at creation, and never again.
 */
import type { CoreV1Api } from '@kubernetes/client-node';
import { Command } from 'commander';
import {
  apiTokenSource,
  isExpired,
  newBootstrapToken,
  type StoredToken,
  storedTokenOf,
  type TokenUsage,
  tokenNamespace,
  tokenSecretOf,
  tokenSecretPrefix,
  tokenUsages,
} from '../bootstrap/tokens.ts';
import { InvalidInputError, NotFoundError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { loadKubeConfig, makeClients } from '../kube/client.ts';
import { isTokenId, parseToken } from '../protocol/bootstrap-token.ts';
import { commandLogger, durationFlag, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface CreateOptions extends KubeOptions {
  ttl: string;
  description?: string;
  usages: string;
  groups?: string;
  output: string;
}

interface ListOptions extends KubeOptions {
  output: string;
}

function coreApi(options: KubeOptions): CoreV1Api {
  return makeClients(loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context }).kubeConfig)
    .core;
}

const commaList = (value: string | undefined): string[] =>
  (value ?? '')
    .split(',')
    .map((v) => v.trim())
    .filter((v) => v !== '');

function parseUsages(value: string): TokenUsage[] {
  const usages = commaList(value);
  for (const usage of usages) {
    if (!(tokenUsages as readonly string[]).includes(usage)) {
      throw new InvalidInputError(`unknown token usage "${usage}": use ${tokenUsages.join(', ')}`);
    }
  }
  return usages as TokenUsage[];
}

/** Time left, as kubeadm shows it: hours and minutes, or minutes and seconds under an hour. */
function ttlText(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  const [h, m, s] = [Math.floor(seconds / 3600), Math.floor((seconds % 3600) / 60), seconds % 60];
  return h > 0 ? `${h}h${m}m` : `${m}m${s}s`;
}

const rfc3339 = (date: Date) => date.toISOString().replace(/\.\d{3}Z$/, 'Z');

/** How a token's expiry is shown: RFC 3339, "never", or "invalid" for an expiration that does not parse. */
function expiresText(token: StoredToken): string {
  if (!token.expires) return 'never';
  return Number.isNaN(token.expires.getTime()) ? 'invalid (treated as expired)' : rfc3339(token.expires);
}

function createCommand(): Command {
  return withKubeOptions(new Command('create'))
    .description('create a bootstrap token and print it (the only time its secret is shown)')
    .option('--ttl <duration>', 'lifetime, e.g. 30m, 24h; 0 for a token that never expires', '24h')
    .option('--description <text>', 'what the token is for, shown by `token list`')
    .option('--usages <list>', `comma-separated usages: ${tokenUsages.join(', ')}`, tokenUsages.join(','))
    .option('--groups <list>', 'extra groups, each system:bootstrappers:..., comma-separated')
    .addOption(outputOption())
    .action(async (options: CreateOptions, command: Command) => {
      const token = newBootstrapToken({
        ttlMs: durationFlag('--ttl', options.ttl),
        description: options.description,
        usages: parseUsages(options.usages),
        extraGroups: commaList(options.groups),
      });
      const core = coreApi(options);
      try {
        await core.createNamespacedSecret({ namespace: tokenNamespace, body: tokenSecretOf(token) });
      } catch (err) {
        throw fromApiException(err, `create secret ${tokenNamespace}/${tokenSecretPrefix}${token.id}`);
      }
      commandLogger(command).info({ tokenId: token.id }, 'created bootstrap token');
      const value = `${token.id}.${token.secret}`;
      const data = {
        token: value,
        id: token.id,
        expires: token.expires ? rfc3339(token.expires) : null,
        usages: tokenUsages.filter((u) => token.usages[u]),
        groups: token.extraGroups,
        description: token.description ?? '',
      };
      writeOut(command, options.output === 'table' ? `${value}\n` : formatOutput(options.output, data));
    });
}

function listCommand(): Command {
  return withKubeOptions(new Command('list'))
    .description('list bootstrap tokens: id, expiry, usages, description (never the secret)')
    .addOption(outputOption())
    .action(async (options: ListOptions, command: Command) => {
      const now = new Date();
      const tokens = (await apiTokenSource(coreApi(options)).list())
        .flatMap((s) => storedTokenOf(s) ?? [])
        .sort((a, b) => a.id.localeCompare(b.id));
      const rows = tokens.map((t) => ({
        id: t.id,
        expires: expiresText(t),
        ttl: t.expires && !isExpired(t, now) ? ttlText(t.expires.getTime() - now.getTime()) : null,
        expired: isExpired(t, now),
        usages: tokenUsages.filter((u) => t.usages[u]),
        groups: t.extraGroups,
        description: t.description ?? '',
      }));
      writeOut(
        command,
        formatOutput(options.output, rows, {
          rows,
          columns: [
            { header: 'id', value: (r) => r.id },
            { header: 'ttl', value: (r) => (r.expired ? '<expired>' : (r.ttl ?? '<forever>')) },
            { header: 'expires', value: (r) => r.expires },
            { header: 'usages', value: (r) => r.usages.join(',') },
            { header: 'description', value: (r) => r.description },
            { header: 'extra groups', value: (r) => r.groups.join(',') },
          ],
        }),
      );
    });
}

function deleteCommand(): Command {
  return withKubeOptions(new Command('delete'))
    .description('delete a bootstrap token (nodes can no longer use it to join)')
    .argument('<id>', 'the token id, or the whole token ID.SECRET')
    .action(async (idOrToken: string, options: KubeOptions, command: Command) => {
      const id = parseToken(idOrToken)?.id ?? idOrToken;
      if (!isTokenId(id)) {
        throw new InvalidInputError(`"${idOrToken}" is not a token id ([a-z0-9]{6}) or token (ID.SECRET)`);
      }
      const name = tokenSecretPrefix + id;
      try {
        await coreApi(options).deleteNamespacedSecret({ name, namespace: tokenNamespace });
      } catch (err) {
        if (httpStatusOfApiError(err) === 404) {
          throw new NotFoundError(`no bootstrap token with id ${id}; see \`kops-controller token list\``);
        }
        throw fromApiException(err, `delete secret ${tokenNamespace}/${name}`);
      }
      writeOut(command, `bootstrap token ${id} deleted\n`);
    });
}

/** The `token` command. */
export function tokenCommand(): Command {
  return new Command('token')
    .description('bootstrap tokens (kubeadm format, Secrets in kube-system): create, list, delete')
    .addCommand(createCommand())
    .addCommand(listCommand())
    .addCommand(deleteCommand());
}
