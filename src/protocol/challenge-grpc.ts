/**
 * The callback challenge's gRPC service, loaded from the .proto kept beside this file (kops' wire
 * contract, unchanged) with @grpc/proto-loader. Loaded at run time rather than generated: the file is
 * two messages and one method, and loading it needs no protoc step in the build while keeping the
 * .proto the one source of the wire format. Field names are kept as written (`challenge_id`), bytes
 * decode to Buffers.
 */
import { join } from 'node:path';
import { type GrpcObject, loadPackageDefinition, type ServiceClientConstructor } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

let loaded: ServiceClientConstructor | undefined;

/** The `CallbackService` client constructor; its `.service` is what a server registers. */
export function callbackService(): ServiceClientConstructor {
  if (!loaded) {
    const definition = loadSync(join(import.meta.dirname, 'challenge.proto'), {
      keepCase: true,
      bytes: Buffer,
      defaults: true,
    });
    const kops = loadPackageDefinition(definition)['kops'] as GrpcObject;
    const v1 = (kops['bootstrap'] as GrpcObject)['v1'] as GrpcObject;
    loaded = v1['CallbackService'] as ServiceClientConstructor;
  }
  return loaded;
}
