/**
 * The native bootstrap API as both sides name it (docs/bootstrap-api.md): the node's join client
 * (src/agent/bootstrap-client.ts) sends it, the server's handler (src/bootstrap/native-handler.ts)
 * accepts only it. Pure.
 */

/** The apiVersion of the native API's requests. */
export const nativeApiVersion = 'bootstrap.kops-controller.io/v1';
