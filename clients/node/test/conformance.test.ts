// The shared conformance cases (conformance/cases/*.json at the repository's
// root), run through this client: one test per case, against one real board
// on a free loopback port. The format is conformance/README.md. Requests are
// read with the client's JSON mapping (src/json.ts) and sent through its
// Connection (channel, metadata, deadlines); failures are the client's
// typed errors, whose class, code and field the cases check.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Connection, type Duplex } from "../src/connection.js";
import { MsgboardError } from "../src/errors.js";
import { fromJSON, toJSON } from "../src/json.js";
import { root } from "../src/proto.js";
import { REPO_DIR, Server } from "./server.js";

type Json = any;
interface Case {
  file: string;
  index: number;
  name: string;
  steps: Json[];
}

const CASES = join(REPO_DIR, "conformance", "cases");
/** Ms a call may take beyond the timeout its request carries. */
const DEADLINE = 30_000;
const RUN = "c" + randomBytes(3).toString("hex");
const VAR = /\$\{(\w+)\}/g;
const NOT_SET = "$unset";
const ABSENT = Symbol("absent");
const KINDS = ["subscribed", "deliveries", "error", "acked"];
const service = root.lookupService("msgboard.v1.Board");

function load(): Case[] {
  const out: Case[] = [];
  for (const file of readdirSync(CASES).filter((f) => f.endsWith(".json")).sort()) {
    for (const c of JSON.parse(readFileSync(join(CASES, file), "utf8")).cases) {
      out.push({ file: file.replace(/\.json$/, ""), index: out.length, name: c.name, steps: c.steps });
    }
  }
  return out;
}

const ALL = load();
let server: Server;
let connection: Connection;

before(async () => {
  server = new Server();
  connection = new Connection(await server.start(), { timeout: DEADLINE });
  await connection.ready();
});

after(async () => {
  connection?.close();
  await server?.stop();
});

it("has cases, with names unique per file", () => {
  assert.ok(ALL.length > 0, `no cases in ${CASES}`);
  const ids = ALL.map((c) => `${c.file}/${c.name}`);
  assert.equal(new Set(ids).size, ids.length);
});

for (const file of [...new Set(ALL.map((c) => c.file))]) {
  describe(file, () => {
    for (const c of ALL.filter((x) => x.file === file)) {
      it(c.name, async () => {
        const run = new Run(c);
        try {
          for (const [i, step] of c.steps.entries()) {
            try {
              await run.step(step);
            } catch (e) {
              if (e instanceof assert.AssertionError) e.message = `step ${i} ${JSON.stringify(step)}: ${e.message}`;
              throw e;
            }
          }
        } finally {
          run.cancel();
        }
      });
    }
  });
}

// ---------------------------------------------------------------- matching

function match(expect: Json, actual: Json, where = ""): void {
  const at = where || "response";
  if (actual === ABSENT) assert.fail(`${at}: absent, expected ${JSON.stringify(expect)}`);
  if (expect !== null && typeof expect === "object" && !Array.isArray(expect)) {
    assert.ok(actual !== null && typeof actual === "object" && !Array.isArray(actual), `${at}: ${JSON.stringify(actual)} is not an object`);
    for (const k of expect[NOT_SET] ?? []) {
      assert.ok(!(k in actual), `${at}: has ${k} = ${JSON.stringify(actual[k])}, expected it unset`);
    }
    for (const [k, v] of Object.entries(expect)) {
      if (k !== NOT_SET) match(v, k in actual ? actual[k] : ABSENT, where ? `${where}.${k}` : k);
    }
  } else if (Array.isArray(expect)) {
    assert.ok(Array.isArray(actual), `${at}: ${JSON.stringify(actual)} is not an array`);
    assert.equal(actual.length, expect.length, `${at}: ${actual.length} items, expected ${expect.length}`);
    expect.forEach((e, i) => match(e, actual[i], `${where}[${i}]`));
  } else {
    const same =
      expect === actual ||
      (typeof expect === "number" && typeof actual === "number" && Number.isNaN(expect) && Number.isNaN(actual));
    assert.ok(same, `${at}: ${JSON.stringify(actual)}, expected ${JSON.stringify(expect)}`);
  }
}

function lookup(value: Json, path: string): Json {
  for (const [, name, index] of path.matchAll(/([A-Za-z_]\w*)|\[(\d+)\]/g)) {
    value = index !== undefined ? value[Number(index)] : value[name!];
    if (value === undefined) throw new assert.AssertionError({ message: `no ${path}` });
  }
  return value;
}

function checkError(expect: Json, e: unknown): void {
  if (!(e instanceof MsgboardError)) throw e;
  const got: Record<string, string> = { code: e.code, reason: e.constructor.name, field: e.field };
  for (const key of ["code", "reason", "field"]) {
    if (key in expect) assert.equal(got[key], expect[key], `error ${key} ${got[key]}, expected ${expect[key]} (${e.message})`);
  }
  if ("contains" in expect) assert.ok(e.message.includes(expect.contains), `error "${e.message}" lacks "${expect.contains}"`);
}

// ---------------------------------------------------------------- running

/** Ms the request asks the board to wait (Take and Read timeouts). */
function waits(request: Json): number {
  const t = request.timeout;
  return t ? Number(t.seconds ?? 0) * 1000 + Number(t.nanos ?? 0) / 1e6 : 0;
}

class Stream {
  held: Json[] = [];
  constructor(
    readonly duplex: Duplex,
    readonly requestType: string,
    readonly responseType: string,
  ) {}

