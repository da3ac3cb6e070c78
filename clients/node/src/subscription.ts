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
 */

import type { Duplex } from "./connection.js";
import { InvalidArgument, makeError, type MsgboardError } from "./errors.js";
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
  /** Refs of ack requests sent and not yet answered. */
  private readonly inFlight = new Set<number>();
  /** The ack request filled while another is in flight. */
  private held: Wire | undefined;
  private ended = false;
  private closing = false;

  constructor(
    private readonly stream: Duplex,
    open: Wire,
  ) {
    void this.stream.send({ open });
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
    const nack: Record<string, unknown> = { ids: items.map((d) => String(idOf(d))), reject: options.reject ?? false };
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
    this.stream.cancel();
  }

  private nextRef(): number {
    return ++this.ref;
  }

  private queueAck(ids: number[], upTo: number): number {
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
      this.inFlight.add(num(r.ref));
      void this.stream.send(r);
    }
  }

  private answered(ref: number): void {
    if (this.inFlight.delete(ref) && this.inFlight.size === 0) this.release();
  }

  /** Reads one response; false once the stream has ended OK. */
  private async pull(): Promise<boolean> {
    if (this.ended) return false;
    const r = await this.stream.next();
    if (r === undefined) {
      this.ended = true;
      return false;
    }
    const ref = num(r.ref);
    if (r.deliveries) {
      for (const d of r.deliveries.items ?? []) {
        const id = num(d.id);
        this.buffer.push({
          id,
          message: messageFrom(d.message ?? {}),
          ack: () => this.ack(id),
          nack: (options) => this.nack([id], options),
        });
      }
    } else if (r.acked) {
      for (const id of r.acked.ids ?? []) this.acked.add(num(id));
      for (const x of r.acked.rejected ?? []) this.rejected.set(num(x.id), streamError(x.error ?? {}));
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
    return true;
  }
}
