/**
 * X.509 pieces (RFC 5280): distinguished names, the extensions this CA writes and reads, and
 * certificate assembly and parsing. Encoding is done once per piece so that issuing a certificate
 * is mostly concatenation plus one signature.
 */
import { type KeyObject, sign } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import { type CryptoPool, sharedCryptoPool } from './crypto-pool.ts';
import {
  bitString,
  boolean,
  bytesOf,
  childrenOf,
  contentOf,
  type DerNode,
  expectTag,
  explicit,
  fieldsOf,
  implicitPrimitive,
  namedBits,
  octetString,
  oid,
  readBitStringBytes,
  readBoolean,
  readNamedBits,
  readNode,
  readOid,
  readRoot,
  readString,
  readTime,
  sequence,
  set,
  smallInteger,
  Tag,
  time,
  utf8String,
} from './der.ts';
import { incarnationOid, readIncarnationId } from './incarnation.ts';
import { bytesToIp, ipToBytes } from './ip.ts';
import { publicKeyFromSpki, type SignatureScheme } from './keys.ts';

/** A subject or issuer: the attributes this project reads and writes. */
export interface Subject {
  commonName: string;
  organizations: readonly string[];
}

/** A parsed distinguished name: every attribute in order, plus the two Kubernetes reads. */
export interface ParsedName {
  attributes: { type: string; value: string }[];
  commonName: string | undefined;
  organizations: string[];
  /** OpenSSL-style one-line form: "O=system:nodes, CN=system:node:a". */
  text: string;
}

const attributeNames: Record<string, string> = {
  '2.5.4.3': 'CN',
  '2.5.4.5': 'serialNumber',
  '2.5.4.6': 'C',
  '2.5.4.7': 'L',
  '2.5.4.8': 'ST',
  '2.5.4.10': 'O',
  '2.5.4.11': 'OU',
  '1.2.840.113549.1.9.1': 'emailAddress',
};

function relativeName(type: string, value: string): Buffer {
  return set(sequence(oid(type), utf8String(value)));
}

// Organisations come from the profile table (system:nodes), so their encodings are few and reused.
const organizationNames = new Map<string, Buffer>();

function organizationName(organization: string): Buffer {
  let encoded = organizationNames.get(organization);
  if (!encoded) {
    encoded = relativeName('2.5.4.10', organization);
    if (organizationNames.size < 64) organizationNames.set(organization, encoded);
  }
  return encoded;
}

/** Encodes a name as Go does for Kubernetes identities: each O, then CN, one attribute per RDN. */
export function encodeName(subject: Subject): Buffer {
  return sequence(
    ...subject.organizations.map(organizationName),
    ...(subject.commonName ? [relativeName('2.5.4.3', subject.commonName)] : []),
  );
}

/** Decodes a Name node. */
export function parseName(node: DerNode): ParsedName {
  const attributes: { type: string; value: string }[] = [];
  for (const rdn of childrenOf(expectTag(node, Tag.sequence, 'name'))) {
    for (const attribute of childrenOf(expectTag(rdn, Tag.set, 'relative distinguished name'))) {
      const [typeNode, valueNode] = fieldsOf(
        expectTag(attribute, Tag.sequence, 'name attribute'),
        2,
        'name attribute',
      );
      const typeOid = readOid(expectTag(typeNode, Tag.oid, 'attribute type'));
      if (!valueNode) throw new InvalidInputError('malformed DER: name attribute without a value');
      attributes.push({ type: attributeNames[typeOid] ?? typeOid, value: readString(valueNode) });
    }
  }
  return {
    attributes,
    commonName: attributes.find((a) => a.type === 'CN')?.value,
    organizations: attributes.filter((a) => a.type === 'O').map((a) => a.value),
    text: attributes.map((a) => `${a.type}=${a.value}`).join(', '),
  };
}

/** Key usage bits, by name, in RFC 5280 bit order. */
export const keyUsageBits = [
  'digitalSignature',
  'contentCommitment',
  'keyEncipherment',
  'dataEncipherment',
  'keyAgreement',
  'keyCertSign',
  'cRLSign',
  'encipherOnly',
  'decipherOnly',
] as const;
export type KeyUsage = (typeof keyUsageBits)[number];

