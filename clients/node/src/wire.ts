/**
 * The client's types and their wire form: values, templates, patterns,
 * messages, queues and selectors to and from the objects grpc-js sends
 * (proto.ts: lowerCamelCase fields, int64 as strings, enums by name).
 * Every name of board.proto the client depends on is spelled here.
 */

import { InvalidArgument } from "./errors.js";
import {
  Any,
  ActualField,
  AnyField,
  Formal,
  FloatValue,
  IntValue,
  PrefixField,
  RangeField,
  Template,
  alternatives,
  type Field,
  type FieldPattern,
  type Templates,
  type TypeName,
  type Value,
} from "./values.js";

/** A wire object: what grpc-js takes and gives. */
export type Wire = Record<string, any>;

// ---------------------------------------------------------------- scalars

/** A u64/i64 wire string (or number) as a number: exact below 2^53. */
export function num(x: unknown): number {
  return x === undefined || x === null || x === "" ? 0 : Number(x);
}

/** Milliseconds as a google.protobuf.Duration. */
export function duration(ms: number): Wire {
  if (!(ms >= 0)) throw new InvalidArgument(`a duration must be >= 0 ms, not ${ms}`);
  const s = Math.floor(ms / 1000);
  return { seconds: String(s), nanos: Math.round((ms - s * 1000) * 1e6) };
}

/** A Date or ms since the epoch as a google.protobuf.Timestamp. */
export function timestamp(t: Date | number): Wire {
  const ms = t instanceof Date ? t.getTime() : t;
  const s = Math.floor(ms / 1000);
  return { seconds: String(s), nanos: Math.round((ms - s * 1000) * 1e6) };
}

/** A google.protobuf.Timestamp as a Date; undefined when unset. */
export function date(ts: Wire | undefined | null): Date | undefined {
  if (!ts) return undefined;
  return new Date(num(ts.seconds) * 1000 + Math.floor(num(ts.nanos) / 1e6));
}

/** "drop-new" as OVERFLOW_POLICY_DROP_NEW. */
export function enumTo(prefix: string, name: string): string {
  return `${prefix}_${name.toUpperCase().replace(/-/g, "_")}`;
}

/** OVERFLOW_POLICY_DROP_NEW as "drop-new" ("" for unset). */
export function enumFrom(prefix: string, wire: string | undefined): string {
  if (!wire || wire.endsWith("_UNSPECIFIED")) return "";
  return wire.slice(prefix.length + 1).toLowerCase().replace(/_/g, "-");
}

// ---------------------------------------------------------------- values

const TYPES: Record<TypeName, string> = {
  null: "VALUE_TYPE_NULL",
  bool: "VALUE_TYPE_BOOL",
  int: "VALUE_TYPE_INT",
  float: "VALUE_TYPE_FLOAT",
  string: "VALUE_TYPE_STRING",
  bytes: "VALUE_TYPE_BYTES",
};

/** One tuple field on the wire; `where` names it in errors. */
export function valueTo(v: Field, where: string): Wire {
  if (v === null) return { null: "NULL_VALUE" };
  if (v instanceof IntValue || typeof v === "bigint") {
    const b = v instanceof IntValue ? v.value : v;
    if (b < -(2n ** 63n) || b >= 2n ** 63n) throw new InvalidArgument(`${where}: ${b} is outside int64`);
    return { int: b.toString() };
  }
  if (v instanceof FloatValue) return { float: v.value };
  switch (typeof v) {
    case "boolean":
      return { bool: v };
    case "string":
      return { string: v };
    case "number":
      if (!Number.isInteger(v)) return { float: v };
      if (!Number.isSafeInteger(v)) {
        throw new InvalidArgument(
          `${where}: ${v} is not a safe integer: write int(...) with a bigint or string, or float(...)`,
        );
      }
      return { int: String(v) };
  }
  if (v instanceof Uint8Array) return { bytes: Buffer.from(v) };
  throw new InvalidArgument(
    `${where}: expected a tuple field (null, a boolean, a number, a bigint, int(), float(), ` +
      `a string, a Buffer or Uint8Array), got ${describe(v)}`,
  );
}

