/** Reading an HTTP request body with a size limit, shared by every server of the project and its simulators. */
import type { IncomingMessage } from 'node:http';
import { InvalidInputError, TooLargeError } from '../errors.ts';

/**
 * Reads the whole body, refusing (TooLargeError) as soon as it exceeds `limit` bytes. A body the
 * client cuts off (it resets or closes its connection before the end) is its input error
 * (InvalidInputError), not a failure of the server: no 5xx, nothing logged as an error.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    return Promise.reject(new TooLargeError(`the request body of ${declared} bytes exceeds ${limit} bytes`));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        // Stop reading: the answer is sent and the connection closed without taking the rest.
        req.pause();
        settled = true;
        reject(new TooLargeError(`the request body exceeds ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    };
    const cutOff = (cause?: Error) => {
      if (settled) return;
      settled = true;
      reject(
        new InvalidInputError('the request body was cut off: the connection closed before its end', {
          cause,
          details: { reason: 'incomplete-body' },
        }),
      );
    };
    req.on('data', onData);
    req.once('end', () => {
      settled = true;
      resolve(Buffer.concat(chunks, size));
    });
    // Node reports a connection closed in the middle of the body as an error of the request ("aborted").
    req.once('error', cutOff);
    // Closed with neither `end` nor an error: the read would otherwise wait for ever.
    req.once('close', () => cutOff());
  });
}
