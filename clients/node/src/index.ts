/**
 * msgboard's Node.js client. See README.md for a quickstart.
 */

export { Client, connect } from "./client.js";
export type { Acked, BrowseOptions, ClientOptions, Lease, LeaseOptions, MatchOptions, Page, Postable, QueueStats, SnapshotInfo, Stats, SubscribeOptions } from "./client.js";
export { Connection, DEFAULT_ADDRESS, Duplex, isLoopback } from "./connection.js";
export type { ConnectOptions, TlsOptions } from "./connection.js";
export * from "./errors.js";
export { addressesOf, DEFAULT_PORT, Failover, FAILOVER_MS, refused, withPort } from "./failover.js";
export type { ChooseOptions, LeaseInfo, Moved, Purged } from "./maintenance.js";
export { Subscription } from "./subscription.js";
export type { Delivery, ReconnectOptions } from "./subscription.js";
export {
  ActualField,
  Any,
  AnyField,
  Bool,
  Bytes,
  Float,
  FloatValue,
  Formal,
  Int,
  IntValue,
  Null,
  PrefixField,
  RangeField,
  Str,
  Template,
  actual,
  float,
  int,
  prefix,
  range,
  tpl,
} from "./values.js";
export type { Field, FieldPattern, Templates, TypeName, Value } from "./values.js";
export type { Message, NewMessage, Pattern, PatternOptions, Position, Queue, QueueSpec, Receipt, Redelivery, Selector, SelectorOptions, StartOptions } from "./wire.js";
