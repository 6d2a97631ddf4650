/**
 * client-node's per-call options that cancel a request: its generated APIs take no AbortSignal
 * directly, but a middleware may set one on the request before it is sent.
 */
import { type ConfigurationOptions, Observable } from '@kubernetes/client-node';

/** Call options that abort the request (closing its connection) when `signal` aborts. */
export function abortingWith(signal: AbortSignal): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (context) => {
          context.setSignal(signal);
          return new Observable(Promise.resolve(context));
        },
        post: (context) => new Observable(Promise.resolve(context)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}
