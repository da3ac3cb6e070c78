/**
 * Following the primary: a `Failover` holds the boards a client was given
 * ("a,b,c", an array, or $MSGBOARD_SERVER), the one it talks to now and a
 * connection to each, and decides, after a failure, where to go and
 * whether the call may be sent again (as the Python client's
 * msgboard/client/failover.py does):
 *
 * - UNAVAILABLE with reason `NotPrimary`: to the primary it names
 *   (metadata `primary`), at once;
 * - no connection, or reason `NoLease` (a primary unsure of its lease), or
 *   DEADLINE_EXCEEDED: to the next address, after a pause;
 * - any other UNAVAILABLE (the connection broke during the call): the same
 *   board again, after a pause.
 *
 * A call refused before it ran (NotPrimary, NoLease, no connection) is
 * sent again whatever it is; after another UNAVAILABLE only the calls that
 * change nothing twice are: reads, CreateQueue, and a Post whose messages
 * all carry keys. Takes, acks, selector changes and deletions whose answer
 * was lost reject with the Unavailable: the board may have done them. The
 * attempts go on for up to `failoverMs` (30 s by default when more than one
 * address is given; 0, off, with one) from the call's first failure,
 * pausing 50 ms doubling up to 1 s (jittered) between them.
 */

import { Connection, DEFAULT_ADDRESS, type ConnectOptions } from "./connection.js";
import { InvalidArgument, type MsgboardError } from "./errors.js";
import type { Wire } from "./wire.js";

/** The failover deadline when more than one address is given, in ms. */
export const FAILOVER_MS = 30_000;

/** Unary calls that change nothing when sent twice (a keyed Post too). */
const AGAIN = new Set([
  "Browse",
  "CreateQueue",
  "GetQueue",
  "GetSelector",
  "ListConsumers",
  "ListLeases",
  "ListQueues",
  "ListSelectors",
  "Read",
  "Stats",
]);

/** grpc-js's words for a call that never reached a board. */
const NO_CONNECTION = ["No connection established", "Name resolution failed"];

/**
 * The addresses of "a,b,c", an array, or (none) $MSGBOARD_SERVER, else
 * 127.0.0.1:7878; a host given without a port gets the board's (`withPort`).
 */
export function addressesOf(server?: string | readonly string[]): string[] {
  let s: string | readonly string[] = server ?? "";
  if (s.length === 0) s = process.env.MSGBOARD_SERVER || DEFAULT_ADDRESS;
  const out = (typeof s === "string" ? s.split(",") : [...s]).map((a) => a.trim());
  if (out.some((a) => a === "")) {
    throw new InvalidArgument(`server: an empty address in ${JSON.stringify(s)} (give HOST:PORT[,HOST:PORT...])`);
  }
  return out.map(withPort);
}

/** The port of an address that names none: the board's, not gRPC's 443. */
export const DEFAULT_PORT = 7878;

/**
 * `address` with the board's port (7878) when it names a host alone
 * (`127.0.0.1`, `localhost`, `[::1]`, `::1`); a gRPC target with a scheme
 * (`unix:/path`, `dns:///host:7`) is left as it is. The Python client's
 * rule (msgboard/client/failover.py's with_port).
 */
export function withPort(address: string): string {
  if (address.includes("/") || address.startsWith("unix")) return address;
  if (address.startsWith("[")) return address.includes("]:") ? address : `${address}:${DEFAULT_PORT}`;
  const colons = address.split(":").length - 1;
  if (colons > 1) return `[${address}]:${DEFAULT_PORT}`; // a bare IPv6 address
  return colons === 1 ? address : `${address}:${DEFAULT_PORT}`;
}

/** The board refused the call before running it, or no board was reached. */
export function refused(e: MsgboardError): boolean {
  if (e.reason === "NotPrimary" || e.reason === "NoLease") return true;
  return NO_CONNECTION.some((words) => e.message.includes(words));
}

