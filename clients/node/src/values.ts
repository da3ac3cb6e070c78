/**
 * Tuples and templates, written naturally:
 *
 * ```ts
 * const tuple = ["job", 7, float(2.5), null, Buffer.from("x")];
 * const t = tpl("job", Int, Any, range(1, 9));
 * ```
 *
 * A tuple field is `null`, a boolean, an int, a float, a string or bytes.
 * The board keeps int 7 and float 7.0 apart, and a JS number cannot tell
 * them apart, so the rule is: a `bigint` or `int(x)` is an int; `float(x)`
 * is a float; a bare `number` is an int when it is a whole number (a safe
 * integer) and a float otherwise. Ints read back are `bigint`s (int64 does
 * not fit a number), floats are `number`s: wrap a whole float in `float()`
 * to post it back as a float.
 *
 * In a template, `Int`, `Float`, `Str`, `Bytes`, `Bool` and `Null` are
 * formals (any value of that type), `Any` matches anything, `range(lo, hi)`
 * and `prefix(p)` are patterns, and every other field is an actual value.
 * A string written as the CLI writes formals ("?int", "?str", "?float",
 * "?bytes", "?bool", "?null", "?") is refused in a template (InvalidArgument
 * naming the formal to use): `actual("?int")` matches that string itself.
 */

import { InvalidArgument } from "./errors.js";

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** An explicit int (made by `int()`). */
export class IntValue {
  constructor(readonly value: bigint) {}
  toString(): string {
    return this.value.toString();
  }
}

/** An explicit float (made by `float()`). */
export class FloatValue {
  constructor(readonly value: number) {}
  toString(): string {
    return String(this.value);
  }
}

/** What a tuple field may be written as. */
export type Field = null | boolean | number | bigint | string | Uint8Array | IntValue | FloatValue;

/** A tuple field as read back: ints are bigints, floats numbers, bytes Buffers. */
export type Value = null | boolean | number | bigint | string | Buffer;

/** An int64: `int(7)`, `int(7n)`, `int("9007199254740993")`. */
export function int(v: number | bigint | string): IntValue {
  let b: bigint;
  if (typeof v === "number") {
    if (!Number.isSafeInteger(v)) {
      throw new InvalidArgument(`int(${v}): not a safe integer; pass a bigint or a string`);
    }
    b = BigInt(v);
  } else {
    try {
      b = BigInt(v);
    } catch {
      throw new InvalidArgument(`int(${JSON.stringify(v)}): not an integer`);
    }
  }
  if (b < INT64_MIN || b > INT64_MAX) {
    throw new InvalidArgument(`int(${v}): outside int64`);
  }
  return new IntValue(b);
}

/** A float64, even when it holds a whole number: `float(7)`. */
export function float(v: number): FloatValue {
  if (typeof v !== "number") {
    throw new InvalidArgument(`float(${String(v)}): not a number`);
  }
  return new FloatValue(v);
}

/** The type a formal template field names. */
export type TypeName = "null" | "bool" | "int" | "float" | "string" | "bytes";

/** A formal template field: any value of one type. */
export class Formal {
  constructor(readonly type: TypeName) {}
}

/** Template field: any null. */
export const Null = new Formal("null");
/** Template field: any boolean. */
export const Bool = new Formal("bool");
/** Template field: any int (not a float). */
export const Int = new Formal("int");
/** Template field: any float (not an int). */
export const Float = new Formal("float");
/** Template field: any string. */
export const Str = new Formal("string");
/** Template field: any bytes. */
export const Bytes = new Formal("bytes");

/** The template field that matches any value, null included. */
export class AnyField {
  private constructor() {}
  /** The one instance. */
  static readonly instance = new AnyField();
}

/** Template field: any value, null included. */
export const Any = AnyField.instance;

/** Template field: numbers (int or float) or strings in [lo, hi]. */
export class RangeField {
  constructor(
    readonly lo: Field,
    readonly hi: Field,
  ) {}
}

/** Template field matching numbers or strings between `lo` and `hi`, both included. */
export function range(lo: Field, hi: Field): RangeField {
  return new RangeField(lo, hi);
}

/** Template field: strings (or bytes) that start with a prefix. */
export class PrefixField {
  constructor(readonly prefix: string | Uint8Array) {}
}

/** Template field matching strings (or bytes) that start with `p`. */
export function prefix(p: string | Uint8Array): PrefixField {
  return new PrefixField(p);
}

/** Template field: exactly this value (what any other value in a template means). */
export class ActualField {
  constructor(readonly value: Field) {}
}

/**
 * Template field matching exactly `v`: needed only for a string that reads
 * like the CLI's formals ("?int", "?str", "?"), which a template refuses.
 */
export function actual(v: Field): ActualField {
  return new ActualField(v);
}

/** One field of a template. */
export type FieldPattern = Field | Formal | AnyField | RangeField | PrefixField | ActualField;

/** A template: one pattern per tuple field. */
export class Template {
  readonly fields: readonly FieldPattern[];
  constructor(fields: Iterable<FieldPattern>) {
    this.fields = [...fields];
  }
}

/** A template from its fields: `tpl("job", Int, Any, range(1, 9))`. */
export function tpl(...fields: FieldPattern[]): Template {
  return new Template(fields);
}

/**
 * What a call accepts as templates: one Template, one array of field
 * patterns, or an array of Templates (alternatives: any one may match).
 */
export type Templates = Template | readonly FieldPattern[] | readonly Template[];

/** The templates as a list of alternatives. */
export function alternatives(t: Templates | undefined): Template[] {
  if (t === undefined) return [];
  if (t instanceof Template) return [t];
  if (t.length > 0 && t.every((x) => x instanceof Template)) return [...(t as readonly Template[])];
  return [new Template(t as readonly FieldPattern[])];
}
