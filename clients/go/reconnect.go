package msgboard

import (
	"fmt"
	"io"
	"math/rand"
	"time"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
)

// How a Subscription outlives a lost stream: it opens a new one, waiting
// between attempts, and keeps delivery ids increasing across streams so
// that an id of a lost stream never names a delivery of the new one.

// Reconnection backoff of a Subscription (see Subscribe.NoReconnect).
var (
	ReconnectWait    = 100 * time.Millisecond
	MaxReconnectWait = 5 * time.Second
)

// lost says whether err lost a stream that is to be opened again.
func (s *Subscription) lost(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.opts.NoReconnect && !s.ended && s.ctx.Err() == nil && IsCode(err, ErrUnavailable.Code)
}

// reopen forgets the lost stream (its deliveries come again, its acks in
// flight are rejected as UNAVAILABLE) and opens a new one, waiting between
// attempts; nil once the subscription has ended (done set).
func (s *Subscription) reopen(cause error) pb.Board_SubscribeClient {
	s.mu.Lock()
	lost := &Error{Code: ErrUnavailable.Code, Reason: "Unavailable",
		Message: "the stream was lost before the board answered this ack; " +
			"its message comes again unless the ack was applied"}
	for _, r := range s.inFlight {
		s.rejectAcks(r.GetAck(), lost)
	}
	if s.held != nil {
		s.rejectAcks(s.held.GetAck(), lost)
	}
	s.inFlight, s.held = map[uint64]*pb.SubscribeRequest{}, nil
	kept := s.items[:0]
	for _, it := range s.items {
		if it.d == nil {
			kept = append(kept, it)
		}
	}
	s.items, s.base = kept, s.last
	s.notify()
	s.mu.Unlock()
	if s.opts.OnReconnect != nil {
		s.opts.OnReconnect(cause)
	}
	wait := ReconnectWait
	// With failover, a standby's refusal names the primary: tried at once
	// (up to three times in a row).
	atOnce, quick := s.client.boards.moved(s.address, cause), 0
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		ended, changed := s.ended, s.changed
		s.mu.Unlock()
		if ended || s.ctx.Err() != nil {
			s.finish(io.EOF)
			return nil
		}
		if atOnce && quick < 3 {
			quick++
		} else if attempt > 0 {
			quick = 0
			select {
			case <-time.After(jitter(wait)):
			case <-changed: // End or Close
				continue
			case <-s.ctx.Done():
				continue
			}
			if wait *= 2; wait > MaxReconnectWait {
				wait = MaxReconnectWait
			}
		}
		stream, first, err := s.open()
		if err == nil {
			s.opening(stream, first)
			if s.opts.OnReconnect != nil {
				s.opts.OnReconnect(nil)
			}
			return stream
		}
		if !IsCode(err, ErrUnavailable.Code) {
			s.finish(err) // NOT_FOUND, PERMISSION_DENIED...: no use trying again
			return nil
		}
		atOnce = s.client.boards.moved(s.address, err)
	}
}

// finish ends the subscription with err (io.EOF: OK).
func (s *Subscription) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = err
	s.notify()
}

// rejectAcks puts every id of a (board-side) ack request in Rejected (mu held).
func (s *Subscription) rejectAcks(a *pb.Acks, e *Error) {
	for _, id := range a.GetIds() {
		s.rejected[s.base+id] = e
	}
	if a.GetUpTo() > 0 {
		s.rejected[s.base+a.GetUpTo()] = e
	}
}

// jitter is d less up to half of it, at random.
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int63n(int64(d/2)+1))
}

// board turns delivery ids into the current stream's, leaving out those
// of a lost stream (noted in Rejected, as NOT_FOUND, when note) (mu held).
func (s *Subscription) board(ids []uint64, note bool) []uint64 {
	out := make([]uint64, 0, len(ids))
	for _, id := range ids {
		if id > s.base {
			out = append(out, id-s.base)
		} else if id > 0 && note {
			s.rejected[id] = &Error{Code: ErrNotFound.Code, Reason: "NotFound", Message: fmt.Sprintf(
				"delivery %d came on a stream that was lost: its message comes again under a new id", id)}
		}
	}
	return out
}
