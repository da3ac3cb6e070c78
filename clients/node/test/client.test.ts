// The client against a real board: each test is a small story.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Any,
  Client,
  connect,
  float,
  Float,
  int,
  Int,
  InvalidArgument,
  MsgboardError,
  NotFound,
  prefix,
  QueueExists,
  QueueFull,
  QueueNotFound,
  range,
  Str,
  tpl,
} from "../src/index.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Server } from "./server.js";

let server: Server;
let board: Client;
let n = 0;
/** A queue name of its own for each test. */
const fresh = (): string => `node-${process.pid}-${++n}`;

before(async () => {
  server = new Server();
  board = await connect(await server.start());
});

after(async () => {
  board?.close();
  await server?.stop();
});

describe("queues", () => {
  it("creates, lists, gets and deletes a queue; a missing one is QueueNotFound", async () => {
    const q = fresh();
    const made = await board.createQueue(q, { maxHistory: 10, overflow: "drop-new", maxUnprocessed: 5 });
    assert.equal(made.name, q);
    assert.equal(made.spec.overflow, "drop-new");
    assert.equal(made.spec.maxHistory, 10);
    assert.equal((await board.createQueue(q, { maxHistory: 10, overflow: "drop-new", maxUnprocessed: 5 })).name, q);
    const all = fresh();
    assert.equal((await board.createQueue(all, { maxHistory: Infinity })).spec.maxHistory, Infinity);
    await assert.rejects(board.createQueue(q, { maxHistory: 3 }), QueueExists);
    assert.ok((await board.listQueues()).some((x) => x.name === q));
    await board.deleteQueue(q);
    const err = await board.getQueue(q).catch((e: unknown) => e);
    assert.ok(err instanceof QueueNotFound);
    assert.ok(err instanceof NotFound && err instanceof MsgboardError);
    assert.equal(err.code, "NOT_FOUND");
    assert.equal(err.reason, "QueueNotFound");
    assert.deepEqual(err.metadata, { queue: q });
  });
});

describe("tuples and templates", () => {
  it("keeps ints, floats, null, bytes and bigints as they were posted", async () => {
    const q = fresh();
    await board.createQueue(q);
    const big = 2n ** 62n + 1n;
    await board.post(q, ["job", 7, float(7), 2.5, null, true, Buffer.from([0, 1]), big, int("-9007199254740993")]);
    const [m] = await board.take(q);
    assert.deepEqual(m!.tuple, ["job", 7n, 7, 2.5, null, true, Buffer.from([0, 1]), big, -9007199254740993n]);
    assert.equal(m!.section, "history");
    assert.equal(m!.deliveryCount, 1);
  });

  it("matches int and float apart, formals, Any, ranges and prefixes", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.postMessages(q, [["n", float(7)], ["n", 7], ["job", 3n, "resize", 4], ["jobs", 1]]);
    assert.deepEqual((await board.read(q, tpl("n", int(7)))).map((m) => m.seq), [2]);
    assert.deepEqual((await board.read(q, tpl("n", 7))).map((m) => m.seq), [2]);
    assert.deepEqual((await board.read(q, tpl("n", Float))).map((m) => m.seq), [1]);
    assert.deepEqual((await board.read(q, ["job", Int, Any, range(1, 9)])).map((m) => m.seq), [3]);
    assert.deepEqual((await board.read(q, tpl(prefix("job"), Any), { max: 10 })).map((m) => m.seq), [4]);
    // Alternatives: either template may match.
    const alts = [tpl("n", Float), tpl(Str, Int)];
    assert.deepEqual((await board.read(q, alts, { max: 10 })).map((m) => m.seq), [1, 2, 4]);
  });

  it("refuses an unsafe integer number before sending, naming the field", async () => {
    const q = fresh();
    await board.createQueue(q);
    const err = await board.post(q, ["a", 2 ** 60]).catch((e: unknown) => e);
    assert.ok(err instanceof InvalidArgument);
    assert.equal(err.field, "messages[0].tuple[1]");
    assert.throws(() => int(2 ** 60), InvalidArgument);
    assert.throws(() => int(2n ** 63n), InvalidArgument);
  });

  it("selects by address pattern and filter", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.post(q, ["a"], { address: "rec.pets.cats", priority: 5 });
    await board.post(q, ["b"], { address: "rec.pets.dogs", priority: 1 });
    await board.post(q, ["c"], { address: "rec.cars", priority: 9 });
    const seqs = async (o: object) => (await board.read(q, { max: 10, ...o })).map((m) => m.seq);
    assert.deepEqual(await seqs({ address: "topic:rec.pets.*" }), [1, 2]);
    assert.deepEqual(await seqs({ address: "prefix:rec.c" }), [3]);
    assert.deepEqual(await seqs({ address: "rec.pets.dogs" }), [2]);
    assert.deepEqual(await seqs({ filter: "priority > 3" }), [1, 3]);
    const err = await board.read(q, { filter: "priority >" }).catch((e: unknown) => e);
    assert.ok(err instanceof InvalidArgument);
  });

  it("waits for a match as long as the timeout says, and answers empty after it", async () => {
    const q = fresh();
    await board.createQueue(q);
    assert.deepEqual(await board.take(q, tpl("x"), { timeout: 50 }), []);
    const waiting = board.take(q, tpl("x"), { timeout: 30_000 });
    await board.post(q, ["x"]);
    assert.deepEqual((await waiting).map((m) => m.tuple), [["x"]]);
  });
});