/** What a value is, in words: "an object", "an array", "a Date", "undefined". */
export function describe(v: unknown): string {
  if (v === undefined) return "undefined";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") {
    const name = (v as object).constructor?.name;
    return !name || name === "Object" ? "an object" : `a ${name}`;
  }
  return `a ${typeof v}`;
}

/** A wire value as JS: ints as bigints, floats as numbers, bytes as Buffers. */
export function valueFrom(w: Wire): Value {
  if ("int" in w) return BigInt(w.int);
  if ("float" in w) return Number(w.float);
  if ("string" in w) return w.string;
  if ("bool" in w) return w.bool;
  if ("bytes" in w) return Buffer.from(w.bytes);
  return null;
}

/** A tuple on the wire. */
export function tupleTo(t: readonly Field[], where = "tuple"): Wire[] {
  return t.map((v, i) => valueTo(v, `${where}[${i}]`));
}

/** The CLI's formals, and what a Node template writes instead. */
const CLI_FORMALS: Record<string, string> = {
  "?int": "Int",
  "?float": "Float",
  "?str": "Str",
  "?bytes": "Bytes",
  "?bool": "Bool",
  "?null": "Null",
  "?": "Any",
};

function fieldTo(f: FieldPattern, where: string): Wire {
  if (f instanceof ActualField) return { actual: valueTo(f.value, `${where}.actual`) };
  if (typeof f === "string" && Object.hasOwn(CLI_FORMALS, f)) {
    throw new InvalidArgument(
      `${where}: ${JSON.stringify(f)} is how the CLI writes a formal; in a template write ` +
        `${CLI_FORMALS[f]} (import { ${CLI_FORMALS[f]} } from "msgboard"), or actual(${JSON.stringify(f)}) ` +
        "to match that string itself",
    );
  }
  if (f instanceof Formal) return { formal: TYPES[f.type] };
  if (f instanceof AnyField) return { any: {} };
  if (f instanceof RangeField) {
    return { range: { lo: valueTo(f.lo, `${where}.range.lo`), hi: valueTo(f.hi, `${where}.range.hi`) } };
  }
  if (f instanceof PrefixField) return { prefix: valueTo(f.prefix, `${where}.prefix`) };
  return { actual: valueTo(f, `${where}.actual`) };
}

function fieldFrom(w: Wire): FieldPattern {
  if (w.formal !== undefined) {
    const t = (Object.keys(TYPES) as TypeName[]).find((k) => TYPES[k] === w.formal);
    return new Formal(t ?? "null");
  }
  if (w.any !== undefined) return Any;
  if (w.range) return new RangeField(valueFrom(w.range.lo ?? {}), valueFrom(w.range.hi ?? {}));
  if (w.prefix) return new PrefixField(valueFrom(w.prefix) as string | Buffer);
  const v = valueFrom(w.actual ?? {});
  return typeof v === "string" && Object.hasOwn(CLI_FORMALS, v) ? new ActualField(v) : v;
}

// ---------------------------------------------------------------- patterns

/** What to match: templates (alternatives), address pattern and filter. */
export interface PatternOptions {
  /**
   * An address pattern: "topic:rec.pets.*" (AMQP-style words, `*` one, `#`
   * any number), "prefix:rec.", "eq:name" or a bare exact address; "all"
   * or unset: every address.
   */
  address?: string;
  /** A JMS message selector, e.g. "priority > 3 AND t[0] = 'job'". */
  filter?: string;
}

/** A pattern as the client writes it. */
export interface Pattern extends PatternOptions {
  templates?: Templates;
}

function addressTo(a: string | undefined): Wire | undefined {
  if (a === undefined || a === "all") return undefined;
  const colon = a.indexOf(":");
  const kind = a.slice(0, colon);
  if (colon > 0 && ["eq", "topic", "prefix"].includes(kind)) return { [kind]: a.slice(colon + 1) };
  return { eq: a };
}

function addressFrom(w: Wire | undefined): string | undefined {
  if (!w || w.all !== undefined) return undefined;
  for (const kind of ["eq", "topic", "prefix"]) if (w[kind] !== undefined) return `${kind}:${w[kind]}`;
  return undefined;
}

