/**
 * The contract, loaded at run time: the repository's
 * proto/msgboard/v1/board.proto (this package lives in clients/node of the
 * repository), or, in a packed package, the copy `npm pack` puts in
 * proto/msgboard (scripts/sync-proto.mjs, run by prepack); and the two
 * googleapis messages the error details need (proto/google/rpc).
 *
 * Two views of the same files: @grpc/proto-loader's package definition, from
 * which @grpc/grpc-js makes the Board stub, and a protobufjs Root for
 * reflection (the proto3 JSON mapping in json.ts, the error details in
 * status.ts).
 */

import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";
import protobuf from "protobufjs";

/** The board's proto file, relative to its directory. */
export const BOARD_PROTO = "msgboard/v1/board.proto";
/** This package's own .proto files (google/rpc; a packed package's msgboard copy). */
const OWN_DIR = fileURLToPath(new URL("../../proto/", import.meta.url));
/** The repository's proto directory, when this package sits in its clients/node. */
const REPO_PROTO_DIR = fileURLToPath(new URL("../../../../proto/", import.meta.url));
/** Where board.proto is read from: the repository's, else the packed copy. */
export const PROTO_DIR = existsSync(REPO_PROTO_DIR + BOARD_PROTO) ? REPO_PROTO_DIR : OWN_DIR;
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
  includeDirs: [PROTO_DIR, OWN_DIR],
};

const definition = loader.loadSync(FILES, LOADER_OPTIONS);

/** The grpc-js constructor of the Board service's client. */
export const BoardClient = (grpc.loadPackageDefinition(definition) as any).msgboard.v1
  .Board as grpc.ServiceClientConstructor;

/** The same files for reflection. */
export const root: protobuf.Root = (() => {
  const r = new protobuf.Root();
  r.resolvePath = (_origin, target) => {
    if (target.startsWith("google/protobuf/")) return target; // protobufjs has them built in
    return (target.startsWith("google/") ? OWN_DIR : PROTO_DIR) + target;
  };
  r.loadSync(FILES, { keepCase: false });
  r.resolveAll();
  return r;
})();

/** The message type `msgboard.v1.<name>` (or a full name with a dot). */
export function messageType(name: string): protobuf.Type {
  return root.lookupType(name.includes(".") ? name : `msgboard.v1.${name}`);
}
