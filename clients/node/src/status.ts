/**
 * gRPC failures to typed errors: the `grpc-status-details-bin` trailer (a
 * `google.rpc.Status` with `ErrorInfo` and `BadRequest` details) says the
 * error's class and the bad field; the `msgboard-error` trailer, older
 * boards' way, names the class too; else the status code decides.
 */

import * as grpc from "@grpc/grpc-js";
import { makeError, MsgboardError, type ErrorParts } from "./errors.js";
import { root } from "./proto.js";

const Status = root.lookupType("google.rpc.Status");
const ErrorInfo = root.lookupType("google.rpc.ErrorInfo");
const BadRequest = root.lookupType("google.rpc.BadRequest");
const DETAILS_KEY = "grpc-status-details-bin";
const NAME_KEY = "msgboard-error";

/** The name of a gRPC status code number. */
export function codeName(code: number): string {
  return grpc.status[code] ?? "UNKNOWN";
}

/** The ErrorInfo and BadRequest a serialized google.rpc.Status carries. */
export function detailsOf(bin: Uint8Array): Partial<ErrorParts> {
  const out: Partial<ErrorParts> = {};
  const st = Status.toObject(Status.decode(bin)) as {
    details?: { type_url?: string; typeUrl?: string; value: Uint8Array }[];
  };
  for (const d of st.details ?? []) {
    const url = d.typeUrl ?? d.type_url ?? "";
    const name = url.slice(url.lastIndexOf("/") + 1);
    if (name === "google.rpc.ErrorInfo") {
      const info = ErrorInfo.toObject(ErrorInfo.decode(d.value)) as {
        reason?: string;
        domain?: string;
        metadata?: Record<string, string>;
      };
      if (info.domain === "msgboard" || !out.reason) {
        out.reason = info.reason ?? "";
        out.metadata = info.metadata ?? {};
      }
    } else if (name === "google.rpc.BadRequest") {
      const br = BadRequest.toObject(BadRequest.decode(d.value)) as {
        fieldViolations?: { field?: string }[];
      };
      out.field ??= br.fieldViolations?.[0]?.field;
    }
  }
  return out;
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
  const name = se.metadata.get(NAME_KEY)[0];
  if (!parts.reason && typeof name === "string") parts.reason = name;
  return makeError(parts);
}
