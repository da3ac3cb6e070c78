/**
 * The contract, loaded at run time from the .proto files this package
 * carries (proto/: a copy of the repository's proto/msgboard/v1/board.proto,
 * kept equal by `npm run sync-proto` and checked by test/proto.test.ts, and
 * the two googleapis messages the error details need).
 *
 * Two views of the same files: @grpc/proto-loader's package definition, from
 * which @grpc/grpc-js makes the Board stub, and a protobufjs Root for
 * reflection (the proto3 JSON mapping in json.ts, the error details in
 * status.ts).
 */

import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";
import protobuf from "protobufjs";

/** The directory of the .proto files. */
export const PROTO_DIR = fileURLToPath(new URL("../../proto/", import.meta.url));
/** The board's proto file, relative to PROTO_DIR. */
export const BOARD_PROTO = "msgboard/v1/board.proto";
const FILES = [BOARD_PROTO, "google/rpc/status.proto", "google/rpc/error_details.proto"];

/**
 * How messages look in JS on the wire side: lowerCamelCase fields, int64 as
 * decimal strings (exact), enums by name, bytes as Buffers, a `kind`-like
 * virtual field naming each set oneof member, empty lists present.
 */
export const LOADER_OPTIONS: loader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  bytes: Buffer,
  defaults: false,
  arrays: true,
  objects: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

const definition = loader.loadSync(FILES, LOADER_OPTIONS);

/** The grpc-js constructor of the Board service's client. */
export const BoardClient = (grpc.loadPackageDefinition(definition) as any).msgboard.v1
  .Board as grpc.ServiceClientConstructor;

/** The same files for reflection. */
export const root: protobuf.Root = (() => {
  const r = new protobuf.Root();
  r.resolvePath = (_origin, target) =>
    target.startsWith("google/protobuf/") ? target : PROTO_DIR + target;
  r.loadSync(FILES, { keepCase: false });
  r.resolveAll();
  return r;
})();

/** The message type `msgboard.v1.<name>` (or a full name with a dot). */
export function messageType(name: string): protobuf.Type {
  return root.lookupType(name.includes(".") ? name : `msgboard.v1.${name}`);
}