/** Ms to wait before attempt `n` + 1, jittered. */
function pause(n: number): number {
  const most = Math.min(1000, 50 * 2 ** n);
  return most / 2 + Math.random() * (most / 2);
}

/** An outage or a board that did not answer in time: what failover acts on. */
function isOutage(e: unknown): boolean {
  const code = (e as MsgboardError | undefined)?.code;
  return code === "UNAVAILABLE" || code === "DEADLINE_EXCEEDED";
}

export class Failover {
  readonly addresses: string[];
  /** The failover deadline in ms (0: off, a call is tried once). */
  readonly ms: number;
  /** The board talked to now. */
  address: string;
  /** The listed address tried last: where "the next" counts from. */
  private at = 0;
  private readonly connections = new Map<string, Connection>();

  constructor(
    addresses: readonly string[],
    private readonly options: ConnectOptions & { failoverMs?: number } = {},
  ) {
    if (addresses.length === 0) throw new InvalidArgument("server: no address given");
    this.addresses = [...addresses];
    this.ms = options.failoverMs ?? (this.addresses.length > 1 ? FAILOVER_MS : 0);
    if (this.ms < 0) throw new InvalidArgument(`failoverMs: ${this.ms} is below 0`);
    this.address = this.addresses[0]!;
    for (const a of this.addresses) this.connection(a); // a token refused in plaintext: said now
  }

  get on(): boolean {
    return this.ms > 0;
  }

  /** The connection to `address` (default: the current board), kept until close. */
  connection(address = this.address): Connection {
    let c = this.connections.get(address);
    if (c === undefined) {
      // Following the primary, a board that takes over (on the address of
      // one that was gone) is found within 1 s: grpc-js otherwise waits 1 s,
      // then longer, before it tries an address again, failing calls meanwhile.
      const quick = { "grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 1000 };
      const options = this.on ? { ...this.options, channelOptions: { ...quick, ...this.options.channelOptions } } : this.options;
      c = new Connection(address, options);
      this.connections.set(address, c);
    }
    return c;
  }

  /**
   * Takes note that `address` answered `e` and picks the board to try next;
   * true when it is to be tried at once (a standby named its primary).
   */
  moved(address: string, e: MsgboardError): boolean {
    if (!this.on) return false;
    if (this.address !== address) return true; // another call moved already
    const i = this.addresses.indexOf(address);
    if (i >= 0) this.at = i;
    const primary = e.reason === "NotPrimary" ? (e.metadata.primary ?? "") : "";
    if (primary && primary !== address) {
      this.address = primary;
      return true;
    }
    if (refused(e) || e.code === "DEADLINE_EXCEEDED") {
      this.at = (this.at + 1) % this.addresses.length;
      this.address = this.addresses[this.at]!;
    }
    return false;
  }

  /** `call` on the current board, tried again as the module's comment says. */
  async run<T>(call: (c: Connection) => Promise<T>, again: boolean): Promise<T> {
    let deadline = 0;
    let attempt = 0;
    let quick = 0;
    for (;;) {
      const address = this.address;
      try {
        return await call(this.connection(address));
      } catch (e) {
        const err = e as MsgboardError;
        if (!this.on || !isOutage(err)) throw e;
        const atOnce = this.moved(address, err);
        if (err.code === "DEADLINE_EXCEEDED" || !(again || refused(err))) throw e;
        const now = Date.now();
        deadline ||= now + this.ms;
        let wait = 0;
        if (atOnce && quick < 3) quick++;
        else {
          wait = pause(attempt++);
          quick = 0;
        }
        if (now + wait > deadline) throw e;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  /** The unary `method` (a Board RPC's name); `wait`: ms the call itself may wait. */
  unary(method: string, request: Wire, wait = 0): Promise<Wire> {
    const again =
      AGAIN.has(method) || (method === "Post" && (request.messages ?? []).every((m: Wire) => Boolean(m.key)));
    return this.run((c) => c.unary(method, request, wait), again);
  }

  close(): void {
    for (const c of this.connections.values()) c.close();
    this.connections.clear();
  }
}