/** Extended key usages by OID. */
export const extendedKeyUsages: Record<string, string> = {
  '1.3.6.1.5.5.7.3.1': 'serverAuth',
  '1.3.6.1.5.5.7.3.2': 'clientAuth',
  '1.3.6.1.5.5.7.3.3': 'codeSigning',
  '1.3.6.1.5.5.7.3.4': 'emailProtection',
  '1.3.6.1.5.5.7.3.8': 'timeStamping',
  '1.3.6.1.5.5.7.3.9': 'OCSPSigning',
  '2.5.29.37.0': 'anyExtendedKeyUsage',
};
const extendedKeyUsageOids = Object.fromEntries(Object.entries(extendedKeyUsages).map(([k, v]) => [v, k]));

const ext = {
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  authorityKeyIdentifier: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
} as const;

function extension(type: string, critical: boolean, value: Buffer): Buffer {
  return critical
    ? sequence(oid(type), boolean(true), octetString(value))
    : sequence(oid(type), octetString(value));
}

/** basicConstraints, always critical; `pathLength` only for CAs. */
export function basicConstraintsExtension(ca: boolean, pathLength?: number): Buffer {
  const fields = ca ? [boolean(true), ...(pathLength === undefined ? [] : [smallInteger(pathLength)])] : [];
  return extension(ext.basicConstraints, true, sequence(...fields));
}

/** keyUsage, always critical. */
export function keyUsageExtension(usages: readonly KeyUsage[]): Buffer {
  return extension(ext.keyUsage, true, namedBits(usages.map((u) => keyUsageBits.indexOf(u))));
}

/** extKeyUsage by name ("serverAuth", "clientAuth"). */
export function extKeyUsageExtension(usages: readonly string[]): Buffer {
  return extension(
    ext.extKeyUsage,
    false,
    sequence(...usages.map((u) => oid(extendedKeyUsageOids[u] as string))),
  );
}

/** subjectKeyIdentifier. */
export function subjectKeyIdentifierExtension(keyIdentifier: Buffer): Buffer {
  return extension(ext.subjectKeyIdentifier, false, octetString(keyIdentifier));
}

/** authorityKeyIdentifier with the issuer's key identifier only. */
export function authorityKeyIdentifierExtension(keyIdentifier: Buffer): Buffer {
  return extension(ext.authorityKeyIdentifier, false, sequence(implicitPrimitive(0, keyIdentifier)));
}

/** The names a certificate is valid for. */
export interface AltNames {
  dnsNames: readonly string[];
  ipAddresses: readonly string[];
}

/** subjectAltName with DNS names and IP addresses (critical when the subject is empty, per RFC 5280). */
export function subjectAltNameExtension(names: AltNames, subjectEmpty = false): Buffer {
  return extension(
    ext.subjectAltName,
    subjectEmpty,
    sequence(
      ...names.dnsNames.map((d) => implicitPrimitive(2, Buffer.from(d, 'ascii'))),
      ...names.ipAddresses.map((ip) => implicitPrimitive(7, ipToBytes(ip))),
    ),
  );
}

/** The extensions this project understands, decoded; anything else is listed under `other`. */
export interface ParsedExtensions {
  basicConstraints?: { ca: boolean; pathLength?: number };
  keyUsage?: KeyUsage[];
  extKeyUsage?: string[];
  subjectAltName?: {
    dnsNames: string[];
    ipAddresses: string[];
    emails: string[];
    uris: string[];
    other: number;
  };
  subjectKeyIdentifier?: Buffer;
  authorityKeyIdentifier?: Buffer;
  /** The machine a node certificate was issued to (src/pki/incarnation.ts). */
  incarnationId?: string;
  /** Extensions not decoded here, with their criticality. */
  other: { oid: string; critical: boolean }[];
  /** OIDs of the extensions marked critical. */
  critical: string[];
}

function parseSubjectAltName(value: DerNode): NonNullable<ParsedExtensions['subjectAltName']> {
  const out = {
    dnsNames: [] as string[],
    ipAddresses: [] as string[],
    emails: [] as string[],
    uris: [] as string[],
    other: 0,
  };
  for (const name of childrenOf(expectTag(value, Tag.sequence, 'subjectAltName'))) {
    const content = contentOf(name);
    if (name.tag === 0x82) out.dnsNames.push(content.toString('latin1'));
    else if (name.tag === 0x87) out.ipAddresses.push(bytesToIp(content));
    else if (name.tag === 0x81) out.emails.push(content.toString('latin1'));
    else if (name.tag === 0x86) out.uris.push(content.toString('latin1'));
    else out.other++;
  }
  return out;
}

