/**
 * A consumer's Subscribe stream as an async iterator of deliveries:
 *
 * ```ts
 * const sub = client.subscribe("jobs", tpl("job", Int), { credit: 10 });
 * for await (const d of sub) {
 *   work(d.message);
 *   d.ack();
 * }
 * ```
 *
 * Credit bounds the deliveries not yet acked; each ack gives one back.
 * Acks are coalesced: while one ack request is in flight (sent, not yet
 * answered), the acks made meanwhile are held and go as one request when it
 * is answered, or before any other request, so requests keep their order.
 * Acks are per delivery: ids the board could not ack come back in
 * `rejected` (information, not an error). A failed nack or credit request
 * is thrown from the iterator as a typed error with its `ref`; iterating
 * again carries on.
 *
 * A stream lost to UNAVAILABLE (the board stopped or restarted) is opened
 * again by itself, waiting between attempts (100 ms doubling up to 5 s,
 * jittered), unless `reconnect: false`; `onReconnect(error)` hears of the
 * loss and `onReconnect(undefined)` of the return. The iterator carries on:
 * deliveries left unacked come again, under new ids. Ids keep increasing
 * across streams, so an id of a lost stream never names a delivery of the
 * new one: acking one lands in `rejected` (NotFound), and an ack in flight
 * when the stream broke lands there as Unavailable (applied or not; if not,
 * its message comes again). Errors that are no outage (NotFound,
 * PermissionDenied, a consumer kicked) end the subscription as before.
 *
 * With the client's failover on, the stream follows the primary: refused
 * by a standby (NotPrimary) it opens at once on the primary named, lost
 * with its board it opens on the next address. Deliveries left unacked on
 * the old primary are waiting messages on the new one and come again
 * (at-least-once).
 */

import type { Duplex } from "./connection.js";
import { InvalidArgument, makeError, NotFound, Unavailable, type MsgboardError } from "./errors.js";
import { codeName, partsOf } from "./status.js";
import { duration, messageFrom, num, selectorFrom, type Message, type Selector, type Wire } from "./wire.js";

/** One delivered message: `d.ack()`, or `sub.ack(d)`, or by `id`. */
export interface Delivery {
  id: number;
  message: Message;
  /** Acks this delivery (coalesced with others); returns the request's ref. */
  ack(): number;
  /** Gives it back for redelivery (after `delayMs`, else the redelivery
   * policy's next step), or with `reject` dead-letters it; returns the ref. */
  nack(options?: { reject?: boolean; delayMs?: number }): number;
}

/** The typed error of an in-stream `Error` message (its details as a Status's). */
export function streamError(w: Wire): MsgboardError {
  let parts = {};
  try {
    parts = partsOf(w.details);
  } catch {
    // Unreadable details: code, message and name still say what happened.
  }
  return makeError({ code: codeName(w.code ?? 2), message: w.message ?? "", reason: w.name ?? "", ...parts });
}

function idOf(d: { id: number } | number): number {
  return typeof d === "number" ? d : d.id;
}

/** How a subscription outlives a lost stream. */
export interface ReconnectOptions {
  /** Open the stream again when it is lost to UNAVAILABLE (default true). */
  reconnect?: boolean;
  /** Told of a lost stream (its error) and of the new one (undefined). */
  onReconnect?: (error: MsgboardError | undefined) => void;
}

/** Ms to wait before attempt `n` (from 1) to subscribe again: 100 ms doubling up to 5 s, less up to half at random. */
export function backoff(n: number): number {
  const wait = Math.min(5000, 100 * 2 ** (n - 1));
  return wait / 2 + Math.random() * (wait / 2);
}

export class Subscription implements AsyncIterable<Delivery> {
  /** The selector the consumer reads, once `ready()` (or the first delivery). */
  selector: Selector | undefined;
  /** The credit the board applies: what was asked, capped by the server. */
  effectiveCredit = 0;
  /** The most message bytes the consumer may hold unacked. */
  maxOutstandingBytes = 0;
  /** Delivery ids whose acks the board made durable. */
  readonly acked = new Set<number>();
  /** Delivery ids the board could not ack, with why (NotFound: acked or given back already). */
  readonly rejected = new Map<number, MsgboardError>();