describe("posting", () => {
  it("posts many over one stream, in order, and reports a refused batch after the stream", async () => {
    const q = fresh();
    await board.createQueue(q);
    async function* gen() {
      for (let i = 0; i < 1200; i++) yield [int(i)];
    }
    const seqs = await board.postMany(q, gen(), { batch: 500 });
    assert.deepEqual(seqs, Array.from({ length: 1200 }, (_, i) => i + 1));
    assert.equal((await board.getQueue(q)).unprocessed, 1200);
    const page = await board.browse(q, { start: "latest", reverse: true, limit: 2 });
    assert.deepEqual(page.messages.map((m) => m.tuple), [[1199n], [1198n]]);
    assert.equal(page.nextSeq, 1198);
    const next = await board.browse(q, { start: page.nextSeq, reverse: true, limit: 1 });
    assert.deepEqual(next.messages.map((m) => m.seq), [1198]);
    await assert.rejects(board.postMany("no-such-queue-" + q, [["a"]]), QueueNotFound);
    const many = Array.from({ length: 5000 }, (_, i) => [i]);
    await assert.rejects(board.postMany("no-such-queue-" + q, many, { batch: 10 }), QueueNotFound);
  });

  it("counts in stats what was posted and taken", async () => {
    const q = fresh();
    await board.createQueue(q);
    assert.deepEqual(await board.postMessages(q, [["a"], ["b"]]), [1, 2]);
    await board.take(q);
    const s = await board.stats(q);
    assert.equal(s.queues.length, 1);
    assert.deepEqual(
      [s.queues[0]!.name, s.queues[0]!.posted, s.queues[0]!.taken, s.queues[0]!.unprocessed, s.queues[0]!.transient],
      [q, 2, 1, 1, false],
    );
    assert.ok(s.commits > 0 && s.mapSize > 0);
  });

  it("answers receipts with what became of each message", async () => {
    const q = fresh();
    await board.createQueue(q, { maxUnprocessed: 1, overflow: "drop-new" });
    const r = await board.postReceipts(q, [{ tuple: ["a"], headers: { k: "v" }, body: "hi" }, ["b"]]);
    assert.deepEqual(r, [
      { seq: 1, disposition: "stored" },
      { seq: 0, disposition: "dropped" },
    ]);
    const [m] = await board.read(q);
    assert.equal(m!.body.toString(), "hi");
    assert.deepEqual(m!.headers, { k: "v" });
  });

  it("takes the drop-head policy: a post to a full queue drops the oldest waiting message", async () => {
    const q = fresh();
    const made = await board.createQueue(q, { maxUnprocessed: 2, overflow: "drop-head", maxHistory: 10 });
    assert.equal(made.spec.overflow, "drop-head");
    assert.equal((await board.getQueue(q)).spec.overflow, "drop-head");
    const r = await board.postReceipts(q, [["a"], ["b"], ["c"]]);
    assert.deepEqual(
      r.map((x) => [x.seq, x.disposition]),
      [
        [1, "stored"],
        [2, "stored"],
        [3, "stored"],
      ],
    );
    assert.deepEqual(
      (await board.read(q, undefined, { max: 5 })).map((m) => m.seq),
      [2, 3],
    );
    // The dropped one left into history (its exit, `dropped`, is not in the Node Message).
    assert.deepEqual(
      (await board.browse(q, { section: "history" })).messages.map((m) => m.seq),
      [1],
    );
  });
});

