/**
 * The incarnation extension: a node certificate names the machine it was issued to — the id its
 * cloud never gives another machine (an AWS instance id, a GCE instance's numeric id, ...: see
 * `Incarnation` in src/cloud/types.ts) — so that a renewal can tell the machine that now bears the
 * node name from an earlier one of the same name (an instance recreated under its name, an IP-based
 * name whose address another instance took). A private, non-critical extension: verifiers that do
 * not know it ignore it (RFC 5280 §4.2), and nothing else in a certificate changes.
 *
 *   incarnation EXTENSION ::= { OID incarnationOid, critical FALSE, value UTF8String (the id) }
 *
 * Why this OID and not `2.25.<UUID as one decimal integer>` (X.667): Go — the API server, the kubelet,
 * every client-go program — reads an extension's OID with cryptobyte, which refuses any arc of 2^31 or
 * more ("x509: malformed extension OID field") and with it the whole certificate, so no Kubernetes
 * component could load a certificate with a 2.25 extension. Microsoft's arc for GUID-derived OIDs,
 * 1.2.840.113556.1.8000.2554, takes a GUID split into 16- and 24-bit arcs that every parser reads:
 * GUID 68edd11f-7b41-4e5e-a53a-a450fa2de19d (made once for this project) is
 * 1.2.840.113556.1.8000.2554.26861.53535.31553.20062.42298.10768634.3006877, and the extension is
 * arc 1 under it.
 */
import { InvalidInputError } from '../errors.ts';
import { contentOf, type DerNode, octetString, oid, sequence, Tag, utf8String } from './der.ts';

/** This project's OID arc (GUID 68edd11f-7b41-4e5e-a53a-a450fa2de19d under Microsoft's GUID arc). */
const projectArc = '1.2.840.113556.1.8000.2554.26861.53535.31553.20062.42298.10768634.3006877';

/** The incarnation extension's OID. */
export const incarnationOid = `${projectArc}.1`;

/**
 * The longest id carried. The ids of the clouds are far shorter (an Azure vmId, a UUID, is 36
 * characters); the bound keeps a certificate's size and a log line's in check.
 */
const maxIdLength = 128;

/** Why `id` cannot be an incarnation id, or undefined: 1–128 visible ASCII characters. */
function idProblem(id: string): string | undefined {
  if (id.length === 0) return 'it is empty';
  if (id.length > maxIdLength) return `it is longer than ${maxIdLength} characters`;
  // Visible ASCII only: the id appears in audit records and messages as it is.
  if (!/^[\x21-\x7e]+$/.test(id)) return 'it has a character other than visible ASCII';
  return undefined;
}

/**
 * The extension naming incarnation `id`, encoded. The id comes from the cloud's record of the
 * machine; one that could not be read back is refused (InvalidInputError) rather than written.
 */
export function incarnationExtension(id: string): Buffer {
  const problem = idProblem(id);
  if (problem) throw new InvalidInputError(`incarnation id ${JSON.stringify(id.slice(0, 64))}: ${problem}`);
  return sequence(oid(incarnationOid), octetString(utf8String(id)));
}

/**
 * The incarnation id an extension value holds (the DER inside its OCTET STRING). Anything but a
 * UTF8String of a valid id is malformed (InvalidInputError): only this CA writes the extension, so a
 * value it would not have written is no certificate of it.
 */
export function readIncarnationId(value: DerNode): string {
  if (value.tag !== Tag.utf8String) {
    throw new InvalidInputError(
      `malformed incarnation extension: the value has tag 0x${value.tag.toString(16)}, not a UTF8String`,
    );
  }
  let id: string;
  try {
    id = new TextDecoder('utf-8', { fatal: true }).decode(contentOf(value));
  } catch {
    throw new InvalidInputError('malformed incarnation extension: the value is not UTF-8');
  }
  const problem = idProblem(id);
  if (problem) throw new InvalidInputError(`malformed incarnation extension: ${problem}`);
  return id;
}
