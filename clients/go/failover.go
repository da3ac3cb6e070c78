package msgboard

import (
	"context"
	"errors"
	"math/rand"
	"strings"
	"sync"
	"time"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/grpc"
)

// Following the primary. A Client dialed with several addresses (Dial("a,b,c")
// or DialList) finds the primary among them and follows it, as the Python
// and Node clients do:
//
//   - UNAVAILABLE with reason NotPrimary (a standby): the call goes at once
//     to the primary it names (metadata "primary");
//   - no connection, or reason NoLease (a primary unsure of its lease), or
//     DEADLINE_EXCEEDED: the next address, after a pause;
//   - any other UNAVAILABLE (the connection broke during the call): the
//     same board again, after a pause.
//
// A call refused before it ran (NotPrimary, NoLease, no connection) is sent
// again whatever it is; after another UNAVAILABLE only the calls that change
// nothing twice are: reads, CreateQueue, and a Post whose messages all carry
// keys (with failover on, Post keys every message that has none). Take, Ack,
// selector changes and deletions whose answer was lost return the
// UNAVAILABLE: the board may have done them. Attempts go on for up to the
// failover deadline (FailoverDeadline with several addresses, WithFailover),
// pausing FirstPause doubling up to MostPause (jittered) between them.

// The failover deadline with several addresses, and the pauses between attempts.
var (
	FailoverDeadline = 30 * time.Second
	FirstPause       = 50 * time.Millisecond
	MostPause        = 1 * time.Second
)

// WithFailover sets how long a call keeps looking for the primary among the
// boards after a failure (0: off; default FailoverDeadline with several
// addresses, 0 with one).
func WithFailover(d time.Duration) Option { return func(o *options) { o.failover = &d } }

// again: the unary calls that change nothing when sent twice.
var again = map[string]bool{
	"Browse": true, "CreateQueue": true, "GetQueue": true, "GetSelector": true,
	"ListConsumers": true, "ListLeases": true, "ListQueues": true, "ListSelectors": true, "Read": true, "Stats": true,
}

// noConnection: grpc-go's words for a call that never reached a board.
var noConnection = []string{"Error while dialing", "all SubConns are in TransientFailure", "produced zero addresses"}

// Refused says whether err is a refusal before the call ran (NotPrimary,
// NoLease) or a call that reached no board: sending it again does nothing twice.
func Refused(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrUnavailable.Code {
		return false
	}
	if e.Reason == "NotPrimary" || e.Reason == "NoLease" {
		return true
	}
	for _, words := range noConnection {
		if strings.Contains(e.Message, words) {
			return true
		}
	}
	return false
}

// ErrNotPrimary matches a standby's refusal (its Metadata["primary"] names the primary).
var ErrNotPrimary = &Error{Code: ErrUnavailable.Code, Reason: "NotPrimary"}

type board struct {
	conn *grpc.ClientConn
	stub pb.BoardClient
}

// failover holds the boards a Client may talk to, the one it talks to now,
// and a connection to each (made when first needed, kept until Close).
type failover struct {
	addresses []string
	deadline  time.Duration // 0: off
	dial      func(address string) (*grpc.ClientConn, error)

	mu      sync.Mutex
	current string
	at      int // the listed address tried last: where "the next" counts from
	boards  map[string]board
}

func (f *failover) on() bool { return f.deadline > 0 }

// board is the current board's address and connection.
func (f *failover) board() (string, board, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	address := f.current
	b, ok := f.boards[address]
	if !ok {
		conn, err := f.dial(address)
		if err != nil {
			return address, board{}, err
		}
		b = board{conn, pb.NewBoardClient(conn)}
		f.boards[address] = b
	}
	return address, b, nil
}