describe("keys, schedules and retries", () => {
  it("answers a repeated key with the first seq, as a duplicate", async () => {
    const q = fresh();
    await board.createQueue(q);
    assert.equal(await board.post(q, ["a"], { key: "k1" }), 1);
    const [r] = await board.postReceipts(q, [{ tuple: ["b"], key: "k1" }]);
    assert.deepEqual([r.seq, r.disposition], [1, "duplicate"]);
    const [m] = (await board.browse(q)).messages;
    assert.equal(m.key, "k1");
  });

  it("keeps a delayed message unseen, then hands it out under its seq", async () => {
    const q = fresh();
    await board.createQueue(q);
    assert.equal(await board.post(q, ["later"], { delayMs: 500 }), 1);
    assert.deepEqual((await board.read(q, { max: 10 })).length, 0);
    const [s] = (await board.browse(q, { section: "scheduled" })).messages;
    assert.equal(s.section, "scheduled");
    assert.ok(s.notBefore instanceof Date);
    const [m] = await board.take(q, { timeout: 30000 });
    assert.equal(m.seq, 1);
    assert.ok(Date.now() >= s.notBefore!.getTime() - 5);
  });

  it("creates a queue with a dedup window and a redelivery policy, and reads them back", async () => {
    const q = fresh();
    const made = await board.createQueue(q, { dedupWindowMs: 0, redelivery: { initialMs: 1000, multiplier: 2, maxMs: 300000 } });
    assert.equal(made.spec.dedupWindowMs, 0);
    assert.deepEqual(made.spec.redelivery, { initialMs: 1000, multiplier: 2, maxMs: 300000 });
    const bad = await board.createQueue(fresh(), { redelivery: { initialMs: 1000, multiplier: 0.5, maxMs: 2000 } }).catch((e: unknown) => e);
    assert.ok(bad instanceof InvalidArgument);
    assert.equal(bad.field, "spec.redelivery.multiplier");
  });

  it("postIdempotent keys its posts and waits for a board that went down", async () => {
    const data = mkdtempSync(join(tmpdir(), "msgboard-node-data-"));
    const first = new Server(["--data", data]);
    const addr = await first.start();
    const c = await connect(addr);
    try {
      await c.createQueue("jobs");
      const [r1] = await c.postIdempotent("jobs", [["a"]]);
      assert.equal(r1.seq, 1);
      assert.equal((await c.browse("jobs")).messages[0].key.length, 36); // its UUID
      await first.stop();
      const pending = c.postIdempotent("jobs", [{ tuple: ["b"], key: "k" }]);
      const second = new Server(["--data", data, "--listen", addr]);
      await second.start();
      try {
        const [r2] = await pending;
        assert.deepEqual([r2.seq, r2.disposition], [2, "stored"]);
        const [again] = await c.postIdempotent("jobs", [{ tuple: ["b"], key: "k" }]); // an answer lost, retried
        assert.deepEqual([again.seq, again.disposition], [2, "duplicate"]);
      } finally {
        await second.stop();
      }
    } finally {
      c.close();
      rmSync(data, { recursive: true, force: true });
    }
  });

  it("holds a message nacked with a delay back, and Browse says until when", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.post(q, ["x"]);
    const sub = board.subscribe(q, { credit: 1 });
    for await (const d of sub) {
      d.nack({ delayMs: 3_600_000 });
      break;
    }
    await sub.close();
    const [m] = (await board.browse(q)).messages;
    assert.equal(m.deliveryCount, 1);
    assert.ok(m.redeliverAt instanceof Date && m.redeliverAt.getTime() > Date.now() + 3_000_000);
  });
});