  private readonly buffer: Delivery[] = [];
  private ref = 0;
  /** Ack requests sent and not yet answered, by ref. */
  private readonly inFlight = new Map<number, Wire>();
  /** The ack request filled while another is in flight. */
  private held: Wire | undefined;
  private ended = false;
  private closing = false;
  private stream: Duplex;
  /** This stream's delivery ids are `base` + the board's; `last` is the highest given out. */
  private base = 0;
  private last = 0;
  /** Wakes a wait between attempts to subscribe again (close, cancel). */
  private wake: (() => void) | undefined;

  /**
   * `openStream` opens a stream (on the board the client talks to now);
   * `lost` hears of each failure to open or keep one, and says whether to
   * try again at once (a standby named its primary) rather than after a wait.
   */
  constructor(
    private readonly openStream: () => Duplex,
    private readonly open: Wire,
    private readonly options: ReconnectOptions = {},
    private readonly lost: (e: MsgboardError) => boolean = () => false,
  ) {
    this.stream = this.start();
  }

  private start(): Duplex {
    const stream = this.openStream();
    void stream.send({ open: this.open });
    return stream;
  }

  /** Waits for the board's answer to the opening; rejects if it refuses it. */
  async ready(): Promise<Selector> {
    while (this.selector === undefined) {
      if (!(await this.pull())) throw new InvalidArgument("the subscription ended before it opened");
    }
    return this.selector;
  }

  /** Acks deliveries (by Delivery or id); returns the request's ref. */
  ack(...items: (Delivery | number)[]): number {
    return this.queueAck(items.map(idOf), 0);
  }

  /** Acks every outstanding delivery up to this one (cumulative); goes at once. */
  ackUpTo(last: Delivery | number): number {
    return this.queueAck([], idOf(last));
  }

  /** Gives deliveries back (redelivered after `delayMs`, else the
   * redelivery policy's next step), or with `reject` dead-letters them. */
  nack(items: (Delivery | number)[], options: { reject?: boolean; delayMs?: number } = {}): number {
    const ids = this.board(items.map(idOf), false);
    if (items.length && !ids.length) return 0; // deliveries of a lost stream come again anyway
    const nack: Record<string, unknown> = { ids: ids.map(String), reject: options.reject ?? false };
    if (options.delayMs !== undefined) nack.delay = duration(options.delayMs);
    return this.request({ nack });
  }

  /** Raises the consumer's credit by `n` messages. */
  addCredit(n: number): number {
    return this.request({ credit: String(n) });
  }

  /** The next delivery, or undefined once the stream has ended. */
  async next(): Promise<Delivery | undefined> {
    while (this.buffer.length === 0) {
      if (!(await this.pull())) return undefined;
    }
    return this.buffer.shift();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Delivery> {
    for (;;) {
      const d = await this.next();
      if (d === undefined) return;
      yield d;
    }
  }

  /**
   * Ends the subscription: sends the held acks, half-closes, and reads to
   * the stream's end so `acked` and `rejected` are complete. Undelivered and
   * unacked messages go back to the queue.
   */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.wake?.();
    this.release();
    this.stream.end();
    try {
      while (await this.pull());
    } catch {
      // A late error answers a request of a consumer that is going away.
    }
  }

  /** Cancels the stream at once (unacked deliveries go back to the queue). */
  cancel(): void {
    this.ended = true;
    this.wake?.();
    this.stream.cancel();
  }

  private nextRef(): number {
    return ++this.ref;
  }

  /** The ids as the current stream's, leaving out those of a lost stream (noted in `rejected` when `note`). */
  private board(ids: number[], note: boolean): number[] {
    const out: number[] = [];
    for (const id of ids) {
      if (id > this.base) out.push(id - this.base);
      else if (id > 0 && note) {
        this.rejected.set(
          id,
          new NotFound(`delivery ${id} came on a stream that was lost: its message comes again under a new id`),
        );
      }
    }
    return out;
  }

