/** kops nodeup's side of `/bootstrap`, for the tests that play it: its body and its POST. */
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { request } from 'node:https';
import { kopsApiVersion } from '../bootstrap/kops-handler.ts';
import { spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';

/**
 * nodeup's body asking for a kubelet certificate: kops' apiVersion, the key as the `RSA PUBLIC KEY`
 * PEM nodeup sends (a fresh RSA key unless `key` is given), no keypair ids.
 */
export function nodeupBody(key?: KeyObject): string {
  const kubelet = key ?? generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  return JSON.stringify({
    apiVersion: kopsApiVersion,
    certs: { kubelet: encodePem('RSA PUBLIC KEY', spkiOf(kubelet)) },
    keypairIDs: {},
  });
}

/**
 * POSTs `body` to `<server>/bootstrap` as nodeup does, with `authorization`; `ca` is the PEM the
 * server's certificate is checked against (none: not checked, for tests about the answer only);
 * `localAddress` is the loopback address the node posts from (many nodes need many sources: the
 * server caps connections per source).
 */
export function postNodeup(
  server: string,
  body: string,
  authorization: string,
  ca?: string,
  localAddress?: string,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${server}/bootstrap`,
      {
        method: 'POST',
        ...(ca === undefined ? { rejectUnauthorized: false } : { ca }),
        ...(localAddress === undefined ? {} : { localAddress, agent: false }),
        headers: { 'content-type': 'application/json', authorization },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