describe("leases", () => {
  it("a leased take stays invisible until acked; a nack gives it back", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.postMessages(q, [["a"], ["b"]]);
    const [l1] = await board.takeLeased(q, { lease: 60_000 });
    assert.deepEqual(l1!.message.tuple, ["a"]);
    const [l2] = await board.takeLeased(q, { lease: 60_000 });
    assert.deepEqual(l2!.message.tuple, ["b"]);
    assert.deepEqual(await board.take(q), []);
    await l1!.ack();
    await l2!.nack();
    const [again] = await board.take(q, { timeout: 30000 }); // after the nack backoff
    assert.deepEqual(again!.tuple, ["b"]);
    assert.equal(again!.deliveryCount, 2);
    await assert.rejects(l1!.ack(), NotFound);
  });

  it("acks are per lease: one the board cannot ack comes back in rejected, the others go through", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.postMessages(q, [["a"], ["b"]]);
    const [l1, l2] = await board.takeLeased(q, { lease: 60_000, max: 2 });
    await l1!.ack();
    const got = await board.ack(q, [l1!, 999_999_999, l2!]);
    assert.deepEqual(got.ids, [l2!.id]);
    assert.deepEqual([...got.rejected.keys()], [l1!.id, 999_999_999]);
    const gone = got.rejected.get(l1!.id);
    assert.ok(gone instanceof NotFound && gone.field === "lease_ids[0]", String(gone));
    const never = got.rejected.get(999_999_999);
    assert.ok(never instanceof InvalidArgument && never.field === "lease_ids[1]", String(never));
    assert.equal((await board.getQueue(q)).unprocessed, 0);
    await assert.rejects(board.ack(q, []), InvalidArgument);
  });
});

describe("selectors", () => {
  it("a MOVE selector moves matching messages to another queue; a COPY copies", async () => {
    const [src, moved, copied] = [fresh(), fresh(), fresh()];
    for (const q of [src, moved, copied]) await board.createQueue(q);
    const sel = await board.createSelector(src, { to: moved, templates: tpl("job", Int) });
    assert.equal(sel.spec.op, "move");
    assert.equal(sel.source, src);
    const copy = await board.createSelector(src, { op: "copy", to: copied, quota: 1 });
    assert.equal(copy.spec.quota, 1);
    await assert.rejects(board.createSelector(src, { to: copied, credit: 5 }), InvalidArgument);
    await board.postMessages(src, [["job", 1], ["other"]]);
    assert.deepEqual((await board.take(moved, undefined, { timeout: 30_000 }))[0]!.tuple, ["job", 1n]);
    assert.equal((await board.take(copied, undefined, { timeout: 30_000, max: 2 })).length >= 1, true);
    assert.deepEqual((await board.read(src))[0]!.tuple, ["other"]);
    assert.deepEqual(
      (await board.listSelectors(src)).map((s) => s.id).sort(),
      [sel.id, copy.id].sort(),
    );
    assert.equal((await board.getSelector(sel.id)).spec.to, moved);
    await board.deleteSelector(sel.id);
    await assert.rejects(board.getSelector(sel.id), NotFound);
  });
});

describe("subscribe", () => {
  it("delivers with credit as an async iterator; acks are answered, a stale ack is rejected", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.postMessages(q, [["a"], ["b"], ["c"]]);
    const sub = board.subscribe(q, { credit: 2 });
    const sel = await sub.ready();
    assert.equal(sel.source, q);
    assert.equal(sub.effectiveCredit, 2);
    const got: string[] = [];
    for await (const d of sub) {
      got.push(d.message.tuple[0] as string);
      d.ack();
      if (got.length === 3) break;
    }
    assert.deepEqual(got, ["a", "b", "c"]);
    sub.ack(1); // already acked: rejected, as information
    await sub.close();
    assert.deepEqual([...sub.acked].sort(), [1, 2, 3]);
    assert.ok(sub.rejected.get(1) instanceof NotFound);
    assert.equal((await board.getQueue(q)).unprocessed, 0);
  });

  it("coalesces acks made while one is in flight into one request", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.postMessages(q, [["a"], ["b"], ["c"], ["d"]]);
    const sub = board.subscribe(q, undefined, { credit: 10 });
    const ds = [];
    for (let i = 0; i < 4; i++) ds.push((await sub.next())!);
    const r1 = sub.ack(ds[0]!);
    const r2 = sub.ack(ds[1]!);
    const r3 = sub.ack(ds[2]!, ds[3]!);
    assert.notEqual(r1, r2);
    assert.equal(r2, r3); // held together while r1 is in flight
    await sub.close();
    assert.deepEqual([...sub.acked].sort(), [1, 2, 3, 4]);
  });

  it("a nack gives a delivery back for redelivery; a bad nack is a typed error with its ref", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.post(q, ["a"]);
    const sub = board.subscribe(q, tpl(Str), { credit: 5 });
    const d1 = (await sub.next())!;
    sub.nack([d1]);
    const d2 = (await sub.next())!;
    assert.deepEqual(d2.message.tuple, ["a"]);
    assert.equal(d2.message.deliveryCount, 2);
    const ref = sub.nack([999]);
    const err = await sub.next().catch((e: unknown) => e);
    assert.ok(err instanceof MsgboardError);
    assert.equal(err.ref, ref);
    sub.ack(d2);
    await sub.close();
    assert.ok(sub.acked.has(d2.id));
  });

  it("attaches to a durable terminal selector; a COPY subscriber replays history from the head", async () => {
    const q = fresh();
    await board.createQueue(q, { maxHistory: 100 });
    const sel = await board.createSelector(q, { templates: tpl("t", Int), credit: 5 });
    await board.postMessages(q, [["t", 1], ["u"]]);
    const sub = board.subscribe("", { selector: sel.id });
    assert.equal((await sub.ready()).id, sel.id);
    const d = (await sub.next())!;
    assert.deepEqual(d.message.tuple, ["t", 1n]);
    d.ack();
    await sub.close();
    assert.deepEqual([...sub.acked], [d.id]);
    const copy = board.subscribe(q, { copy: true, start: "oldest", credit: 10 });
    assert.equal((await copy.ready()).spec.op, "copy");
    assert.deepEqual((await copy.next())!.message.tuple, ["t", 1n]);
    copy.cancel();
  });

  it("a subscription to a missing queue fails with QueueNotFound", async () => {
    const sub = board.subscribe(fresh());
    await assert.rejects(sub.ready(), QueueNotFound);
  });
});