/** A pattern on the wire; undefined when it matches everything. */
export function patternTo(p: Pattern): Wire | undefined {
  const templates = alternatives(p.templates).map((t, i) => ({
    fields: t.fields.map((f, j) => fieldTo(f, `pattern.templates[${i}].fields[${j}]`)),
  }));
  const address = addressTo(p.address);
  if (!templates.length && !address && !p.filter) return undefined;
  return { address, templates, filter: p.filter ?? "" };
}

/** A wire pattern as the client writes it. */
export function patternFrom(w: Wire | undefined): Pattern {
  const out: Pattern = {};
  if (!w) return out;
  const address = addressFrom(w.address);
  if (address !== undefined) out.address = address;
  if (w.templates?.length) out.templates = w.templates.map((t: Wire) => new Template((t.fields ?? []).map(fieldFrom)));
  if (w.filter) out.filter = w.filter;
  return out;
}

// ---------------------------------------------------------------- messages

/** A message to post. */
export interface NewMessage {
  tuple?: readonly Field[];
  /** Routing address, matched by address patterns ("rec.pets.cats"). */
  address?: string;
  priority?: number | bigint;
  headers?: Record<string, string>;
  /** A queue name for replies. */
  replyTo?: string;
  /** Never delivered after this time (a Date or ms since the epoch). */
  expiresAt?: Date | number;
  contentType?: string;
  /** The body; a string is sent as UTF-8. */
  body?: Uint8Array | string;
  /** An idempotency key (at most 256 bytes): a post of a key the queue
   * holds stores nothing and answers the first message's seq (DUPLICATE). */
  key?: string;
  /** Stored now, seen (taken, read, routed) only from this time (a Date or
   * ms since the epoch). */
  notBefore?: Date | number;
  /** As notBefore, this many milliseconds from now. */
  delayMs?: number;
}

/** A message as the board gives it. */
export interface Message {
  queue: string;
  seq: number;
  address: string;
  priority: number;
  headers: Record<string, string>;
  replyTo: string;
  expiresAt?: Date;
  tuple: Value[];
  postedAt?: Date;
  contentType: string;
  body: Buffer;
  /** "unprocessed" (waiting), "history" (taken) or "scheduled" (not yet visible). */
  section: string;
  processedAt?: Date;
  /** How many times it has been handed out. */
  deliveryCount: number;
  /** Its idempotency key, or "". */
  key: string;
  /** When it becomes visible, if it was posted with one. */
  notBefore?: Date;
  /** In a Browse page: when a message backing off is routed again. */
  redeliverAt?: Date;
}

/** A message to post on the wire; `where` names it in errors ("messages[2]"). */
export function messageTo(m: NewMessage, where: string): Wire {
  const w: Wire = {
    address: m.address ?? "",
    priority: String(m.priority ?? 0),
    headers: m.headers ?? {},
    replyTo: m.replyTo ?? "",
    tuple: tupleTo(m.tuple ?? [], `${where}.tuple`),
    contentType: m.contentType ?? "",
    body: typeof m.body === "string" ? Buffer.from(m.body) : Buffer.from(m.body ?? []),
  };
  if (m.expiresAt !== undefined) w.expiresAt = timestamp(m.expiresAt);
  if (m.key) w.key = m.key;
  if (m.delayMs !== undefined) w.notBefore = timestamp(Date.now() + m.delayMs);
  else if (m.notBefore !== undefined) w.notBefore = timestamp(m.notBefore);
  return w;
}

/** A wire message as the client's Message. */
export function messageFrom(w: Wire): Message {
  return {
    queue: w.queue ?? "",
    seq: num(w.seq),
    address: w.address ?? "",
    priority: num(w.priority),
    headers: { ...(w.headers ?? {}) },
    replyTo: w.replyTo ?? "",
    expiresAt: date(w.expiresAt),
    tuple: (w.tuple ?? []).map(valueFrom),
    postedAt: date(w.postedAt),
    contentType: w.contentType ?? "",
    body: Buffer.from(w.body ?? []),
    section: enumFrom("SECTION", w.section),
    processedAt: date(w.processedAt),
    deliveryCount: num(w.deliveryCount),
    key: w.key ?? "",
    notBefore: date(w.notBefore),
    redeliverAt: date(w.redeliverAt),
  };
}

