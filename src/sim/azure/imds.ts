/**
 * The simulated Azure Instance Metadata Service, one per VM under `/vms/<vm name>` (the real one
 * knows its caller by the link-local hop; loopback cannot, so the path says which VM asks):
 * `metadata/instance` (compute and network), `metadata/attested/document?nonce=` (PKCS#7 signed by
 * the simulated metadata signer) and `metadata/identity/oauth2/token` (a managed-identity token the
 * simulated ARM accepts). As IMDS does, it wants `Metadata: true`, an `api-version`, no
 * `X-Forwarded-For`, and a nonce of at most 32 characters.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { formatAttestedTime } from '../../cloud/azure/attested-document.ts';
import { type AttestationSigner, type EmbeddedCertificates, signAttestedContent } from './attestation.ts';
import type { AzureWorld, SimVm } from './world.ts';

/** An IMDS error: status and the body IMDS sends. */
export class ImdsError extends Error {
  readonly status: number;
  readonly body: Record<string, string>;

  constructor(status: number, body: Record<string, string>) {
    super(body['error_description'] ?? body['error'] ?? 'imds error');
    this.status = status;
    this.body = body;
  }
}

/** How attested documents are made; tests change it to make stale or rogue documents. */
export interface AttestationSettings {
  signer: AttestationSigner;
  embed: EmbeddedCertificates;
  /** The clock the document's createdOn comes from. */
  now: () => Date;
  /** Lifetime IMDS writes into expiresOn (Azure: 6 hours). */
  lifetimeMs: number;
}

/** Issued managed-identity tokens. */
export class ImdsTokens {
  readonly #issued = new Set<string>();

  issue(): {
    access_token: string;
    expires_in: string;
    expires_on: string;
    resource: string;
    token_type: string;
  } {
    const token = randomBytes(24).toString('base64url');
    this.#issued.add(token);
    const expiresIn = 3600;
    return {
      access_token: token,
      expires_in: String(expiresIn),
      expires_on: String(Math.floor(Date.now() / 1000) + expiresIn),
      resource: 'https://management.azure.com/',
      token_type: 'Bearer',
    };
  }

  valid(token: string): boolean {
    return this.#issued.has(token);
  }
}

function instanceCompute(world: AzureWorld, vm: SimVm) {
  return {
    azEnvironment: 'AzurePublicCloud',
    location: world.location,
    name: vm.name,
    osProfile: { computerName: vm.computerName, adminUsername: 'kops' },
    resourceGroupName: world.resourceGroup,
    resourceId: world.resourceId(vm),
    subscriptionId: world.subscriptionId,
    tagsList: Object.entries(vm.tags).map(([name, value]) => ({ name, value })),
    vmId: vm.vmId,
    vmScaleSetName: vm.scaleSet ?? '',
  };
}

/**
 * A request path without its trailing slash: IMDS answers both spellings, and the Azure SDK's
 * managed-identity client (MSAL) asks for `…/oauth2/token/`.
 */
function withoutTrailingSlash(path: string): string {
  return path.replace(/\/$/, '');
}

/** The IMDS operation a path names (`imds.instance`, …), for call records and faults. */
export function imdsOperation(path: string): string | undefined {
  const rest = withoutTrailingSlash(/^\/vms\/[^/]+(\/metadata\/.*)$/.exec(path)?.[1] ?? path);
  if (rest === '/metadata/instance' || rest === '/metadata/instance/compute') return 'imds.instance';
  if (rest === '/metadata/attested/document') return 'imds.attested';
  if (rest === '/metadata/identity/oauth2/token') return 'imds.token';
  return undefined;
}

/** Answers one IMDS request; throws ImdsError for what IMDS refuses. */
export async function serveImds(
  world: AzureWorld,
  tokens: ImdsTokens,
  attestation: AttestationSettings,
  req: IncomingMessage,
  url: URL,
): Promise<unknown> {
  if (req.headers['metadata']?.toString().toLowerCase() !== 'true') {
    throw new ImdsError(400, {
      error: 'bad_request',
      error_description: 'Required metadata header not specified',
    });
  }
  if (req.headers['x-forwarded-for'] !== undefined) {
    throw new ImdsError(400, {
      error: 'bad_request',
      error_description: 'Request contains X-Forwarded-For header',
    });
  }
  if (!url.searchParams.get('api-version')) {
    throw new ImdsError(400, { error: 'Bad request. api-version was not specified in the request.' });
  }
  const match = /^\/vms\/([^/]+)(\/metadata\/.*)$/.exec(url.pathname);
  const rest = withoutTrailingSlash(match?.[2] ?? url.pathname);
  if (rest === '/metadata/identity/oauth2/token') return tokens.issue();
  const vm = match ? world.vms.get(decodeURIComponent(match[1] as string).toLowerCase()) : undefined;
  if (!vm) throw new ImdsError(404, { error: 'Not found' });
  switch (rest) {
    case '/metadata/instance':
      return {
        compute: instanceCompute(world, vm),
        network: {
          interface: [
            { ipv4: { ipAddress: [{ privateIpAddress: vm.privateIp, publicIpAddress: vm.publicIp ?? '' }] } },
          ],
        },
      };
    case '/metadata/instance/compute':
      return instanceCompute(world, vm);
    case '/metadata/attested/document': {
      const nonce = url.searchParams.get('nonce') ?? String(Date.now()).slice(-10);
      if (nonce.length > 32) {
        throw new ImdsError(400, { error: 'Bad request. Nonce must be 32 characters or fewer.' });
      }
      const created = attestation.now();
      const content = {
        licenseType: '',
        nonce,
        plan: { name: '', product: '', publisher: '' },
        sku: '',
        subscriptionId: world.subscriptionId,
        timeStamp: {
          createdOn: formatAttestedTime(created),
          expiresOn: formatAttestedTime(new Date(created.getTime() + attestation.lifetimeMs)),
        },
        vmId: vm.vmId,
      };
      return {
        encoding: 'pkcs7',
        signature: await signAttestedContent(content, attestation.signer, attestation.embed),
      };
    }
    default:
      throw new ImdsError(404, { error: 'Not found' });
  }
}