// moved takes note that address answered err and picks the board to try
// next; true when it is to be tried at once (a standby named its primary).
func (f *failover) moved(address string, err error) bool {
	if !f.on() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != address {
		return true // another call moved already
	}
	for i, a := range f.addresses {
		if a == address {
			f.at = i
		}
	}
	var e *Error
	errors.As(err, &e)
	if e != nil && e.Reason == "NotPrimary" && e.Metadata["primary"] != "" && e.Metadata["primary"] != address {
		f.current = e.Metadata["primary"]
		return true
	}
	if Refused(err) || IsCode(err, ErrDeadlineExceeded.Code) {
		f.at = (f.at + 1) % len(f.addresses)
		f.current = f.addresses[f.at]
	}
	return false
}

func (f *failover) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first error
	for _, b := range f.boards {
		if err := b.conn.Close(); err != nil && first == nil {
			first = err
		}
	}
	f.boards = map[string]board{}
	return first
}

// pause is the wait before attempt n+1, jittered.
func pause(n int) time.Duration {
	d := FirstPause << uint(n)
	if d > MostPause || d <= 0 {
		d = MostPause
	}
	return d/2 + time.Duration(rand.Int63n(int64(d/2)+1))
}

// run calls call on the current board, and again as the comment above says
// (again: also after an UNAVAILABLE that may have come after it ran). Its
// error is an *Error.
func run[T any](ctx context.Context, f *failover, again bool, call func(context.Context, pb.BoardClient) (T, error)) (T, error) {
	var end time.Time
	attempt, quick := 0, 0
	for {
		address, b, err := f.board()
		var out T
		if err == nil {
			out, err = call(ctx, b.stub)
			var e *Error
			if err != nil && !errors.As(err, &e) {
				err = fromRPC(err) // a raw gRPC error; an *Error keeps its details
			}
		}
		if err == nil {
			return out, nil
		}
		outage := IsCode(err, ErrUnavailable.Code) || IsCode(err, ErrDeadlineExceeded.Code)
		if !f.on() || !outage || ctx.Err() != nil {
			return out, err
		}
		atOnce := f.moved(address, err)
		if IsCode(err, ErrDeadlineExceeded.Code) || !(again || Refused(err)) {
			return out, err
		}
		now := time.Now()
		if end.IsZero() {
			end = now.Add(f.deadline)
		}
		wait := time.Duration(0)
		if atOnce && quick < 3 {
			quick++
		} else {
			wait, quick = pause(attempt), 0
			attempt++
		}
		if now.Add(wait).After(end) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(wait):
		}
	}
}

// call is one unary RPC of the Board stub (a method expression such as
// pb.BoardClient.Take) through the client's failover.
func call[Req, Resp any](ctx context.Context, c *Client, rpc func(pb.BoardClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, again bool) (Resp, error) {
	return run(ctx, c.boards, again, func(ctx context.Context, s pb.BoardClient) (Resp, error) {
		return rpc(s, ctx, req)
	})
}

// addresses splits "a,b,c" ("" : $MSGBOARD_SERVER, else DefaultAddress).
func splitAddresses(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, invalid(errors.New("server: an empty address in " + s + " (give HOST:PORT[,HOST:PORT...])"))
		}
		out = append(out, a)
	}
	return out, nil
}

// DefaultPort is the port of an address that names none: the board's, not gRPC's 443.
const DefaultPort = "7878"

// WithPort is address with the board's port (DefaultPort) when it names a
// host alone ("127.0.0.1", "localhost", "[::1]", "::1"); a gRPC target with
// a scheme ("unix:/path", "dns:///host:7") is left as it is. The Python
// client's rule (msgboard/client/failover.py's with_port).
func WithPort(address string) string {
	switch {
	case strings.Contains(address, "/") || strings.HasPrefix(address, "unix"):
		return address
	case strings.HasPrefix(address, "["): // [v6] or [v6]:port
		if strings.Contains(address, "]:") {
			return address
		}
		return address + ":" + DefaultPort
	case strings.Count(address, ":") > 1: // a bare IPv6 address
		return "[" + address + "]:" + DefaultPort
	case strings.Contains(address, ":"):
		return address
	}
	return address + ":" + DefaultPort
}