/** What became of a posted message. */
export interface Receipt {
  /** Its seq on the queue; 0 when it found the queue full and went elsewhere. */
  seq: number;
  /** "stored", "overflowed", "dead-lettered", "dropped" or "duplicate" (its key is held: the seq is the first message's). */
  disposition: string;
}

/** The receipts of a PostResponse or PostStreamResponse. */
export function receiptsFrom(w: Wire): Receipt[] {
  return (w.seqs ?? []).map((s: string, i: number) => ({
    seq: num(s),
    disposition: enumFrom("DISPOSITION", w.dispositions?.[i]) || "stored",
  }));
}

// ---------------------------------------------------------------- queues

/** A queue's properties (CreateQueue's options). */
export interface QueueSpec {
  /** In memory only: gone when the server stops. */
  transient?: boolean;
  /** Most waiting messages; 0: no limit. */
  maxUnprocessed?: number;
  /**
   * A post to a full queue: "reject" (default), "drop-new", "dead-letter" or
   * "drop-head" (stored; the oldest waiting message not held is dropped).
   */
  overflow?: string;
  /** Most messages kept in history once taken; 0 (default) keeps none; Infinity: every one. */
  maxHistory?: number;
  /** The queue that gets this queue's dead letters. */
  deadLetter?: string;
  /** A message no selector matches: "hold" (default), "discard" or "dead-letter". */
  unmatched?: string;
  /** Delete the queue when its last selector goes. */
  autoDelete?: boolean;
  /** Most deliveries of one message before it is dead-lettered; 0: no limit. */
  maxDeliveries?: number;
  /** How long (ms) a message's idempotency key is held after it has left
   * the queue; default 120000 (2 minutes), 0: only while it is on the board. */
  dedupWindowMs?: number;
  /** How messages given back (nacked, consumer gone) are delayed before they
   * are delivered again; null (default): the board's nack backoff. */
  redelivery?: Redelivery | null;
}

/** A redelivery backoff: `initialMs`, then times `multiplier` (>= 1), at most `maxMs`. */
export interface Redelivery {
  initialMs: number;
  multiplier: number;
  maxMs: number;
}

/** A redelivery policy on the wire. */
export function redeliveryTo(r: Redelivery): Wire {
  return { initial: duration(r.initialMs), multiplier: r.multiplier, max: duration(r.maxMs) };
}

function ms(d: Wire | undefined): number {
  return d ? num(d.seconds) * 1000 + Math.floor(num(d.nanos) / 1e6) : 0;
}

/** A queue and its counts. */
export interface Queue {
  name: string;
  spec: Required<QueueSpec>;
  unprocessed: number;
  history: number;
  nextSeq: number;
  waiting: number;
  /** Posted with a notBefore still to come: stored, not yet visible. */
  scheduled: number;
  createdAt?: Date;
}

/** A queue spec on the wire. */
export function queueSpecTo(name: string, s: QueueSpec): Wire {
  return {
    name,
    transient: s.transient ?? false,
    maxUnprocessed: String(s.maxUnprocessed ?? 0),
    overflow: enumTo("OVERFLOW_POLICY", s.overflow ?? "reject"),
    maxHistory: s.maxHistory === Infinity ? "0" : String(s.maxHistory ?? 0),
    unlimitedHistory: s.maxHistory === Infinity,
    deadLetter: s.deadLetter ?? "",
    unmatched: enumTo("UNMATCHED_POLICY", s.unmatched ?? "hold"),
    autoDelete: s.autoDelete ?? false,
    maxDeliveries: s.maxDeliveries ?? 0,
    ...(s.dedupWindowMs !== undefined ? { dedupWindow: duration(s.dedupWindowMs) } : {}),
    ...(s.redelivery ? { redelivery: redeliveryTo(s.redelivery) } : {}),
  };
}