describe("waiting messages", () => {
  it("moves by seq and by pattern, resubmits dead letters, deletes, releases and purges", async () => {
    const q = fresh(), dlq = fresh(), parked = fresh();
    await board.createQueue(dlq);
    await board.createQueue(q, { maxUnprocessed: 2, overflow: "dead-letter", deadLetter: dlq, maxHistory: 10 });
    await board.createQueue(parked);
    for (let i = 0; i < 4; i++) await board.post(q, ["order", i], { key: `k${i}` });
    await board.take(q, { max: 2 });
    // The two dead letters, each back on its origin queue.
    assert.deepEqual(await board.moveMessages(dlq, "", { all: true }), [
      { seq: 1, queue: q, newSeq: 3 },
      { seq: 2, queue: q, newSeq: 4 },
    ]);
    const [back] = await board.read(q);
    assert.equal(back!.key, "k2");
    assert.equal(back!.headers["x-moved-from"], dlq);
    assert.deepEqual(await board.moveMessages(q, parked, { seqs: [4] }), [{ seq: 4, queue: parked, newSeq: 1 }]);
    assert.deepEqual(await board.deleteMessages(parked, { templates: tpl("order", Int) }), [1]);
    const [leased] = await board.takeLeased(q, undefined, { lease: 3_600_000 });
    const [info] = await board.listLeases(q);
    assert.deepEqual([info!.id, info!.queue, info!.seq], [leased!.id, q, 3]);
    assert.equal(info!.until.getTime() - info!.since.getTime(), 3_600_000);
    assert.deepEqual(await board.releaseMessages(q, [leased!.message.seq]), [3]);
    assert.deepEqual(await board.listLeases(q), []);
    assert.deepEqual(await board.purgeQueue(q, { history: true }), { purged: 1, history: 3 });
    assert.equal((await board.getQueue(q)).unprocessed, 0);
  });

  it("refuses a bad move with its typed error and moves nothing", async () => {
    const q = fresh(), full = fresh();
    await board.createQueue(q);
    await board.createQueue(full, { maxUnprocessed: 1 });
    await board.postMessages(q, [["a"], ["b"]]);
    await assert.rejects(board.moveMessages(q, full, { all: true }), QueueFull);
    await assert.rejects(board.moveMessages(q, fresh(), { all: true }), QueueNotFound);
    const same = await board.moveMessages(q, q, { all: true }).catch((e: unknown) => e);
    assert.ok(same instanceof InvalidArgument);
    assert.equal(same.field, "destination");
    const gone = await board.deleteMessages(q, { seqs: [1, 9] }).catch((e: unknown) => e);
    assert.ok(gone instanceof NotFound);
    assert.ok(gone.message.includes("seqs[1]"), gone.message);
    assert.equal((await board.getQueue(q)).unprocessed, 2);
  });
});

describe("snapshots", () => {
  it("writes a snapshot, and refuses a relative path on an open board", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.post(q, ["a"]);
    const snap = await board.snapshot(`${server.dir}/snap-${q}`);
    assert.ok(snap.messages >= 1);
    assert.ok(snap.takenAt instanceof Date);
    await assert.rejects(board.snapshot("relative"), InvalidArgument);
  });
});
