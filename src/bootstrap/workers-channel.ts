/**
 * The channel between the primary and its serving workers carries a few small messages per
 * connection and per request. Sent one by one, each is a write and a wake-up on both sides; under a
 * storm, those cost more than the questions themselves. So messages are sent as arrays, once per
 * turn of the event loop: a storm's hundreds of questions travel in a few writes, and a lone
 * question waits at most one turn.
 */

/** A sender that collects the messages of one turn of the event loop and hands them to `send` together. */
export function batchedSender<T>(send: (messages: T[]) => void): (message: T) => void {
  let pending: T[] = [];
  const flush = () => {
    const messages = pending;
    pending = [];
    send(messages);
  };
  return (message) => {
    if (pending.length === 0) setImmediate(flush);
    pending.push(message);
  };
}
