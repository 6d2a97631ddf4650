/**
 * Builds PKCS#10 certificate signing requests (RFC 2986) on the machine that holds the key, so the
 * private key never has to leave it: the node-side `join` client and tests that need real requests.
 */
import { type KeyObject, sign } from 'node:crypto';
import { bitString, oid, sequence, set, smallInteger, tlv } from './der.ts';
import { signatureSchemeFor, spkiOf } from './keys.ts';
import { encodePem } from './pem.ts';
import { encodeName, type Subject, subjectAltNameExtension } from './x509.ts';

/** What a request asks for; names are requested in a subjectAltName extension when given. */
export interface CsrContent {
  subject: Subject;
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
}

const extensionRequestOid = '1.2.840.113549.1.9.14';

function attributesOf(content: CsrContent): Buffer {
  const dnsNames = content.dnsNames ?? [];
  const ipAddresses = content.ipAddresses ?? [];
  if (!dnsNames.length && !ipAddresses.length) return tlv(0xa0, Buffer.alloc(0));
  const extensions = sequence(subjectAltNameExtension({ dnsNames, ipAddresses }));
  return tlv(0xa0, sequence(oid(extensionRequestOid), set(extensions)));
}

/**
 * The DER request made of an encoded certificationRequestInfo signed with `key`; the tests build
 * requests with unusual contents through it.
 */
export function signRequestInfo(key: KeyObject, info: Buffer): Buffer {
  const scheme = signatureSchemeFor(key);
  return sequence(info, scheme.algorithmIdentifier, bitString(sign(scheme.hash, info, key)));
}

/** A signed PKCS#10 request for `content` with `key` (the private key), as PEM. */
export function buildCsrPem(key: KeyObject, content: CsrContent): string {
  const info = sequence(smallInteger(0), encodeName(content.subject), spkiOf(key), attributesOf(content));
  return encodePem('CERTIFICATE REQUEST', signRequestInfo(key, info));
}
