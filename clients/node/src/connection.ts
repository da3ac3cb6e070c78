/**
 * The connection layer every call goes through: the channel (plaintext or
 * TLS, with a client certificate for mutual TLS), the bearer token as call
 * metadata, deadlines, and failures turned into typed errors (status.ts).
 * `Client` builds on it; the conformance runner calls RPCs through it with
 * wire objects.
 */

import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { InvalidArgument, Unavailable } from "./errors.js";
import { BoardClient } from "./proto.js";
import { fromGrpc } from "./status.js";
import type { Wire } from "./wire.js";

/** TLS settings: PEM text or a file path each. */
export interface TlsOptions {
  /** The CA to trust (default: the system's roots). */
  ca?: string | Buffer;
  /** A client certificate and its key, for mutual TLS. */
  cert?: string | Buffer;
  key?: string | Buffer;
}

/** How to connect. */
export interface ConnectOptions {
  /**
   * A bearer token (sent as `authorization: Bearer <token>`); default
   * $MSGBOARD_TOKEN. Sent only over TLS or to a loopback address.
   */
  token?: string;
  /** TLS: true (the system's roots) or the files; default: $MSGBOARD_TLS_CA if set, else plaintext. */
  tls?: boolean | TlsOptions;
  /** Deadline of each call in ms, beyond any wait the call asks for (default 60000). */
  timeout?: number;
  /** Extra grpc-js channel options. */
  channelOptions?: grpc.ChannelOptions;
}

/** The address used when none is given: $MSGBOARD_SERVER or 127.0.0.1:7878. */
export const DEFAULT_ADDRESS = "127.0.0.1:7878";

function pem(x: string | Buffer | undefined): Buffer | null {
  if (x === undefined) return null;
  if (Buffer.isBuffer(x)) return x;
  return x.includes("-----BEGIN") ? Buffer.from(x) : readFileSync(x);
}

/** The host part of "host:port" or "[v6]:port". */
function hostOf(address: string): string {
  const a = address.replace(/^dns:(\/\/\/)?/, "");
  if (a.startsWith("[")) return a.slice(1, a.indexOf("]"));
  const colon = a.lastIndexOf(":");
  return colon > 0 ? a.slice(0, colon) : a;
}

/** True for localhost, 127.0.0.0/8 and ::1. */
export function isLoopback(address: string): boolean {
  const host = hostOf(address);
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1";
}

/** One open stream: write requests, read responses, errors typed. */
export class Duplex {
  private readonly it: AsyncIterator<Wire>;
  /** Resolves when the call has finished, whatever its status. */
  private readonly finished: Promise<void>;
  /** True once the call has finished: requests written now go nowhere. */
  done = false;

  constructor(readonly call: grpc.ClientDuplexStream<Wire, Wire>) {
    this.it = call[Symbol.asyncIterator]();
    // The iterator reports errors from next(); this keeps a failure of a
    // stream nobody reads (cancelled, abandoned) from crashing the process.
    call.on("error", () => undefined);
    this.finished = new Promise((resolve) =>
      call.once("status", () => {
        this.done = true;
        resolve();
      }),
    );
  }

  /** Writes one request; resolves when the stream can take more (or has finished). */
  async send(request: Wire): Promise<void> {
    if (this.done) return;
    if (!this.call.write(request)) {
      await Promise.race([new Promise((resolve) => this.call.once("drain", resolve)), this.finished]);
    }
  }

  /** The next response, or undefined when the stream ended OK; rejects with the typed error. */
  async next(): Promise<Wire | undefined> {
    try {
      const r = await this.it.next();
      return r.done ? undefined : r.value;
    } catch (e) {
      throw fromGrpc(e);
    }
  }

  /** Half-closes: no more requests. */
  end(): void {
    this.call.end();
  }

  /** Cancels the stream. */
  cancel(): void {
    this.call.cancel();
  }
}