/** Decodes a SEQUENCE OF Extension. Duplicate extensions are malformed (RFC 5280 §4.2). */
export function parseExtensions(node: DerNode): ParsedExtensions {
  const out: ParsedExtensions = { other: [], critical: [] };
  const seen = new Set<string>();
  for (const extensionNode of childrenOf(expectTag(node, Tag.sequence, 'extensions'))) {
    const parts = fieldsOf(expectTag(extensionNode, Tag.sequence, 'extension'), 3, 'extension');
    const type = readOid(expectTag(parts[0], Tag.oid, 'extension id'));
    if (seen.has(type)) throw new InvalidInputError(`malformed DER: extension ${type} appears twice`);
    seen.add(type);
    const critical = parts.length === 3 ? readBoolean(parts[1] as DerNode) : false;
    if (critical) out.critical.push(type);
    const valueBytes = contentOf(expectTag(parts[parts.length - 1], Tag.octetString, 'extension value'));
    const value = readRoot(valueBytes);
    switch (type) {
      case ext.basicConstraints: {
        const fields = childrenOf(expectTag(value, Tag.sequence, 'basicConstraints'));
        const first = fields[0];
        const ca = first?.tag === Tag.boolean ? readBoolean(first) : false;
        const lengthNode = fields.find((f) => f.tag === Tag.integer);
        const lengthBytes = lengthNode ? contentOf(lengthNode) : undefined;
        if (lengthBytes && (lengthBytes.length === 0 || lengthBytes.length > 4)) {
          throw new InvalidInputError('malformed DER: basicConstraints path length');
        }
        out.basicConstraints = lengthBytes
          ? { ca, pathLength: lengthBytes.readUIntBE(0, lengthBytes.length) }
          : { ca };
        break;
      }
      case ext.keyUsage:
        out.keyUsage = readNamedBits(value).map((bit) => keyUsageBits[bit] ?? (`bit${bit}` as KeyUsage));
        break;
      case ext.extKeyUsage:
        out.extKeyUsage = childrenOf(expectTag(value, Tag.sequence, 'extKeyUsage')).map((n) => {
          const id = readOid(n);
          return extendedKeyUsages[id] ?? id;
        });
        break;
      case ext.subjectAltName:
        out.subjectAltName = parseSubjectAltName(value);
        break;
      case ext.subjectKeyIdentifier:
        out.subjectKeyIdentifier = Buffer.from(
          contentOf(expectTag(value, Tag.octetString, 'subjectKeyIdentifier')),
        );
        break;
      case ext.authorityKeyIdentifier: {
        const keyId = childrenOf(expectTag(value, Tag.sequence, 'authorityKeyIdentifier')).find(
          (n) => n.tag === 0x80,
        );
        if (keyId) out.authorityKeyIdentifier = Buffer.from(contentOf(keyId));
        break;
      }
      case incarnationOid:
        out.incarnationId = readIncarnationId(value);
        break;
      default:
        out.other.push({ oid: type, critical });
    }
  }
  return out;
}

/** Everything that goes into a certificate, already encoded where it can be. */
export interface CertificateTemplate {
  serial: Buffer;
  issuer: Buffer;
  subject: Buffer;
  notBefore: Date;
  notAfter: Date;
  spki: Buffer;
  extensions: readonly Buffer[];
}

const version3 = explicit(0, smallInteger(2));

/** A certificate ready to sign: the DER to sign, and how to complete it with the signature. */
export interface UnsignedCertificate {
  tbs: Buffer;
  /** The certificate's DER with `signature` over `tbs`. */
  complete(signature: Buffer): Buffer;
}

/** Assembles a certificate to be signed with `scheme`. `serial` is an encoded INTEGER. */
export function unsignedCertificate(
  template: CertificateTemplate,
  scheme: SignatureScheme,
): UnsignedCertificate {
  const tbs = sequence(
    version3,
    template.serial,
    scheme.algorithmIdentifier,
    template.issuer,
    sequence(time(template.notBefore), time(template.notAfter)),
    template.subject,
    template.spki,
    explicit(3, sequence(...template.extensions)),
  );
  return { tbs, complete: (signature) => sequence(tbs, scheme.algorithmIdentifier, bitString(signature)) };
}