  async next(): Promise<{ kind: string | undefined; json: Json } | undefined> {
    const r = await this.duplex.next();
    if (r === undefined) return undefined;
    const json = toJSON(this.responseType, r);
    return { kind: KINDS.find((k) => k in json && this.responseType === "msgboard.v1.SubscribeResponse"), json };
  }
}

class Run {
  vars: Record<string, Json> = {};
  streams = new Map<string, Stream>();

  constructor(readonly c: Case) {}

  async step(raw: Json): Promise<void> {
    const step = this.substitute(raw);
    if ("stream" in step) await this.streamStep(step);
    else await this.unary(step);
  }

  substitute(v: Json): Json {
    if (Array.isArray(v)) return v.map((x) => this.substitute(x));
    if (v !== null && typeof v === "object") {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.substitute(x)]));
    }
    if (typeof v === "string") {
      const whole = /^\$\{(\w+)\}$/.exec(v);
      if (whole) return this.var(whole[1]!);
      return v.replace(VAR, (_, name: string) => String(this.var(name)));
    }
    return v;
  }

  var(name: string): Json {
    if (/^q\d*$/.test(name)) return `${RUN}-${this.c.index}-${name}`;
    assert.ok(name in this.vars, `unknown variable \${${name}}`);
    return this.vars[name];
  }

  capture(step: Json, response: Json): void {
    for (const [name, path] of Object.entries(step.capture ?? {})) {
      this.vars[name] = lookup(response, path as string);
    }
  }

  async unary(step: Json): Promise<void> {
    const method = service.methods[step.call];
    assert.ok(method, `no RPC ${step.call}`);
    method.resolve();
    const request = fromJSON(method.resolvedRequestType!, step.request ?? {});
    let response: Json;
    try {
      response = await connection.unary(step.call, request, waits(request));
    } catch (e) {
      if (!(e instanceof MsgboardError)) throw e;
      assert.ok("error" in step, `failed: ${e.constructor.name}: ${e.message}`);
      checkError(step.error, e);
      return;
    }
    const got = toJSON(method.resolvedResponseType!, response);
    assert.ok(!("error" in step), `succeeded: ${JSON.stringify(got)}`);
    if ("expect" in step) match(step.expect, got);
    this.capture(step, got);
  }

  async streamStep(step: Json): Promise<void> {
    const name = step.stream;
    if (!this.streams.has(name)) {
      assert.ok("call" in step, `stream ${name} is not open and the step has no call`);
      const method = service.methods[step.call]!;
      method.resolve();
      const duplex = connection.duplex(step.call, Date.now() + 2 * DEADLINE);
      this.streams.set(
        name,
        new Stream(duplex, method.resolvedRequestType!.fullName.slice(1), method.resolvedResponseType!.fullName.slice(1)),
      );
    }
    const s = this.streams.get(name)!;
    if ("send" in step) await s.duplex.send(fromJSON(s.requestType, step.send));
    if ("receive" in step) this.capture(step, await this.receive(s, step.receive));
    if (step.close || step.end) {
      if (step.close) s.duplex.end();
      this.streams.delete(name);
      await this.finish(s, step.error);
    }
  }

  async receive(s: Stream, expect: Json): Promise<Json> {
    const kinds = Object.keys(expect).filter((k) => KINDS.includes(k));
    if (!kinds.length || s.responseType !== "msgboard.v1.SubscribeResponse") {
      const got = await this.nextOf(s, undefined);
      match(expect, got);
      return got;
    }
    assert.equal(kinds.length, 1, `receive names ${kinds}: one kind per step`);
    const kind = kinds[0]!;
    if (kind !== "deliveries") {
      const got = await this.nextOf(s, kind);
      match(expect, got);
      return got;
    }
    // Deliveries are one flat sequence (the list's key: Deliveries.items).
    const keys = Object.keys(expect.deliveries);
    assert.ok(Object.keys(expect).length === 1 && keys.length === 1, "a deliveries step has exactly one list");
    const list = keys[0]!;
    const want = expect.deliveries[list];
    const items: Json[] = [];
    while (items.length < want.length) {
      const batch = (await this.nextOf(s, "deliveries")).deliveries[list];
      const room = want.length - items.length;
      items.push(...batch.slice(0, room));
      if (batch.length > room) s.held.unshift({ deliveries: { [list]: batch.slice(room) } });
    }
    const got = { deliveries: { [list]: items } };
    match(expect, got);
    return got;
  }

  /** The next response of `kind` (any: undefined), held ones first. */
  async nextOf(s: Stream, kind: string | undefined): Promise<Json> {
    const i = s.held.findIndex((h) => kind === undefined || kind in h);
    if (i >= 0) return s.held.splice(i, 1)[0];
    for (;;) {
      const r = await s.next();
      assert.ok(r !== undefined, `the stream ended before a response of kind ${kind}`);
      if (kind === undefined || r.kind === kind) return r.json;
      s.held.push(r.json);
    }
  }

  async finish(s: Stream, error: Json): Promise<void> {
    try {
      while ((await s.duplex.next()) !== undefined);
    } catch (e) {
      assert.ok(error, `the stream ended with ${(e as Error).constructor.name}: ${(e as Error).message}`);
      checkError(error, e);
      return;
    }
    assert.ok(!error, "the stream ended OK");
  }

  cancel(): void {
    for (const s of this.streams.values()) s.duplex.cancel();
  }
}
