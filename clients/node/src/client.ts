/**
 * The Node client: `connect(address, options)` gives a `Client` with the
 * same verbs as the Python client, in JS spelling (camelCase, options
 * objects, times in milliseconds, promises):
 *
 * ```ts
 * const board = await connect("127.0.0.1:7878");
 * await board.createQueue("jobs");
 * await board.post("jobs", ["job", 7, "resize", 3], { body: "..." });
 * const [msg] = await board.take("jobs", tpl("job", Int, Any, range(1, 9)), { timeout: 5000 });
 * board.close();
 * ```
 */

import type { Connection, ConnectOptions } from "./connection.js";
import { addressesOf, Failover } from "./failover.js";
import { randomUUID } from "node:crypto";
import { InvalidArgument, type MsgboardError, Unavailable } from "./errors.js";
import {
  choiceTo,
  leasesFrom,
  movedFrom,
  purgedFrom,
  seqsFrom,
  type ChooseOptions,
  type LeaseInfo,
  type Moved,
  type Purged,
} from "./maintenance.js";
import { messageType } from "./proto.js";
import { streamError, Subscription, type ReconnectOptions } from "./subscription.js";
import { Template, type Field, type Templates } from "./values.js";
import {
  date,
  duration,
  enumTo,
  messageFrom,
  messageTo,
  num,
  patternTo,
  queueFrom,
  queueSpecTo,
  receiptsFrom,
  redeliveryTo,
  selectorFrom,
  selectorSpecTo,
  startTo,

  type Message,
  type NewMessage,
  type PatternOptions,
  type Queue,
  type QueueSpec,
  type Receipt,
  type Redelivery,
  type Selector,
  type SelectorOptions,
  type StartOptions,
  type Wire,
} from "./wire.js";

/** Options of take and read. */
export interface MatchOptions extends PatternOptions {
  /** How long to wait for a first match, in ms (0: try once). */
  timeout?: number;
  /** Most messages to return (default 1). */
  max?: number;
}

/** Options of takeLeased. */
export interface LeaseOptions extends MatchOptions {
  /** How long the messages stay invisible, in ms, unless acked. */
  lease: number;
}

/** Options of browse. */
export interface BrowseOptions extends PatternOptions {
  templates?: Templates;
  /** "oldest" (default forward), "latest" (default backward), a seq, or a Date. */
  start?: "oldest" | "latest" | number | Date;
  /** Page towards older messages. */
  reverse?: boolean;
  /** Most messages per page (default 100). */
  limit?: number;
  /** Only "unprocessed", "history" or "scheduled"; default all. */
  section?: "unprocessed" | "history" | "scheduled";
}

/** One page of a queue. */
export interface Page {
  messages: Message[];
  /** Pass as `start` (same direction) for the next page; 0 when there is no more. */
  nextSeq: number;
}

/** Options of subscribe (`reconnect`, `onReconnect`: see Subscription). */
export interface SubscribeOptions extends PatternOptions, StartOptions, ReconnectOptions {
  /** Every subscriber gets every message (COPY) instead of one of them (MOVE). */
  copy?: boolean;
  /** Most deliveries not yet acked (0: the board's default, 100). */
  credit?: number;
  /** Attach to this durable terminal selector instead (no queue or pattern then). */
  selector?: string;
  /** How this consumer's nacked or lost deliveries are delayed (default: the queue's). */
  redelivery?: Redelivery;
}

/** A message taken with a lease: `await lease.ack()`, or `client.ack(queue, [lease])`. */
export interface Lease {
  id: number;
  message: Message;
  /** Processes it for good; throws why if the board cannot (its `rejected` error). */
  ack(): Promise<void>;
  /** Gives it back to the queue now; throws why if the board cannot. */
  nack(): Promise<void>;
}

/**
 * What an ack of leases did. Acks are per lease, as a subscription's are
 * per delivery: one the board cannot ack does not stop the others.
 */
