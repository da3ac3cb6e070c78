package msgboard

import (
	"time"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The words of board.proto's enums, named here so that a program needs no
// import of the generated package msgboardpb to use them.

// Overflow is what happens to a post over a queue's MaxUnprocessed.
type Overflow = pb.OverflowPolicy

// Unmatched is what happens to a message no selector matches while the
// queue has selectors.
type Unmatched = pb.UnmatchedPolicy

const (
	// OverflowReject answers the poster RESOURCE_EXHAUSTED (the default).
	OverflowReject = pb.OverflowPolicy_OVERFLOW_POLICY_REJECT
	// OverflowDropNew stores nothing and answers seq 0 (Disposition DROPPED).
	OverflowDropNew = pb.OverflowPolicy_OVERFLOW_POLICY_DROP_NEW
	// OverflowDeadLetter sends the message to the queue's DeadLetter.
	OverflowDeadLetter = pb.OverflowPolicy_OVERFLOW_POLICY_DEAD_LETTER
	// OverflowDropHead stores the message and drops the oldest waiting one
	// (not one delivered or leased and not yet acked); with every waiting
	// message held, the new one is dropped (seq 0, Disposition DROPPED).
	OverflowDropHead = pb.OverflowPolicy_OVERFLOW_POLICY_DROP_HEAD

	// UnmatchedHold lets the message wait (the default).
	UnmatchedHold = pb.UnmatchedPolicy_UNMATCHED_POLICY_HOLD
	// UnmatchedDiscard processes it at once.
	UnmatchedDiscard = pb.UnmatchedPolicy_UNMATCHED_POLICY_DISCARD
	// UnmatchedDeadLetter sends it to the queue's DeadLetter.
	UnmatchedDeadLetter = pb.UnmatchedPolicy_UNMATCHED_POLICY_DEAD_LETTER

	// Selector operations (SelectorSpec.Op, Subscribe.Op).
	Move   = pb.Operation_OPERATION_MOVE
	Copy   = pb.Operation_OPERATION_COPY
	Delete = pb.Operation_OPERATION_DELETE
	Bounce = pb.Operation_OPERATION_BOUNCE

	// Start positions (Subscribe.Start, SelectorSpec.Start, Browse.Start).
	Current = pb.Position_POSITION_CURRENT
	Oldest  = pb.Position_POSITION_OLDEST
	Latest  = pb.Position_POSITION_LATEST
	AtSeq   = pb.Position_POSITION_SEQ
	AtTime  = pb.Position_POSITION_TIME

	// Browse directions and sections.
	Forward     = pb.Direction_DIRECTION_FORWARD
	Backward    = pb.Direction_DIRECTION_BACKWARD
	Unprocessed = pb.Section_SECTION_UNPROCESSED
	History     = pb.Section_SECTION_HISTORY
	Scheduled   = pb.Section_SECTION_SCHEDULED

	// Selector roles (SelectorSpec.Role).
	RoleNormal   = pb.Role_ROLE_NORMAL
	RoleDefault  = pb.Role_ROLE_DEFAULT
	RoleOverflow = pb.Role_ROLE_OVERFLOW
)

// QueueSpec is a queue's properties (board.proto's QueueSpec); only Name
// is required, the zero value of every other field is the board's default.
type QueueSpec struct {
	Name string
	// Transient queues live in memory and vanish when the board stops.
	Transient bool
	// MaxUnprocessed is the most waiting messages (0: no limit), and
	// Overflow what happens to a post over it.
	MaxUnprocessed uint64
	Overflow       Overflow
	// MaxHistory is the most taken messages kept (0 keeps none);
	// UnlimitedHistory keeps every one (MaxHistory must then be 0).
	MaxHistory       uint64
	UnlimitedHistory bool
	// DeadLetter is the queue that receives this queue's dead letters.
	DeadLetter string
	Unmatched  Unmatched
	// AutoDelete: the queue deletes itself when its last selector goes.
	AutoDelete bool
	// MaxDeliveries is the most deliveries of one message before it is
	// dead-lettered (0: no limit).
	MaxDeliveries uint32
	// DedupWindow is how long a message's idempotency key (Message.Key) is
	// held after the message has left the queue: nil, 2 minutes; 0, only
	// while it is on the board.
	DedupWindow *time.Duration
	// Redelivery delays messages given back (nacked, their consumer gone)
	// before they are delivered again; nil: a nack waits 0.1 s doubling to
	// 5 s, a lost consumer not at all.
	Redelivery *Redelivery
}

// Redelivery is a redelivery backoff: Initial, then Multiplier (at least
// 1) times the delay before each time, at most Max.
type Redelivery struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
}

func (r *Redelivery) proto() *pb.Redelivery {
	if r == nil {
		return nil
	}
	return &pb.Redelivery{
		Initial: durationpb.New(r.Initial), Multiplier: r.Multiplier, Max: durationpb.New(r.Max),
	}
}

func (s QueueSpec) proto() *pb.QueueSpec {
	out := &pb.QueueSpec{
		Name: s.Name, Transient: s.Transient, MaxUnprocessed: s.MaxUnprocessed,
		Overflow: s.Overflow, MaxHistory: s.MaxHistory, UnlimitedHistory: s.UnlimitedHistory,
		DeadLetter: s.DeadLetter, Unmatched: s.Unmatched, AutoDelete: s.AutoDelete,
		MaxDeliveries: s.MaxDeliveries, Redelivery: s.Redelivery.proto(),
	}
	if s.DedupWindow != nil {
		out.DedupWindow = durationpb.New(*s.DedupWindow)
	}
	return out
}

// WaitOption sets how Take, TakeLeased and Read wait and how much they
// return: WithTimeout, WithMax.
type WaitOption func(*waitOptions)

type waitOptions struct {
	timeout time.Duration
	max     int
}

// WithTimeout waits up to d for a first match (default 0: try once).
// Nothing in time is an empty answer, not an error.
func WithTimeout(d time.Duration) WaitOption { return func(o *waitOptions) { o.timeout = d } }

// WithMax returns at most n messages (default 1).
func WithMax(n int) WaitOption { return func(o *waitOptions) { o.max = n } }

func waitFor(opts []WaitOption) waitOptions {
	var o waitOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}