  private queueAck(asked: number[], askedUpTo: number): number {
    const ids = this.board(asked, true);
    const upTo = askedUpTo ? (this.board([askedUpTo], true)[0] ?? 0) : 0;
    if (!ids.length && !upTo) return 0; // only deliveries of a lost stream: nothing to send
    let r = this.held;
    if (r) {
      r.ack.ids.push(...ids.map(String));
      r.ack.upTo = String(Math.max(num(r.ack.upTo), upTo));
    } else {
      r = { ack: { ids: ids.map(String), upTo: String(upTo) }, ref: String(this.nextRef()) };
      this.held = r;
    }
    // A cumulative ack is a batch already: it goes at once with what was held.
    if (this.inFlight.size === 0 || upTo) this.release();
    return num(r.ref);
  }

  private request(r: Wire): number {
    this.release();
    const ref = this.nextRef();
    void this.stream.send({ ...r, ref: String(ref) });
    return ref;
  }

  /** Sends the held acks. */
  private release(): void {
    const r = this.held;
    this.held = undefined;
    if (r) {
      this.inFlight.set(num(r.ref), r);
      void this.stream.send(r);
    }
  }

  /**
   * Forgets the lost stream (its acks in flight or held rejected as
   * Unavailable, its unread deliveries dropped: they come again) and opens
   * new ones until one is answered; false once the subscription has ended.
   */
  private async reopen(cause: MsgboardError): Promise<boolean> {
    this.stream.cancel();
    const lost = new Unavailable(
      "the stream was lost before the board answered this ack; its message comes again unless the ack was applied",
    );
    for (const r of [...this.inFlight.values(), ...(this.held ? [this.held] : [])]) {
      for (const id of [...(r.ack.ids ?? []), ...(num(r.ack.upTo) ? [r.ack.upTo] : [])]) {
        this.rejected.set(this.base + num(id), lost);
      }
    }
    this.inFlight.clear();
    this.held = undefined;
    this.buffer.length = 0;
    this.base = this.last;
    this.options.onReconnect?.(cause);
    let atOnce = this.lost(cause);
    let quick = 0;
    for (let attempt = 1; ; ) {
      let wait = 0;
      if (atOnce && quick < 3) quick++;
      else {
        wait = backoff(attempt++);
        quick = 0;
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = undefined;
      if (this.closing || this.ended) {
        this.ended = true;
        return false;
      }
      this.stream = this.start();
      try {
        const r = await this.stream.next();
        if (r === undefined) {
          this.ended = true;
          return false;
        }
        this.take(r);
      } catch (e) {
        if (!(e instanceof Unavailable)) throw e;
        atOnce = this.lost(e);
        continue;
      }
      this.options.onReconnect?.(undefined);
      return true;
    }
  }

  private answered(ref: number): void {
    if (this.inFlight.delete(ref) && this.inFlight.size === 0) this.release();
  }

  /** Reads one response; false once the stream has ended OK. */
  private async pull(): Promise<boolean> {
    if (this.ended) return false;
    let r: Wire | undefined;
    try {
      r = await this.stream.next();
    } catch (e) {
      const again = this.options.reconnect ?? true;
      if (!(e instanceof Unavailable) || !again || this.closing) throw e;
      return this.reopen(e);
    }
    if (r === undefined) {
      this.ended = true;
      return false;
    }
    this.take(r);
    return true;
  }

  /** Takes in one response. */
  private take(r: Wire): void {
    const ref = num(r.ref);
    if (r.deliveries) {
      for (const d of r.deliveries.items ?? []) {
        const id = this.base + num(d.id);
        this.last = Math.max(this.last, id);
        this.buffer.push({
          id,
          message: messageFrom(d.message ?? {}),
          ack: () => this.ack(id),
          nack: (options) => this.nack([id], options),
        });
      }
    } else if (r.acked) {
      for (const id of r.acked.ids ?? []) this.acked.add(this.base + num(id));
      for (const x of r.acked.rejected ?? []) this.rejected.set(this.base + num(x.id), streamError(x.error ?? {}));
      this.answered(ref);
    } else if (r.subscribed) {
      this.selector = selectorFrom(r.subscribed);
      this.effectiveCredit = num(r.credit);
      this.maxOutstandingBytes = num(r.maxOutstandingBytes);
    } else if (r.error) {
      this.answered(ref);
      const e = streamError(r.error);
      e.ref = ref;
      throw e;
    }
  }
}