/** Assembles and signs a certificate; returns its DER. `serial` is an encoded INTEGER. */
export function signCertificate(
  template: CertificateTemplate,
  scheme: SignatureScheme,
  key: KeyObject,
): Buffer {
  const unsigned = unsignedCertificate(template, scheme);
  return unsigned.complete(sign(scheme.hash, unsigned.tbs, key));
}

/**
 * Signs on the crypto pool's threads (crypto-pool.ts): the event loop spends a fraction of the
 * signature's CPU time, so a server issuing many certificates uses every core. Resolves with the
 * signature.
 */
export function signAsync(
  scheme: SignatureScheme,
  data: Buffer,
  key: KeyObject,
  pool: CryptoPool = sharedCryptoPool(),
): Promise<Buffer> {
  return pool.sign(scheme.hash, data, key);
}

/** A certificate, decoded. */
export interface ParsedCertificate {
  der: Buffer;
  /** The serial in hex, without the sign byte DER adds (as openssl prints it). */
  serialHex: string;
  /** The serial as a decimal string (kops uses it as the keypair id). */
  serialDecimal: string;
  issuer: ParsedName;
  subject: ParsedName;
  /** Exact DER of the subject name, for use as the issuer of certificates this one signs. */
  subjectDer: Buffer;
  notBefore: Date;
  notAfter: Date;
  spki: Buffer;
  publicKey: KeyObject;
  signatureAlgorithm: string;
  extensions: ParsedExtensions;
}

/** Decodes a DER certificate; throws InvalidInputError with the reason if it is malformed. */
export function parseCertificate(der: Buffer): ParsedCertificate {
  const [tbsNode, algorithmNode, signatureNode] = fieldsOf(
    expectTag(readRoot(der), Tag.sequence, 'certificate'),
    3,
    'certificate',
  );
  // Not verified here (the caller checks the issuer), but a certificate without it is none: OpenSSL
  // would refuse it later, out of the reach of a typed error.
  readBitStringBytes(expectTag(signatureNode, Tag.bitString, 'signature'));
  const tbs = childrenOf(expectTag(tbsNode, Tag.sequence, 'tbsCertificate'));
  let index = tbs[0]?.tag === 0xa0 ? 1 : 0;
  const serialNode = expectTag(tbs[index++], Tag.integer, 'serial number');
  index++; // the inner signature AlgorithmIdentifier repeats the outer one
  const issuerNode = expectTag(tbs[index++], Tag.sequence, 'issuer');
  const [notBeforeNode, notAfterNode] = fieldsOf(
    expectTag(tbs[index++], Tag.sequence, 'validity'),
    2,
    'validity',
  );
  const subjectNode = expectTag(tbs[index++], Tag.sequence, 'subject');
  const spkiNode = expectTag(tbs[index++], Tag.sequence, 'subjectPublicKeyInfo');
  const extensionsNode = tbs.slice(index).find((n) => n.tag === 0xa3);
  const serial = contentOf(serialNode);
  const spki = Buffer.from(bytesOf(spkiNode));
  const [algorithmOid] = childrenOf(expectTag(algorithmNode, Tag.sequence, 'signature algorithm'));
  return {
    der,
    serialHex: serial.toString('hex').replace(/^(00)+(?=.)/, ''),
    serialDecimal: BigInt(`0x${serial.toString('hex') || '0'}`).toString(10),
    issuer: parseName(issuerNode),
    subject: parseName(subjectNode),
    subjectDer: Buffer.from(bytesOf(subjectNode)),
    notBefore: readTime(notBeforeNode, 'notBefore'),
    notAfter: readTime(notAfterNode, 'notAfter'),
    spki,
    publicKey: publicKeyFromSpki(spki),
    signatureAlgorithm: readOid(algorithmOid as DerNode),
    extensions: extensionsNode
      ? parseExtensions(readNode(extensionsNode.buffer, extensionsNode.contentStart, extensionsNode.end))
      : { other: [], critical: [] },
  };
}
