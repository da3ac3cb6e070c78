/**
 * An operator's hands on waiting messages: what `Client.purgeQueue`,
 * `moveMessages`, `deleteMessages` and `releaseMessages` take and answer.
 * Each is one call on the board, all or nothing, and needs the manage verb
 * (a move: on the source and on each destination).
 */

import type { Templates } from "./values.js";
import { date, num, patternTo, type PatternOptions, type Wire } from "./wire.js";

/**
 * Which waiting messages a move or delete acts on: `seqs`, or the oldest
 * matching the pattern (`templates`, `address`, `filter`), or (`all`) the
 * oldest waiting, at most `limit` (0: the board's most, 10,000). One of
 * the three is needed: the board refuses none (InvalidArgument).
 */
export interface ChooseOptions extends PatternOptions {
  seqs?: readonly number[];
  templates?: Templates;
  limit?: number;
  all?: boolean;
}

/** What a purge removed. */
export interface Purged {
  /** Waiting messages. */
  purged: number;
  /** History records (with `history`). */
  history: number;
}

/** One moved message: its seq on the source, where it went and its seq there. */
export interface Moved {
  seq: number;
  queue: string;
  newSeq: number;
}

/** The request fields of a choice (no pattern field when none is given). */
/** A message taken with a lease and not yet acked. */
export interface LeaseInfo {
  /** The lease id, which `ack` takes. */
  id: number;
  queue: string;
  seq: number;
  since: Date;
  /** When it runs out unless acked. */
  until: Date;
}

export function leasesFrom(r: Wire): LeaseInfo[] {
  return (r.leases ?? []).map((x: Wire) => ({
    id: num(x.id),
    queue: x.queue ?? "",
    seq: num(x.seq),
    since: date(x.since) ?? new Date(0),
    until: date(x.until) ?? new Date(0),
  }));
}

export function choiceTo(o: ChooseOptions): Wire {
  const req: Wire = { seqs: (o.seqs ?? []).map(String), limit: o.limit ?? 0, all: o.all ?? false };
  const pattern = patternTo(o);
  if (pattern) req.pattern = pattern;
  return req;
}

export function purgedFrom(r: Wire): Purged {
  return { purged: num(r.purged), history: num(r.historyPurged) };
}

export function movedFrom(r: Wire): Moved[] {
  return (r.messages ?? []).map((m: Wire) => ({ seq: num(m.seq), queue: m.queue ?? "", newSeq: num(m.newSeq) }));
}

export function seqsFrom(r: Wire): number[] {
  return (r.seqs ?? []).map(num);
}
