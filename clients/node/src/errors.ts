/**
 * The error classes a call rejects with, the same tree as the server's
 * msgboard/errors.py, so `err instanceof QueueNotFound` works:
 *
 * ```
 * MsgboardError                 .code: the gRPC status name; .reason: the class name
 * ├── InvalidArgument           .field: the path of the bad part of the request
 * │   ├── ConfigError
 * │   └── RelativePath
 * ├── NotFound
 * │   └── QueueNotFound
 * ├── AlreadyExists
 * │   └── QueueExists
 * ├── ResourceExhausted
 * │   ├── QueueFull
 * │   ├── MessageTooLarge
 * │   └── StoreFull
 * ├── FailedPrecondition
 * │   └── Exposed
 * ├── Unavailable
 * │   └── ListenFailed
 * ├── DeadlineExceeded
 * ├── Cancelled                 (client side: the call was cancelled)
 * ├── Unauthenticated
 * ├── PermissionDenied
 * ├── DataLoss
 * │   └── RecordDamaged
 * └── StoreError                (INTERNAL)
 *     ├── DirectoryLocked
 *     └── DataFileDamaged
 * ```
 *
 * The board names the class in the `google.rpc.Status` details it sends
 * (`ErrorInfo.reason`, domain "msgboard"; `BadRequest` field violations for
 * INVALID_ARGUMENT); the client builds the error from them (status.ts). A
 * reason this client does not know gives the class of the status code, with
 * `reason` still the board's name.
 */

/** Base of every msgboard error. */
export class MsgboardError extends Error {
  /** The gRPC status name, e.g. "NOT_FOUND". */
  code = "UNKNOWN";
  /** The error's class in the board's error tree (ErrorInfo.reason), e.g. "QueueNotFound". */
  reason: string;
  /**
   * The path of the part of the request to blame (`messages[1].tuple[0]`), or
   * "": for INVALID_ARGUMENT, and for a rejected ack's NOT_FOUND (`lease_ids[1]`).
   */
  field = "";
  /** ErrorInfo.metadata: more about the error (queue, seq ...). */
  metadata: Record<string, string> = {};
  /** On a Subscribe stream: the `ref` of the request this error answers (0 otherwise). */
  ref = 0;

  constructor(message = "") {
    super(message);
    this.name = new.target.name;
    this.reason = new.target.name;
  }
}

export class InvalidArgument extends MsgboardError {
  override code = "INVALID_ARGUMENT";
  constructor(message = "", field?: string) {
    super(message);
    this.field = field ?? /^([A-Za-z_]\w*(?:\[[^\]]*\]|\.[A-Za-z_]\w*)*): /.exec(message)?.[1] ?? "";
  }
}
export class ConfigError extends InvalidArgument {}
export class RelativePath extends InvalidArgument {}
export class NotFound extends MsgboardError {
  override code = "NOT_FOUND";
}
export class QueueNotFound extends NotFound {}
export class AlreadyExists extends MsgboardError {
  override code = "ALREADY_EXISTS";
}
export class QueueExists extends AlreadyExists {}
export class ResourceExhausted extends MsgboardError {
  override code = "RESOURCE_EXHAUSTED";
}
export class QueueFull extends ResourceExhausted {}
export class MessageTooLarge extends ResourceExhausted {}
export class StoreFull extends ResourceExhausted {}
export class FailedPrecondition extends MsgboardError {
  override code = "FAILED_PRECONDITION";
}
export class Exposed extends FailedPrecondition {}
export class Unavailable extends MsgboardError {
  override code = "UNAVAILABLE";
}
export class ListenFailed extends Unavailable {}
export class DeadlineExceeded extends MsgboardError {
  override code = "DEADLINE_EXCEEDED";
}
export class Cancelled extends MsgboardError {
  override code = "CANCELLED";
}
export class Unauthenticated extends MsgboardError {
  override code = "UNAUTHENTICATED";
}
export class PermissionDenied extends MsgboardError {
  override code = "PERMISSION_DENIED";
}
export class DataLoss extends MsgboardError {
  override code = "DATA_LOSS";
}
export class RecordDamaged extends DataLoss {}
export class StoreError extends MsgboardError {
  override code = "INTERNAL";
}
export class DirectoryLocked extends StoreError {
  override code = "FAILED_PRECONDITION";
}
export class DataFileDamaged extends StoreError {}

type ErrorClass = new (message?: string) => MsgboardError;

/** Every class of the tree by name (= ErrorInfo.reason). */
const BY_NAME: Record<string, ErrorClass> = Object.fromEntries(
  [
    MsgboardError,
    InvalidArgument,
    ConfigError,
    RelativePath,
    NotFound,
    QueueNotFound,
    AlreadyExists,
    QueueExists,
    ResourceExhausted,
    QueueFull,
    MessageTooLarge,
    StoreFull,
    FailedPrecondition,
    Exposed,
    Unavailable,
    ListenFailed,
    DeadlineExceeded,
    Cancelled,
    Unauthenticated,
    PermissionDenied,
    DataLoss,
    RecordDamaged,
    StoreError,
    DirectoryLocked,
    DataFileDamaged,
  ].map((c) => [c.name, c as ErrorClass]),
);

/** The class a status code alone gives. */
const BY_CODE: Record<string, ErrorClass> = {
  INVALID_ARGUMENT: InvalidArgument,
  NOT_FOUND: NotFound,
  ALREADY_EXISTS: AlreadyExists,
  RESOURCE_EXHAUSTED: ResourceExhausted,
  FAILED_PRECONDITION: FailedPrecondition,
  UNAVAILABLE: Unavailable,
  DEADLINE_EXCEEDED: DeadlineExceeded,
  CANCELLED: Cancelled,
  UNAUTHENTICATED: Unauthenticated,
  PERMISSION_DENIED: PermissionDenied,
  DATA_LOSS: DataLoss,
  INTERNAL: StoreError,
};

/** What the board said about an error, whatever carried it. */
export interface ErrorParts {
  /** The gRPC status name. */
  code: string;
  message: string;
  /** The class name (ErrorInfo.reason, or the in-stream Error's name); "" if none. */
  reason?: string;
  /** BadRequest's first field violation path. */
  field?: string;
  metadata?: Record<string, string>;
}

/** The typed error for what the board sent. */
export function makeError(p: ErrorParts): MsgboardError {
  const cls = (p.reason && BY_NAME[p.reason]) || BY_CODE[p.code] || MsgboardError;
  const err = new cls(p.message);
  err.code = p.code;
  if (p.reason) err.reason = p.reason;
  // Only what the board said (BadRequest, else ErrorInfo's field), never guessed from the text.
  err.field = p.field ?? p.metadata?.field ?? "";
  if (p.metadata) err.metadata = p.metadata;
  return err;
}
