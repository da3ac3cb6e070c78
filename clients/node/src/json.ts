/**
 * The proto3 canonical JSON mapping of board.proto's messages, to and from
 * the wire objects grpc-js sends (proto.ts): lowerCamelCase names, enums
 * by name, 64-bit integers as strings, bytes as base64, Durations as
 * "1.5s", Timestamps as RFC 3339, google.protobuf.NullValue as null. What
 * grpcurl-style tools and the conformance cases speak.
 *
 * ```ts
 * const req = fromJSON("TakeRequest", { queue: "jobs", timeout: "5s" });
 * const res = await client.connection.unary("Take", req);
 * toJSON("TakeResponse", res);
 * ```
 */

import protobuf from "protobufjs";
import { InvalidArgument } from "./errors.js";
import { messageType, root } from "./proto.js";
import type { Wire } from "./wire.js";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const LONGS = new Set(["int64", "uint64", "sint64", "fixed64", "sfixed64"]);
const INTS = new Set(["int32", "uint32", "sint32", "fixed32", "sfixed32"]);
const FLOATS = new Set(["double", "float"]);
const SPECIAL: Record<string, number> = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

function typeOf(t: string | protobuf.Type): protobuf.Type {
  return typeof t === "string" ? messageType(t) : t;
}

/** A request or response from its canonical JSON (unknown fields are errors). */
export function fromJSON(type: string | protobuf.Type, json: Json, where = ""): Wire {
  const t = typeOf(type);
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    throw new InvalidArgument(`${where || t.name}: expected a JSON object for ${t.fullName.slice(1)}`);
  }
  const out: Wire = {};
  for (const [key, value] of Object.entries(json)) {
    const field = t.fields[key] ?? t.fieldsArray.find((f) => f.options?.json_name === key);
    const at = where ? `${where}.${key}` : key;
    if (!field) throw new InvalidArgument(`${at}: no field ${key} in ${t.fullName.slice(1)}`);
    field.resolve();
    if (value === null && !isNullValue(field)) continue;
    if (field.map) {
      const m: Wire = {};
      for (const [k, v] of Object.entries(value as Record<string, Json>)) m[k] = scalarFrom(field, v, `${at}.${k}`);
      out[field.name] = m;
    } else if (field.repeated) {
      if (!Array.isArray(value)) throw new InvalidArgument(`${at}: expected a JSON array`);
      out[field.name] = value.map((v, i) => scalarFrom(field, v, `${at}[${i}]`));
    } else {
      out[field.name] = scalarFrom(field, value, at);
    }
  }
  return out;
}

function isNullValue(f: protobuf.Field): boolean {
  return f.resolvedType?.fullName === ".google.protobuf.NullValue";
}

function scalarFrom(f: protobuf.Field, v: Json, at: string): unknown {
  const rt = f.resolvedType;
  if (rt instanceof protobuf.Enum) {
    if (isNullValue(f)) return "NULL_VALUE";
    if (typeof v === "number") return rt.valuesById[v] ?? v;
    if (typeof v !== "string" || !(v in rt.values)) throw new InvalidArgument(`${at}: ${JSON.stringify(v)} is not a ${rt.name}`);
    return v;
  }
  if (rt instanceof protobuf.Type) {
    if (rt.fullName === ".google.protobuf.Any") return anyFrom(v, at);
    if (rt.fullName === ".google.protobuf.Duration") return durationFrom(v, at);
    if (rt.fullName === ".google.protobuf.Timestamp") return timestampFrom(v, at);
    return fromJSON(rt, v, at);
  }
  if (LONGS.has(f.type)) {
    if ((typeof v !== "string" && typeof v !== "number") || !/^-?\d+$/.test(String(v))) {
      throw new InvalidArgument(`${at}: ${JSON.stringify(v)} is not an integer`);
    }
    return String(v);
  }
  if (INTS.has(f.type)) return Number(v);
  if (FLOATS.has(f.type)) return typeof v === "string" ? (SPECIAL[v] ?? Number(v)) : v;
  if (f.type === "bytes") {
    if (typeof v !== "string") throw new InvalidArgument(`${at}: bytes must be a base64 string`);
    return Buffer.from(v.replace(/-/g, "+").replace(/_/g, "/"), "base64");
  }
  return v;
}

function durationFrom(v: Json, at: string): Wire {
  const m = typeof v === "string" ? /^(-?)(\d+)(?:\.(\d{1,9}))?s$/.exec(v) : null;
  if (!m) throw new InvalidArgument(`${at}: ${JSON.stringify(v)} is not a duration like "1.5s"`);
  const sign = m[1] ? -1 : 1;
  return { seconds: String(sign * Number(m[2])), nanos: sign * Number((m[3] ?? "").padEnd(9, "0")) };
}