/** A channel to one board, with the client's credentials and error mapping. */
export class Connection {
  readonly address: string;
  /** Default deadline of a call, in ms. */
  readonly timeout: number;
  readonly stub: grpc.Client & Record<string, any>;
  private readonly metadata: grpc.Metadata;

  constructor(address?: string, options: ConnectOptions = {}) {
    const env = process.env;
    this.address = address || env.MSGBOARD_SERVER || DEFAULT_ADDRESS;
    this.timeout = options.timeout ?? 60_000;
    let tls = options.tls ?? (env.MSGBOARD_TLS_CA ? { ca: env.MSGBOARD_TLS_CA } : false);
    if (tls === true) tls = {};
    const creds = tls
      ? grpc.credentials.createSsl(pem(tls.ca), pem(tls.key), pem(tls.cert))
      : grpc.credentials.createInsecure();
    const token = options.token ?? env.MSGBOARD_TOKEN ?? "";
    if (token && !tls && !isLoopback(this.address)) {
      throw new InvalidArgument(
        `refusing to send a token in plaintext to ${this.address}: connect with TLS (tls: {ca}), or to a loopback address`,
      );
    }
    this.metadata = new grpc.Metadata();
    if (token) this.metadata.set("authorization", `Bearer ${token}`);
    // A board that comes back is found within 5 s (grpc-js waits up to 120 s
    // between attempts to connect by default).
    const channel = { "grpc.max_reconnect_backoff_ms": 5000, ...options.channelOptions };
    this.stub = new BoardClient(this.address, creds, channel) as any;
  }

  /**
   * Waits until the board answers. Fails fast, with Unavailable naming the
   * address, once the first attempt to connect fails (nothing listens: a
   * refused connection fails in milliseconds), or after `ms` when attempts
   * neither succeed nor fail (a host that drops packets).
   */
  ready(ms = 10_000): Promise<void> {
    const channel = this.stub.getChannel();
    const deadline = Date.now() + ms;
    const { READY, TRANSIENT_FAILURE, SHUTDOWN } = grpc.connectivityState;
    return new Promise((resolve, reject) => {
      // grpc-js's own timers and sockets do not keep Node running: this does,
      // until the answer.
      const keep = setTimeout(() => undefined, ms + 1000);
      const fail = (why: string) => {
        clearTimeout(keep);
        reject(new Unavailable(`no board answers at ${this.address}: ${why} (is \`msgboard serve\` running there?)`));
      };
      const check = (): void => {
        const state = channel.getConnectivityState(true);
        if (state === READY) {
          clearTimeout(keep);
          return resolve();
        }
        if (state === TRANSIENT_FAILURE) return fail("the connection failed");
        if (state === SHUTDOWN) return fail("the client is closed");
        channel.watchConnectivityState(state, deadline, (e?: Error) =>
          e ? fail(`no connection within ${ms} ms`) : check(),
        );
      };
      check();
    });
  }

  /** Calls a unary RPC by its name in board.proto ("Post"); `wait`: ms the call itself may wait. */
  unary(method: string, request: Wire, wait = 0): Promise<Wire> {
    const fn = this.rpc(method);
    const deadline = Date.now() + this.timeout + wait;
    return new Promise((resolve, reject) => {
      fn.call(this.stub, request, this.metadata, { deadline }, (e: unknown, r: Wire) =>
        e ? reject(fromGrpc(e)) : resolve(r),
      );
    });
  }

  /** Opens a bidirectional stream ("Subscribe", "PostStream"); `deadline`: a Date.now() time, default none. */
  duplex(method: string, deadline?: number): Duplex {
    const options = deadline === undefined ? {} : { deadline };
    return new Duplex(this.rpc(method).call(this.stub, this.metadata, options));
  }

  private rpc(method: string): (...args: any[]) => any {
    const key = method.charAt(0).toLowerCase() + method.slice(1);
    const fn = this.stub[method] ?? this.stub[key];
    if (typeof fn !== "function") throw new InvalidArgument(`no RPC named ${method} in service Board`);
    return fn;
  }

  close(): void {
    this.stub.close();
  }
}

