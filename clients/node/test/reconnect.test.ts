// A subscription outlives a board restart (killed, started again on the
// same port and data directory); connect() to a down board fails fast.

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { connect, MsgboardError, QueueNotFound, Unavailable, type Client, type Delivery } from "../src/index.js";
import { freeAddress, Server } from "./server.js";

/** A board on a fixed port, killed and started again on it. */
async function restartable(): Promise<{ address: string; restart(dir?: string): Promise<void>; stop(): Promise<void> }> {
  const address = await freeAddress();
  let server = new Server(["--listen", address]);
  await server.start();
  return {
    address,
    async restart(dir?: string) {
      await server.halt("SIGKILL");
      server = new Server(["--listen", address], dir ?? server.dir);
      await server.start();
    },
    stop: () => server.stop(),
  };
}

/** Posts ["job", n], trying again while the connection comes back. */
async function post(c: Client, n: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      await c.post("jobs", ["job", n]);
      return;
    } catch (e) {
      if (!(e instanceof Unavailable) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

const jobOf = (d: Delivery): number => Number(d.message.tuple[1]);

/** A delivery as the restart checker sees it. */
type Seen = { id: number; job: number };

/**
 * What a restart broke: each job posted seen at least once; none acked
 * before the restart seen after it; none seen before and not acked missing
 * after; no delivery id reused.
 */
function violations(posted: number[], acked: number[], before: Seen[], after: Seen[]): string[] {
  const all = new Set([...before, ...after].map((d) => d.job));
  const again = new Set(after.map((d) => d.job));
  const first = new Set(before.map((d) => d.job));
  const old = new Set(before.map((d) => d.id));
  const out: string[] = [];
  for (const n of posted) {
    if (!all.has(n)) out.push(`${n} never seen`);
    if (acked.includes(n) && again.has(n)) out.push(`${n} acked, then delivered again`);
    if (first.has(n) && !acked.includes(n) && !again.has(n)) out.push(`${n} not acked, not delivered again`);
  }
  for (const d of after) if (old.has(d.id)) out.push(`delivery id ${d.id} reused`);
  return out;
}

describe("the restart checker", () => {
  it("catches each violation", () => {
    const before = [{ id: 1, job: 1 }, { id: 2, job: 2 }];
    assert.deepEqual(violations([1, 2, 3], [1], before, [{ id: 3, job: 2 }, { id: 4, job: 3 }]), []);
    assert.deepEqual(violations([1, 2, 3], [1], before, [{ id: 3, job: 2 }]), ["3 never seen"]);
    assert.deepEqual(violations([1, 2], [1], before, [{ id: 3, job: 2 }, { id: 4, job: 1 }]), ["1 acked, then delivered again"]);
    assert.deepEqual(violations([1, 2, 3], [1], before, [{ id: 4, job: 3 }]), ["2 not acked, not delivered again"]);
    assert.deepEqual(violations([1, 2], [1], before, [{ id: 2, job: 2 }]), ["delivery id 2 reused"]);
  });
});

describe("a subscription across a board restart", () => {
  it("subscribes again: unacked deliveries come again under new ids, acked ones never", async () => {
    const b = await restartable();
    const c = await connect(b.address);
    try {
      await c.createQueue("jobs", { maxHistory: 10 });
      const heard: (string | undefined)[] = [];
      const sub = c.subscribe("jobs", {
        credit: 10,
        onReconnect: (e: MsgboardError | undefined) => heard.push(e?.code),
      });
      const it = sub[Symbol.asyncIterator]();
      for (const n of [1, 2, 3]) await post(c, n);
      const first: Delivery[] = [];
      while (first.length < 3) first.push((await it.next()).value as Delivery);
      first[0]!.ack();
      for (const deadline = Date.now() + 60_000; (await c.getQueue("jobs")).history < 1; ) {
        assert.ok(Date.now() < deadline, "the ack of job 1 was never applied");
        await new Promise((r) => setTimeout(r, 50));
      }
      await b.restart();
      await post(c, 4);
      const again: Delivery[] = [];
      while (again.length < 3) {
        const d = (await it.next()).value as Delivery;
        again.push(d);
        d.ack();
      }
      const seen = (ds: Delivery[]): Seen[] => ds.map((d) => ({ id: d.id, job: jobOf(d) }));
      assert.deepEqual(violations([1, 2, 3, 4], [1], seen(first), seen(again)), []);
      assert.equal(first[1]!.ack(), 0); // its id is the lost stream's: nothing sent
      assert.equal(sub.rejected.get(first[1]!.id)?.code, "NOT_FOUND");
      assert.deepEqual(heard, ["UNAVAILABLE", undefined]);
      await sub.close();
      for (const deadline = Date.now() + 60_000; (await c.getQueue("jobs")).history < 4; ) {
        assert.ok(Date.now() < deadline, "not every job was acked");
        await new Promise((r) => setTimeout(r, 50));
      }
    } finally {
      c.close();
      await b.stop();
    }
  });

  it("ends when the queue is gone after the restart (NOT_FOUND is no outage)", async () => {
    const b = await restartable();
    const c = await connect(b.address);
    try {
      await c.createQueue("jobs");
      const sub = c.subscribe("jobs");
      await sub.ready();
      await b.restart(mkdtempSync(join(tmpdir(), "msgboard-node-empty-")));
      await assert.rejects(sub.next(), QueueNotFound);
    } finally {
      c.close();
      await b.stop();
    }
  });

  it("ends with Unavailable when told not to reconnect", async () => {
    const b = await restartable();
    const c = await connect(b.address);
    try {
      await c.createQueue("jobs");
      const sub = c.subscribe("jobs", { reconnect: false });
      await sub.ready();
      await b.restart();
      await assert.rejects(sub.next(), Unavailable);
    } finally {
      c.close();
      await b.stop();
    }
  });
});

describe("a kicked subscription", () => {
  it("ends with Kicked (ABORTED) and does not subscribe again", async () => {
    const server = new Server();
    const c = await connect(await server.start());
    try {
      await c.createQueue("jobs");
      const heard: unknown[] = [];
      const sub = c.subscribe("jobs", { onReconnect: (e) => heard.push(e) });
      await sub.ready();
      const { consumers } = await c.connection.unary("ListConsumers", { queue: "jobs" });
      assert.equal(consumers.length, 1);
      await c.connection.unary("KickConsumer", { id: consumers[0].id });
      await assert.rejects(sub.next(), (e: unknown) => {
        assert.ok(e instanceof MsgboardError);
        assert.equal(e.code, "ABORTED");
        assert.equal(e.reason, "Kicked");
        return true;
      });
      assert.deepEqual(heard, []);
    } finally {
      c.close();
      await server.stop();
    }
  });
});

describe("connect", () => {
  it("fails fast, naming the address, when no board listens there", async () => {
    const address = await freeAddress();
    const started = Date.now();
    await assert.rejects(connect(address), (e: unknown) => {
      assert.ok(e instanceof Unavailable);
      assert.match(e.message, new RegExp(`no board answers at ${address}: the connection failed`));
      return true;
    });
    // It used to wait out its 10 s; a refused connection is known at once.
    assert.ok(Date.now() - started < 8_000, `took ${Date.now() - started} ms`);
  });
});