function timestampFrom(v: Json, at: string): Wire {
  const m = typeof v === "string" ? /^(.*T\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(v) : null;
  const ms = m ? Date.parse(`${m[1]}${m[3]}`) : NaN;
  if (!m || Number.isNaN(ms)) throw new InvalidArgument(`${at}: ${JSON.stringify(v)} is not an RFC 3339 time`);
  return { seconds: String(ms / 1000), nanos: Number((m[2] ?? "").padEnd(9, "0")) };
}

/** A wire message in canonical JSON: fields at their default left out, set oneof members kept. */
export function toJSON(type: string | protobuf.Type, w: Wire): { [k: string]: Json } {
  const t = typeOf(type);
  const out: { [k: string]: Json } = {};
  for (const f of t.fieldsArray) {
    f.resolve();
    const v = w[f.name];
    if (v === undefined || v === null) continue;
    const inOneof = f.partOf !== null && f.partOf !== undefined;
    if (f.map) {
      const entries = Object.entries(v as Wire);
      if (entries.length) out[f.name] = Object.fromEntries(entries.map(([k, x]) => [k, scalarTo(f, x)]));
    } else if (f.repeated) {
      if ((v as unknown[]).length) out[f.name] = (v as unknown[]).map((x) => scalarTo(f, x));
    } else if (inOneof || f.resolvedType instanceof protobuf.Type || !isDefault(f, v)) {
      out[f.name] = scalarTo(f, v);
    }
  }
  return out;
}

function isDefault(f: protobuf.Field, v: unknown): boolean {
  if (f.resolvedType instanceof protobuf.Enum) return v === 0 || f.resolvedType.values[v as string] === 0;
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return v.length === 0;
  return v === 0 || v === "0" || v === "" || v === false;
}

function scalarTo(f: protobuf.Field, v: unknown): Json {
  const rt = f.resolvedType;
  if (rt instanceof protobuf.Enum) {
    if (isNullValue(f)) return null;
    return typeof v === "number" ? (rt.valuesById[v] ?? v) : (v as string);
  }
  if (rt instanceof protobuf.Type) {
    if (rt.fullName === ".google.protobuf.Any") return anyTo(v as Wire);
    if (rt.fullName === ".google.protobuf.Duration") return durationTo(v as Wire);
    if (rt.fullName === ".google.protobuf.Timestamp") return timestampTo(v as Wire);
    return toJSON(rt, v as Wire);
  }
  if (LONGS.has(f.type)) return String(v);
  if (FLOATS.has(f.type)) {
    const n = Number(v);
    return Number.isFinite(n) ? n : String(n);
  }
  if (f.type === "bytes") return Buffer.from(v as Uint8Array).toString("base64");
  return v as Json;
}

/**
 * google.protobuf.Any (the error details): `{"@type": url, ...the packed
 * message's fields}`; the packed type must be one this package knows
 * (board.proto, google.rpc's ErrorInfo and BadRequest).
 */
function anyTo(w: Wire): Json {
  const url: string = w.typeUrl ?? w.type_url ?? "";
  const t = root.lookupType(url.slice(url.lastIndexOf("/") + 1));
  const inner = t.toObject(t.decode(w.value ?? new Uint8Array()), { longs: String, enums: String, bytes: Buffer });
  return { "@type": url, ...toJSON(t, inner) };
}

function anyFrom(v: Json, at: string): Wire {
  if (v === null || typeof v !== "object" || Array.isArray(v) || typeof v["@type"] !== "string") {
    throw new InvalidArgument(`${at}: an Any needs "@type"`);
  }
  const { "@type": url, ...rest } = v as { [k: string]: Json };
  const t = root.lookupType((url as string).slice((url as string).lastIndexOf("/") + 1));
  const value = t.encode(t.fromObject(fromJSON(t, rest, at))).finish();
  return { type_url: url, typeUrl: url, value: Buffer.from(value) };
}

function fraction(nanos: number): string {
  if (!nanos) return "";
  const s = String(nanos).padStart(9, "0");
  return "." + (s.endsWith("000000") ? s.slice(0, 3) : s.endsWith("000") ? s.slice(0, 6) : s);
}

function durationTo(w: Wire): string {
  const s = Number(w.seconds ?? 0);
  const n = Number(w.nanos ?? 0);
  const neg = s < 0 || n < 0;
  return `${neg ? "-" : ""}${Math.abs(s)}${fraction(Math.abs(n))}s`;
}

function timestampTo(w: Wire): string {
  const iso = new Date(Number(w.seconds ?? 0) * 1000).toISOString().replace(/\.000Z$/, "");
  return `${iso}${fraction(Number(w.nanos ?? 0))}Z`;
}
