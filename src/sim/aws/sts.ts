/** The simulated STS `GetCallerIdentity`: who the (already verified) signer of a request is. */
import { randomUUID } from 'node:crypto';
import type { SimCallerIdentity } from './world.ts';
import { document, el, wrap } from './xml.ts';

/** The XML namespace of STS. */
export const stsNamespace = 'https://sts.amazonaws.com/doc/2011-06-15/';

/** Handles `GetCallerIdentity` for the verified caller; returns the response document. */
export function getCallerIdentity(caller: SimCallerIdentity): string {
  return document(
    'GetCallerIdentityResponse',
    stsNamespace,
    wrap(
      'GetCallerIdentityResult',
      el('Arn', caller.arn) + el('UserId', caller.userId) + el('Account', caller.account),
    ) + wrap('ResponseMetadata', el('RequestId', randomUUID())),
  );
}