/** A wire Queue as the client's Queue. */
export function queueFrom(w: Wire): Queue {
  const s = w.spec ?? {};
  return {
    name: s.name ?? "",
    spec: {
      transient: s.transient ?? false,
      maxUnprocessed: num(s.maxUnprocessed),
      overflow: enumFrom("OVERFLOW_POLICY", s.overflow) || "reject",
      maxHistory: s.unlimitedHistory ? Infinity : num(s.maxHistory),
      deadLetter: s.deadLetter ?? "",
      unmatched: enumFrom("UNMATCHED_POLICY", s.unmatched) || "hold",
      autoDelete: s.autoDelete ?? false,
      maxDeliveries: num(s.maxDeliveries),
      dedupWindowMs: s.dedupWindow ? ms(s.dedupWindow) : 120000,
      redelivery: s.redelivery
        ? { initialMs: ms(s.redelivery.initial), multiplier: s.redelivery.multiplier || 1, maxMs: ms(s.redelivery.max) }
        : null,
    },
    unprocessed: num(w.unprocessed),
    history: num(w.history),
    nextSeq: num(w.nextSeq),
    waiting: num(w.waiting),
    scheduled: num(w.scheduled),
    createdAt: date(w.createdAt),
  };
}

// ---------------------------------------------------------------- selectors

/** Where reading a queue starts: a position name, a seq, or a Date. */
export type Position = "current" | "oldest" | "latest" | number | Date;

/** Where a selector or subscription starts reading. */
export interface StartOptions {
  /**
   * "current" (default: MOVE takes every waiting message, COPY what is
   * posted from now on), "oldest" (from the oldest message kept, history
   * included: a COPY replays it), a seq number, or a Date (the first
   * message posted at or after it).
   */
  start?: "current" | "oldest" | number | Date;
}

/** Puts a start position (board.proto's Position) on a wire BrowseRequest, SelectorSpec or Subscription. */
export function startTo(start: Position | undefined, w: Wire): void {
  if (start === undefined) return;
  if (typeof start === "number") {
    w.start = "POSITION_SEQ";
    w.startSeq = String(start);
  } else if (start instanceof Date) {
    w.start = "POSITION_TIME";
    w.startTime = timestamp(start);
  } else {
    w.start = enumTo("POSITION", start);
  }
}

/** A selector's properties (CreateSelector's options). */
export interface SelectorOptions extends Pattern, StartOptions {
  /** "move" (default), "copy", "delete" or "bounce". */
  op?: string;
  /** The destination queue; unset: terminal (a consumer attaches with subscribe({selector})). */
  to?: string;
  /** Terminal only: most unacked deliveries (0: 100). */
  credit?: number;
  /** Terminal only: no credit limit. */
  unlimitedCredit?: boolean;
  /** To a queue only: most messages it will ever move (0: no limit). */
  quota?: number;
  /** "normal" (default), "default" or "overflow". */
  role?: string;
}

/** A selector and its figures. */
export interface Selector {
  id: string;
  source: string;
  spec: SelectorOptions;
  durable: boolean;
  attached: boolean;
  outstanding: number;
  delivered: number;
  dropped: number;
}

/** A selector spec on the wire. */
export function selectorSpecTo(source: string, o: SelectorOptions): Wire {
  const w: Wire = {
    source,
    pattern: patternTo(o),
    op: enumTo("OPERATION", o.op ?? "move"),
    destination: o.to ?? "",
    credit: String(o.credit ?? 0),
    unlimitedCredit: o.unlimitedCredit ?? false,
    quota: String(o.quota ?? 0),
    role: enumTo("ROLE", o.role ?? "normal"),
  };
  startTo(o.start, w);
  return w;
}

/** A wire Selector as the client's Selector. */
export function selectorFrom(w: Wire): Selector {
  const s = w.spec ?? {};
  const spec: SelectorOptions = {
    ...patternFrom(s.pattern),
    op: enumFrom("OPERATION", s.op) || "move",
    to: s.destination ?? "",
    credit: num(s.credit),
    unlimitedCredit: s.unlimitedCredit ?? false,
    quota: num(s.quota),
    role: enumFrom("ROLE", s.role) || "normal",
  };
  const start = enumFrom("POSITION", s.start);
  if (start === "seq") spec.start = num(s.startSeq);
  else if (start === "time") spec.start = date(s.startTime);
  else if (start) spec.start = start as "current" | "oldest";
  return {
    id: w.id ?? "",
    source: s.source ?? "",
    spec,
    durable: w.durable ?? false,
    attached: w.attached ?? false,
    outstanding: num(w.outstanding),
    delivered: num(w.delivered),
    dropped: num(w.dropped),
  };
}
