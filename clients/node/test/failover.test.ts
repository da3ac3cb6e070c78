// Clients that follow the primary, against real boards: a primary
// (--replication-token) and a standby (--standby-of) that refuses clients
// with NotPrimary naming the primary; a failover done by hand (kill -9 the
// primary, stop the standby, start a board on the standby's directory and
// address) while a client posts and a subscription consumes.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { addressesOf, Client, connect, InvalidArgument, refused, Unavailable, type Delivery } from "../src/index.js";
import { freeAddress, Server } from "./server.js";

const TOKEN = "cluster-secret";

/** A primary and its standby, started; stop() ends both. */
async function pair(): Promise<{ primary: Server; standby: Server; stop(): Promise<void> }> {
  const primary = new Server(["--replication-token", TOKEN, "--sync-timeout-ms", "60000"]);
  await primary.start();
  const standby = new Server(["--replication-token", TOKEN, "--standby-of", primary.address]);
  await standby.start();
  return { primary, standby, stop: async () => void (await Promise.all([primary.stop(), standby.stop()])) };
}

const waitFor = async (cond: () => boolean, what: string, ms = 120_000): Promise<void> => {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

describe("failover", () => {
  it("reads a list of addresses and knows a refusal", () => {
    assert.deepEqual(addressesOf("a:1, b:2"), ["a:1", "b:2"]);
    assert.deepEqual(addressesOf(["a:1"]), ["a:1"]);
    assert.throws(() => addressesOf("a:1,,b:2"), InvalidArgument);
    const notPrimary = Object.assign(new Unavailable("standby"), { reason: "NotPrimary" });
    assert.ok(refused(notPrimary));
    assert.ok(refused(new Unavailable("No connection established. Last error: connect ECONNREFUSED")));
    assert.ok(!refused(new Unavailable("Connection dropped")));
  });

  it("gives a host named without a port the board's port, 7878, not gRPC's 443", () => {
    assert.deepEqual(addressesOf("127.0.0.1"), ["127.0.0.1:7878"]);
    assert.deepEqual(addressesOf("localhost,b:9,[::1]"), ["localhost:7878", "b:9", "[::1]:7878"]);
    assert.deepEqual(addressesOf(["::1", "[::1]:9", "h"]), ["[::1]:7878", "[::1]:9", "h:7878"]);
    // gRPC targets with a scheme are left as they are.
    assert.deepEqual(addressesOf("unix:/tmp/b.sock,dns:///h:7"), ["unix:/tmp/b.sock", "dns:///h:7"]);
    const c = new Client("127.0.0.1", { token: "t" }); // loopback still: the token may go
    try {
      assert.equal(c.address, "127.0.0.1:7878");
      assert.match(c.connection.stub.getChannel().getTarget(), /127\.0\.0\.1:7878$/);
    } finally {
      c.close();
    }
  });

  it("lands on the primary given [standby, primary], and skips a dead address", async () => {
    const { primary, standby, stop } = await pair();
    try {
      const c = await connect([standby.address, primary.address]);
      await c.createQueue("jobs");
      assert.equal(c.address, primary.address);
      const seq = await c.post("jobs", ["job", 1]);
      const [m] = await c.read("jobs");
      assert.equal(m?.seq, seq);
      assert.ok(m?.key, "keyed by the client, so that it may be sent again");
      c.close();
      const dead = await freeAddress();
      const d = await connect(`${dead},${primary.address}`);
      assert.equal((await d.read("jobs"))[0]?.seq, seq);
      assert.equal(d.address, primary.address);
      d.close();
      // One address, failover off: the standby's refusal is the answer.
      const one = await connect(standby.address);
      await assert.rejects(one.stats(), (e: unknown) => e instanceof Unavailable && (e as Unavailable).reason === "NotPrimary");
      one.close();
    } finally {
      await stop();
    }
  });

  it("loses no answered post and doubles none through a failover by hand; a subscription resumes", async () => {
    const { primary, standby, stop } = await pair();
    let board: Server | undefined;
    const c = await connect([standby.address, primary.address], { failoverMs: 120_000 });
    try {
      await c.createQueue("jobs");
      await c.createQueue("feed");
      const sub = c.subscribe("feed", { credit: 10 });
      const got: string[] = [];
      const consumed = (async () => {
        for await (const d of sub as AsyncIterable<Delivery>) {
          const body = Buffer.from(d.message.body ?? []).toString();
          got.push(body);
          if (body !== "unacked") d.ack();
        }
      })();
      await c.post("feed", [], { body: "acked" });
      await c.post("feed", [], { body: "unacked" });
      await waitFor(() => got.length === 2 && sub.acked.size === 1, "both delivered, the first acked");

      const answered: string[] = [];
      let stopPosting = false;
      let failure: unknown;
      const posting = (async () => {
        for (let i = 0; !stopPosting; i++) {
          try {
            await c.post("jobs", [], { body: `jobs-${i}` });
          } catch (e) {
            failure = e;
            return;
          }
          answered.push(`jobs-${i}`);
        }
      })();
      await waitFor(() => answered.length >= 20, "posts before the kill");
      await primary.halt("SIGKILL");
      await standby.halt("SIGTERM");
      board = new Server(["--listen", standby.address], standby.dir);
      await board.start();
      const before = answered.length;
      await waitFor(() => answered.length >= before + 20 || failure !== undefined, "posts resume");
      stopPosting = true;
      await posting;
      assert.equal(failure, undefined);
      await c.post("feed", [], { body: "after" });
      await waitFor(() => got.includes("after") && got.filter((b) => b === "unacked").length === 2, "the subscription resumed");
      assert.equal(got.filter((b) => b === "acked").length, 1);
      await sub.close();
      await consumed;

      const page = await c.browse("jobs", { limit: 10_000, section: "unprocessed" });
      const stored = page.messages.map((m) => Buffer.from(m.body ?? []).toString());
      const counts = new Map<string, number>();
      for (const b of stored) counts.set(b, (counts.get(b) ?? 0) + 1);
      assert.deepEqual(answered.filter((b) => counts.get(b) !== 1), [], "answered posts not stored exactly once");
      assert.deepEqual(stored.filter((b) => (counts.get(b) ?? 0) > 1), [], "stored twice");
    } finally {
      c.close();
      await board?.stop();
      await stop();
    }
  });
});