export interface Acked {
  /** The leases applied (acked, or given back by a nack), in request order. */
  ids: number[];
  /**
   * Each lease the board could not ack, by id, with why: NotFound (already
   * acked or given back, or run out) or InvalidArgument (never given, or on
   * another queue); its `field` is its place in the request (`lease_ids[1]`).
   */
  rejected: Map<number, MsgboardError>;
}

/**
 * A call's templates, or its options in their place:
 * `take("jobs", tpl("job", Int), { timeout })` and `take("jobs", { timeout })`.
 */
function split<O extends object>(t: Templates | O | undefined, o: O | undefined): [Templates | undefined, O] {
  if (t === undefined || t instanceof Template || Array.isArray(t)) return [t as Templates | undefined, o ?? ({} as O)];
  return [undefined, t as O];
}

/** One queue's figures (board.proto's QueueStats; counts since the server started). */
export interface QueueStats {
  name: string;
  transient: boolean;
  unprocessed: number;
  history: number;
  waiting: number;
  posted: number;
  taken: number;
  overflowed: number;
  ready: number;
  outstanding: number;
  consumers: number;
  dropped: number;
  deadLettered: number;
  selectors: number;
  expired: number;
  damaged: number;
}

/** Board and per-queue figures. */
export interface Stats {
  /** Bytes of the LMDB map (address space, not disk). */
  mapSize: number;
  mapUsed: number;
  /** "fsync" or "weaker-no-fsync". */
  sync: string;
  commits: number;
  committedOps: number;
  queues: QueueStats[];
}

function queueStatsFrom(w: Wire): QueueStats {
  const out: Record<string, unknown> = {};
  for (const f of messageType("QueueStats").fieldsArray) {
    out[f.name] = f.type === "string" ? (w[f.name] ?? "") : f.type === "bool" ? (w[f.name] ?? false) : num(w[f.name]);
  }
  return out as unknown as QueueStats;
}

/** What a snapshot holds. */
export interface SnapshotInfo {
  path: string;
  schema: string;
  takenAt?: Date;
  bytes: number;
  messages: number;
  queues: number;
}

/** How to connect, and to which boards. */
export interface ClientOptions extends ConnectOptions {
  /**
   * Ms a call keeps looking for the primary among the boards after a
   * failure (default: 30000 with more than one address, else 0, off; see
   * failover.ts). With failover on, posts get idempotency keys.
   */
  failoverMs?: number;
}

/**
 * Connects and waits until a board answers (Unavailable after `readyTimeout`
 * ms). `address`: "host:port", several as "a,b,c" or an array (a primary and
 * its standbys: the client finds the primary), default $MSGBOARD_SERVER.
 */
export async function connect(
  address?: string | readonly string[],
  options: ClientOptions & { readyTimeout?: number } = {},
): Promise<Client> {
  const c = new Client(address, options);
  try {
    await c.ready(options.readyTimeout);
  } catch (e) {
    c.close();
    throw e;
  }
  return c;
}

/** A tuple, or a message with its envelope. */
export type Postable = readonly Field[] | NewMessage;

function asMessage(m: Postable): NewMessage {
  return Array.isArray(m) ? { tuple: m } : (m as NewMessage);
}

/** The message with an idempotency key: its own, or a random UUID. */
function withKey(m: Postable): NewMessage {
  const n = asMessage(m);
  return n.key ? n : { ...n, key: randomUUID() };
}

/** A connection to a board, or to the primary among several. */
export class Client {
  /** The boards given, the one talked to now, and where to go after a failure. */
  readonly failover: Failover;

  constructor(address?: string | readonly string[], options: ClientOptions = {}) {
    this.failover = new Failover(addressesOf(address), options);
  }

  /** The layer every call to the current board goes through (channel, token, deadlines, typed errors). */
  get connection(): Connection {
    return this.failover.connection();
  }

