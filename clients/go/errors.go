package msgboard

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/golang/protobuf/ptypes"
	"github.com/golang/protobuf/ptypes/any"
	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is every error the board answers, read from the standard
// `grpc-status-details-bin` google.rpc.Status: its code, its text, the
// ErrorInfo reason (the error's class in msgboard's error tree, such as
// "QueueNotFound") and metadata, and for INVALID_ARGUMENT the BadRequest
// field violations (Field is the first one's path, "messages[2].tuple[0]").
// Errors inside a Subscribe or PostStream stream that carries on are the
// same type, with Ref set on Subscribe. Test it with errors.Is (ErrNotFound,
// ErrQueueNotFound...), errors.As, IsCode or IsReason.
type Error struct {
	Code       codes.Code
	Message    string
	Reason     string            // ErrorInfo.reason: "QueueNotFound", "InvalidArgument"...
	Domain     string            // ErrorInfo.domain: "msgboard"
	Metadata   map[string]string // ErrorInfo.metadata: "queue", "seq"...
	Field      string            // the first field violation's path (else ErrorInfo's "field")
	Violations []FieldViolation  // BadRequest.field_violations
	Ref        uint64            // on a Subscribe stream: the ref of the request it answers
}

// FieldViolation is one bad field of a request.
type FieldViolation struct {
	Field       string
	Description string
}

// Error reads "NotFound (QueueNotFound): queue \"x\" does not exist", the
// reason left out when it only repeats the code ("InvalidArgument: ...").
func (e *Error) Error() string {
	if e.Reason != "" && e.Reason != e.Code.String() {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Reason, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// GRPCStatus lets status.FromError and status.Code read the error's code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Is makes errors.Is(err, ErrNotFound) true for every NOT_FOUND, and
// errors.Is(err, ErrQueueNotFound) true for that class only: a target
// matches an error of its code, and of its reason when it names one.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Reason == "" || t.Reason == e.Reason)
}

// Targets for errors.Is, one per status code the board answers with and
// one per class of msgboard's error tree a caller commonly handles.
var (
	ErrInvalidArgument    = &Error{Code: codes.InvalidArgument}
	ErrNotFound           = &Error{Code: codes.NotFound}
	ErrAlreadyExists      = &Error{Code: codes.AlreadyExists}
	ErrResourceExhausted  = &Error{Code: codes.ResourceExhausted}
	ErrFailedPrecondition = &Error{Code: codes.FailedPrecondition}
	ErrUnavailable        = &Error{Code: codes.Unavailable}
	ErrDeadlineExceeded   = &Error{Code: codes.DeadlineExceeded}
	ErrUnauthenticated    = &Error{Code: codes.Unauthenticated}
	ErrPermissionDenied   = &Error{Code: codes.PermissionDenied}
	ErrDataLoss           = &Error{Code: codes.DataLoss}

	ErrQueueNotFound = &Error{Code: codes.NotFound, Reason: "QueueNotFound"}
	ErrQueueExists   = &Error{Code: codes.AlreadyExists, Reason: "QueueExists"}
	ErrQueueFull     = &Error{Code: codes.ResourceExhausted, Reason: "QueueFull"}
	ErrRecordDamaged = &Error{Code: codes.DataLoss, Reason: "RecordDamaged"}
)

// IsCode says whether err is (or wraps) a board error with this code.
func IsCode(err error, c codes.Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == c
}

// IsReason says whether err is (or wraps) a board error of this class
// ("QueueNotFound", "QueueFull"...).
func IsReason(err error, reason string) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == reason
}

// fromRPC turns an error of a gRPC call into an *Error (nil stays nil).
func fromRPC(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message()}
	e.details(st.Proto().GetDetails())
	return e
}

// fromWire turns an in-stream Error message into an *Error.
func fromWire(w *pb.Error, ref uint64) *Error {
	e := &Error{Code: codes.Code(w.Code), Message: w.Message, Reason: w.Name, Ref: ref}
	e.details(w.Details)
	return e
}

// details reads ErrorInfo and BadRequest from a google.rpc.Status's details.
func (e *Error) details(ds []*any.Any) {
	for _, d := range ds {
		var x ptypes.DynamicAny
		if ptypes.UnmarshalAny(d, &x) != nil {
			continue // a detail of a type this client does not know
		}
		switch m := x.Message.(type) {
		case *errdetails.ErrorInfo:
			e.Reason, e.Domain, e.Metadata = m.Reason, m.Domain, m.Metadata
		case *errdetails.BadRequest:
			for _, v := range m.FieldViolations {
				e.Violations = append(e.Violations, FieldViolation{v.Field, v.Description})
			}
		}
	}
	if len(e.Violations) > 0 {
		e.Field = e.Violations[0].Field
	} else {
		e.Field = e.Metadata["field"] // a rejected ack's NOT_FOUND names its place too
	}
}

// fieldPath is a field path at the start of a message: "tuple[1]: ...".
var fieldPath = regexp.MustCompile(`^([A-Za-z_]\w*(?:\[[^\]]*\]|\.[A-Za-z_]\w*)*): `)

// invalid is the error for a request this client cannot even send (a Go
// value that is no tuple value), shaped as the board's INVALID_ARGUMENT.
func invalid(err error) *Error {
	e := &Error{Code: codes.InvalidArgument, Message: err.Error(), Reason: "InvalidArgument", Domain: "msgboard"}
	if m := fieldPath.FindStringSubmatch(e.Message); m != nil {
		e.Field = m[1]
		e.Violations = []FieldViolation{{m[1], e.Message[len(m[0]):]}}
	}
	return e
}
