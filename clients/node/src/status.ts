/**
 * gRPC failures to typed errors: the `grpc-status-details-bin` trailer (a
 * `google.rpc.Status` with `ErrorInfo` and `BadRequest` details) says the
 * error's class and the bad field; without it the status code decides.
 */

import * as grpc from "@grpc/grpc-js";
import { makeError, MsgboardError, type ErrorParts } from "./errors.js";
import { root } from "./proto.js";

const Status = root.lookupType("google.rpc.Status");
const ErrorInfo = root.lookupType("google.rpc.ErrorInfo");
const BadRequest = root.lookupType("google.rpc.BadRequest");
const DETAILS_KEY = "grpc-status-details-bin";

/** The name of a gRPC status code number. */
export function codeName(code: number): string {
  return grpc.status[code] ?? "UNKNOWN";
}

/** A google.protobuf.Any as protobufjs and proto-loader give it. */
interface AnyLike {
  typeUrl?: string;
  type_url?: string;
  value?: Uint8Array;
}

/**
 * What ErrorInfo (reason, metadata; domain msgboard first) and BadRequest
 * (the first field violation's path) say among a Status's details, or an
 * in-stream Error's.
 */
export function partsOf(details: readonly AnyLike[] | undefined): Partial<ErrorParts> {
  const out: Partial<ErrorParts> = {};
  for (const d of details ?? []) {
    const url = d.typeUrl ?? d.type_url ?? "";
    const name = url.slice(url.lastIndexOf("/") + 1);
    const value = d.value ?? new Uint8Array();
    if (name === "google.rpc.ErrorInfo") {
      const info = ErrorInfo.toObject(ErrorInfo.decode(value)) as {
        reason?: string;
        domain?: string;
        metadata?: Record<string, string>;
      };
      if (info.domain === "msgboard" || !out.reason) {
        out.reason = info.reason ?? "";
        out.metadata = info.metadata ?? {};
      }
    } else if (name === "google.rpc.BadRequest") {
      const br = BadRequest.toObject(BadRequest.decode(value)) as { fieldViolations?: { field?: string }[] };
      out.field ??= br.fieldViolations?.[0]?.field;
    }
  }
  return out;
}

/** What a serialized google.rpc.Status (the grpc-status-details-bin trailer) says. */
export function detailsOf(bin: Uint8Array): Partial<ErrorParts> {
  return partsOf((Status.toObject(Status.decode(bin)) as { details?: AnyLike[] }).details);
}

/** The typed error for a failed call (anything else passes through as it is). */
export function fromGrpc(e: unknown): unknown {
  if (e instanceof MsgboardError) return e;
  const se = e as Partial<grpc.ServiceError>;
  if (typeof se?.code !== "number" || se.metadata === undefined) return e;
  const parts: ErrorParts = { code: codeName(se.code), message: se.details ?? se.message ?? "" };
  const bin = se.metadata.get(DETAILS_KEY)[0];
  if (bin instanceof Buffer) {
    try {
      Object.assign(parts, detailsOf(bin));
    } catch {
      // Unreadable details: the code and message still say what happened.
    }
  }
  return makeError(parts);
}
