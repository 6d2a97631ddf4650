/** Reading an HTTP request body with a size limit, shared by every server of the project and its simulators. */
import type { IncomingMessage } from 'node:http';
import { TooLargeError } from '../errors.ts';

/** Reads the whole body, refusing (TooLargeError) as soon as it exceeds `limit` bytes. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    return Promise.reject(new TooLargeError(`the request body of ${declared} bytes exceeds ${limit} bytes`));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        // Stop reading: the answer is sent and the connection closed without taking the rest.
        req.pause();
        reject(new TooLargeError(`the request body exceeds ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks, size)));
    req.once('error', reject);
  });
}
