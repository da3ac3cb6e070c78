// A failure's google.rpc.Status details decide the typed error: ErrorInfo's
// reason names the class, BadRequest's field violation the field, even when
// the status text says neither. (The board's own errors are checked end to
// end by the conformance cases.)

import assert from "node:assert/strict";
import { it } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { InvalidArgument, MsgboardError, QueueFull, ResourceExhausted } from "../src/index.js";
import { root } from "../src/proto.js";
import { fromGrpc } from "../src/status.js";

function any(type: string, value: object): object {
  const t = root.lookupType(type);
  // protobufjs builds google.protobuf.Any in with its proto field name, type_url.
  return { type_url: `type.googleapis.com/${type}`, value: t.encode(t.fromObject(value)).finish() };
}

function failure(code: grpc.status, details: string, ...anys: object[]): grpc.ServiceError {
  const Status = root.lookupType("google.rpc.Status");
  const md = new grpc.Metadata();
  md.set("grpc-status-details-bin", Buffer.from(Status.encode(Status.fromObject({ code, message: details, details: anys })).finish()));
  return Object.assign(new Error(details), { code, details, metadata: md });
}

it("ErrorInfo.reason picks the class, BadRequest the field", () => {
  const e = fromGrpc(
    failure(
      grpc.status.INVALID_ARGUMENT,
      "bad value",
      any("google.rpc.ErrorInfo", { reason: "InvalidArgument", domain: "msgboard", metadata: { queue: "q" } }),
      any("google.rpc.BadRequest", { fieldViolations: [{ field: "messages[2].tuple[0]", description: "no kind" }] }),
    ),
  );
  assert.ok(e instanceof InvalidArgument);
  assert.equal(e.field, "messages[2].tuple[0]");
  assert.deepEqual(e.metadata, { queue: "q" });
  const full = fromGrpc(
    failure(grpc.status.RESOURCE_EXHAUSTED, "full", any("google.rpc.ErrorInfo", { reason: "QueueFull", domain: "msgboard" })),
  );
  assert.ok(full instanceof QueueFull && full instanceof ResourceExhausted);
  assert.equal(full.code, "RESOURCE_EXHAUSTED");
});

it("a reason this client does not know keeps the class of the code, and the reason", () => {
  const e = fromGrpc(
    failure(grpc.status.RESOURCE_EXHAUSTED, "x", any("google.rpc.ErrorInfo", { reason: "SomethingNew", domain: "msgboard" })),
  );
  assert.ok(e instanceof ResourceExhausted && !(e instanceof QueueFull));
  assert.equal((e as MsgboardError).reason, "SomethingNew");
});
