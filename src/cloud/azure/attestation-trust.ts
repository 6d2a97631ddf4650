/**
 * The attested-document verifier the `azure` policy runs with: trusted roots (default: Node's
 * bundled Mozilla store, which holds the roots Azure's metadata signer chains to — DigiCert Global
 * Root G2 and Microsoft RSA Root Certificate Authority 2017 — as kops trusts the system pool),
 * intermediates from the configuration, the missing ones fetched from Microsoft's PKI repository.
 */
import { rootCertificates } from 'node:tls';
import type { CloudCallRecorder } from '../metrics.ts';
import { AttestedDocumentVerifier } from './attested-document.ts';
import { AiaIntermediates } from './intermediates.ts';

/** What the operator may set. */
export interface AzureAttestationTrust {
  /** PEM bundle of the roots to trust instead of Node's store. */
  rootsPem?: string;
  /** PEM bundle of intermediates to use before fetching any. */
  intermediatesPem?: string;
  /** Microsoft's PKI repository (default https://www.microsoft.com/pkiops/certs). */
  pkiUrl?: string;
  /** How old a document may be (default 5 minutes, plus 2 minutes of clock skew). */
  maxAgeMs?: number;
  /** Where the repository's downloads are counted (call `pki.certificate`; default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

/** Builds the verifier. */
export function azureAttestationVerifier(trust: AzureAttestationTrust = {}): AttestedDocumentVerifier {
  return new AttestedDocumentVerifier({
    roots: trust.rootsPem ? [trust.rootsPem] : rootCertificates,
    ...(trust.intermediatesPem ? { intermediates: [trust.intermediatesPem] } : {}),
    fetchIntermediates: new AiaIntermediates({
      ...(trust.pkiUrl ? { baseUrl: trust.pkiUrl } : {}),
      ...(trust.cloudCalls ? { cloudCalls: trust.cloudCalls } : {}),
    }),
    ...(trust.maxAgeMs === undefined ? {} : { maxAgeMs: trust.maxAgeMs }),
  });
}