  /** The board talked to now (the primary, once found). */
  get address(): string {
    return this.failover.address;
  }

  /** Waits until the board answers (Unavailable after `ms`). */
  waitReady(ms = 10_000): Promise<void> {
    return this.ready(ms);
  }

  /**
   * Waits until a board answers: the first address, or with failover on
   * the first of the list to answer within `ms` (Unavailable after).
   */
  async ready(ms = 10_000): Promise<void> {
    if (!this.failover.on) return this.connection.ready(ms);
    const deadline = Date.now() + ms;
    for (let i = 0; ; i++) {
      const address = this.failover.addresses[i % this.failover.addresses.length]!;
      try {
        await this.failover.connection(address).ready(Math.max(1, deadline - Date.now()));
        this.failover.address = address;
        return;
      } catch (e) {
        if (Date.now() >= deadline) throw e;
        await new Promise((resolve) => setTimeout(resolve, i < this.failover.addresses.length ? 0 : 100));
      }
    }
  }

  /** Closes the channels. */
  close(): void {
    this.failover.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  // ---------------------------------------------------------------- queues

  /** Creates a queue; the same again with the same properties is fine (idempotent). */
  async createQueue(name: string, spec: QueueSpec = {}): Promise<Queue> {
    return queueFrom(await this.failover.unary("CreateQueue", { spec: queueSpecTo(name, spec) }));
  }

  async getQueue(name: string): Promise<Queue> {
    return queueFrom(await this.failover.unary("GetQueue", { name }));
  }

  async listQueues(): Promise<Queue[]> {
    const r = await this.failover.unary("ListQueues", {});
    return (r.queues ?? []).map(queueFrom);
  }

  async deleteQueue(name: string): Promise<void> {
    await this.failover.unary("DeleteQueue", { name });
  }

  // ---------------------------------------------------------------- posting

  /** Posts one message and returns its seq once it is durable. */
  async post(queue: string, tuple: readonly Field[] = [], envelope: Omit<NewMessage, "tuple"> = {}): Promise<number> {
    const [seq] = await this.postMessages(queue, [{ ...envelope, tuple }]);
    return seq!;
  }

  /**
   * Posts messages in one transaction (all or none); returns their seqs
   * once durable (0 for one that found the queue full: `postReceipts` says
   * where it went).
   */
  async postMessages(queue: string, messages: readonly Postable[]): Promise<number[]> {
    return (await this.postReceipts(queue, messages)).map((r) => r.seq);
  }

  /**
   * Posts messages in one transaction (all or none); returns, once they
   * are durable, each one's seq and what became of it.
   */
  async postReceipts(queue: string, messages: readonly Postable[]): Promise<Receipt[]> {
    // With failover on, keyed so that it may be sent again; a duplicate of a
    // key the client made is its own earlier attempt, stored.
    const mine = messages.map((m) => this.failover.on && !asMessage(m).key);
    const keyed = this.failover.on ? messages.map(withKey) : messages;
    const wire = keyed.map((m, i) => messageTo(asMessage(m), `messages[${i}]`));
    const rs = receiptsFrom(await this.failover.unary("Post", { queue, messages: wire }));
    return rs.map((r, i) => (mine[i] && r.seq && r.disposition === "duplicate" ? { ...r, disposition: "stored" } : r));
  }

  /**
   * Posts as postReceipts does, safe to retry: every message without a
   * `key` gets one (a random UUID), and a post whose answer is lost (the
   * board or the connection down: Unavailable) is sent again with the same
   * keys for up to `retryForMs` (default 60000). The board stores what it
   * had not and answers "duplicate", with the first seq, for what it had.
   */
  async postIdempotent(queue: string, messages: readonly Postable[], options: { retryForMs?: number } = {}): Promise<Receipt[]> {
    const keyed = messages.map(withKey);
    const deadline = Date.now() + (options.retryForMs ?? 60_000);
    let pause = 100;
    for (;;) {
      try {
        return await this.postReceipts(queue, keyed);
      } catch (e) {
        if (!(e instanceof Unavailable) || Date.now() + pause > deadline) throw e;
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, 2000);
    }
  }

  /**
   * Posts many messages over one PostStream, `batch` per request, without
   * waiting for each batch's answer; returns every seq. A batch the board
   * refuses rejects with its error once the stream has ended (the batches
   * before it are stored). With failover on, the first batch goes as one
   * Post (keyed, sent again as `post` is), which finds the primary; the
   * stream of the rest is not sent again if it breaks.
   */
  async postMany(
    queue: string,
    messages: Iterable<Postable> | AsyncIterable<Postable>,
    options: { batch?: number } = {},
  ): Promise<number[]> {
    const size = options.batch ?? 500;
    const head: number[] = [];
    if (this.failover.on) {
      const it: AsyncIterator<Postable> | Iterator<Postable> =
        Symbol.asyncIterator in messages ? messages[Symbol.asyncIterator]() : messages[Symbol.iterator]();
      const first: Postable[] = [];
      while (first.length < size) {
        const r = await it.next();
        if (r.done) break;
        first.push(r.value);
      }
      if (first.length) head.push(...(await this.postMessages(queue, first)));
      const rest: AsyncIterable<Postable> = { [Symbol.asyncIterator]: () => it as AsyncIterator<Postable> };
      return [...head, ...(await this.streamPosts(queue, rest, size, first.length))];
    }
    return this.streamPosts(queue, messages, size, 0);
  }

  /** postMany's PostStream; `skip`: messages posted before it (for the error paths). */
  private async streamPosts(
    queue: string,
    messages: Iterable<Postable> | AsyncIterable<Postable>,
    size: number,
    skip: number,
  ): Promise<number[]> {
    const stream = this.connection.duplex("PostStream");
    const answers: Promise<Wire[]> = (async () => {
      const out: Wire[] = [];
      for (let r = await stream.next(); r !== undefined; r = await stream.next()) out.push(r);
      return out;
    })();
    answers.catch(() => undefined); // awaited below; not unhandled meanwhile
    let bad: unknown;
    try {
      let chunk: Wire[] = [];
      let n = 0;
      let i = skip;
      for await (const m of messages) {
        if (stream.done) break; // the board ended the stream: its error follows
        chunk.push(messageTo(asMessage(m), `messages[${i++}]`));
        if (chunk.length >= size) {
          await stream.send({ batchId: String(++n), queue, messages: chunk });
          chunk = [];
        }
      }
      if (chunk.length) await stream.send({ batchId: String(++n), queue, messages: chunk });
    } catch (e) {
      bad = e; // ends the stream; thrown after it
    }
    stream.end();
    const seqs: number[] = [];
    let failed: Wire | undefined;
    for (const r of await answers) {
      if (r.error) failed ??= r.error;
      else seqs.push(...(r.seqs ?? []).map(num));
    }
    if (failed) throw streamError(failed);
    if (bad !== undefined) throw bad;
    return seqs;
  }

  // ---------------------------------------------------------------- taking

  /**
   * Removes and returns up to `max` of the oldest waiting messages that
   * match, waiting up to `timeout` ms for a first (Linda `in`).
   */
  async take(queue: string, templates?: Templates | MatchOptions, options?: MatchOptions): Promise<Message[]> {
    const r = await this.match("Take", { queue }, ...split(templates, options));
    return (r.messages ?? []).map(messageFrom);
  }

  /** Like take, but leaves the messages on the queue (Linda `rd`). */
  async read(queue: string, templates?: Templates | MatchOptions, options?: MatchOptions): Promise<Message[]> {
    const r = await this.match("Read", { queue }, ...split(templates, options));
    return (r.messages ?? []).map(messageFrom);
  }

  /**
   * Like take, but the messages stay invisible on the queue until `ack`ed
   * by lease id; if the lease (ms) runs out first they come back.
   */
  async takeLeased(
    queue: string,
    templates: Templates | LeaseOptions | undefined,
    options?: LeaseOptions,
  ): Promise<Lease[]> {
    const [t, o] = split<LeaseOptions>(templates, options);
    if (!(o.lease > 0)) throw new InvalidArgument(`lease: must be > 0 ms, not ${o.lease}`);
    const r = await this.match("Take", { queue, lease: duration(o.lease) }, t, o);
    return (r.messages ?? []).map((m: Wire, i: number) => {
      const id = num(r.leaseIds?.[i]);
      const one = async (nack: boolean): Promise<void> => {
        const e = (await this.ack(queue, [id], { nack })).rejected.get(id);
        if (e !== undefined) throw e;
      };
      return { id, message: messageFrom(m), ack: () => one(false), nack: () => one(true) };
    });
  }

  /**
   * Acks leased messages (processed for good); with `nack`, gives them back
   * (after the nack backoff). Per lease: the answer says which were applied and why each other
   * one was not (`rejected`); the call throws only for a bad request (no
   * leases, a missing queue).
   */
  async ack(queue: string, leases: readonly (Lease | number)[], options: { nack?: boolean } = {}): Promise<Acked> {
    const ids = leases.map((l) => String(typeof l === "number" ? l : l.id));
    const r = await this.failover.unary("Ack", { queue, leaseIds: ids, nack: options.nack ?? false });
    return {
      ids: (r.leaseIds ?? []).map(num),
      rejected: new Map((r.rejected ?? []).map((x: Wire) => [num(x.id), streamError(x.error ?? {})])),
    };
  }

  /** Gives leased messages back to the queue, after the nack backoff (per lease, as `ack`). */
  nack(queue: string, leases: readonly (Lease | number)[]): Promise<Acked> {
    return this.ack(queue, leases, { nack: true });
  }

  private match(method: string, req: Wire, templates: Templates | undefined, o: MatchOptions): Promise<Wire> {
    const wait = o.timeout ?? 0;
    const full = { ...req, pattern: patternTo({ ...o, templates }), timeout: duration(wait), max: o.max ?? 1 };
    return this.failover.unary(method, full, wait);
  }

  /** One page of a queue in seq order; pass `nextSeq` as `start` for the next. */
  async browse(queue: string, options: BrowseOptions = {}): Promise<Page> {
    const req: Wire = {
      queue,
      direction: options.reverse ? "DIRECTION_BACKWARD" : "DIRECTION_FORWARD",
      limit: options.limit ?? 100,
      pattern: patternTo(options),
    };
    startTo(options.start, req);
    if (options.section) req.section = enumTo("SECTION", options.section);
    const r = await this.failover.unary("Browse", req);
    return { messages: (r.messages ?? []).map(messageFrom), nextSeq: num(r.nextSeq) };
  }

  /** Board figures and one row per queue (or only `queue`'s). */
  async stats(queue = ""): Promise<Stats> {
    const r = await this.failover.unary("Stats", { queue });
    return {
      mapSize: num(r.mapSize),
      mapUsed: num(r.mapUsed),
      sync: r.sync ?? "",
      commits: num(r.commits),
      committedOps: num(r.committedOps),
      queues: (r.queues ?? []).map(queueStatsFrom),
    };
  }

  // ---------------------------------------------------------------- waiting messages

  /** Removes every waiting message no consumer or lease holds (`history`: and the history). */
  async purgeQueue(queue: string, options: { history?: boolean } = {}): Promise<Purged> {
    return purgedFrom(await this.failover.unary("PurgeQueue", { queue, history: options.history ?? false }));
  }

  /**
   * Moves waiting messages of `source` to queue `to`, all or none; `to` ""
   * sends each back to the queue its `x-dead-letter-queue` header names
   * (the dead-letter resubmit). Keys kept; `x-moved-from`/`x-moved-seq` added.
   */
  async moveMessages(source: string, to = "", options: ChooseOptions = {}): Promise<Moved[]> {
    return movedFrom(await this.failover.unary("MoveMessages", { source, destination: to, ...choiceTo(options) }));
  }

  /** Deletes waiting messages of `queue` (chosen as moveMessages chooses), all or none; their seqs. */
  async deleteMessages(queue: string, options: ChooseOptions = {}): Promise<number[]> {
    return seqsFrom(await this.failover.unary("DeleteMessages", { queue, ...choiceTo(options) }));
  }

  /** The messages taken with a lease and not yet acked, of `queue` (manage) or of all (admin). */
  async listLeases(queue = ""): Promise<LeaseInfo[]> {
    return leasesFrom(await this.failover.unary("ListLeases", { queue }));
  }

  /** Gives back leased messages of `queue` now, by seq, as if their leases had run out. */
  async releaseMessages(queue: string, seqs: readonly number[]): Promise<number[]> {
    return seqsFrom(await this.failover.unary("ReleaseMessages", { queue, seqs: seqs.map(String) }));
  }

  // ---------------------------------------------------------------- selectors

  /**
   * Creates a selector on `source`: MOVE (default), COPY, DELETE or BOUNCE
   * of the matching messages to queue `to` or, without one, to a consumer
   * (attach with `subscribe("", undefined, { selector: id })`).
   */
  async createSelector(source: string, options: SelectorOptions = {}): Promise<Selector> {
    return selectorFrom(await this.failover.unary("CreateSelector", { spec: selectorSpecTo(source, options) }));
  }

  async getSelector(id: string): Promise<Selector> {
    return selectorFrom(await this.failover.unary("GetSelector", { id }));
  }

  /** The selectors of one queue, or of every queue. */
  async listSelectors(queue = ""): Promise<Selector[]> {
    const r = await this.failover.unary("ListSelectors", { queue });
    return (r.selectors ?? []).map(selectorFrom);
  }

  async deleteSelector(id: string): Promise<void> {
    await this.failover.unary("DeleteSelector", { id });
  }

  // ---------------------------------------------------------------- subscribing

  /**
   * Opens a subscription: a session MOVE (or `copy`) selector on `queue`,
   * or attaches to the durable terminal selector `options.selector`.
   * Iterate it with `for await` and ack or nack each delivery.
   */
  subscribe(queue: string, templates?: Templates | SubscribeOptions, more?: SubscribeOptions): Subscription {
    const [t, options] = split(templates, more);
    const open: Wire = {
      queue,
      pattern: patternTo({ ...options, templates: t }),
      op: options.copy ? "OPERATION_COPY" : "OPERATION_UNSPECIFIED",
      credit: String(options.credit ?? 0),
      selectorId: options.selector ?? "",
    };
    if (options.redelivery) open.redelivery = redeliveryTo(options.redelivery);
    startTo(options.start, open);
    // It opens its stream where the failover says, and tells it of each loss.
    let at = "";
    const start = () => {
      at = this.failover.address;
      return this.failover.connection(at).duplex("Subscribe");
    };
    return new Subscription(start, open, options, (e) => this.failover.moved(at, e));
  }

  // ---------------------------------------------------------------- snapshots

  /**
   * Has the server write a consistent copy of the board to `path` (a name
   * under its snapshot directory, or an absolute path on an open board
   * without one). Waits as long as the copy takes.
   */
  async snapshot(path: string): Promise<SnapshotInfo> {
    const r = await this.failover.unary("Snapshot", { path }, 24 * 3600_000);
    return {
      path: r.path ?? "",
      schema: r.schema ?? "",
      takenAt: date(r.takenAt),
      bytes: num(r.bytes),
      messages: num(r.messages),
      queues: num(r.queues),
    };
  }
}
