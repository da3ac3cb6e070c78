package msgboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ------------------------------------------------------------------ subscribing

// Subscribe asks for a consumer's stream: a session selector on Queue, or
// attaching to the durable terminal selector SelectorID.
type Subscribe struct {
	Queue      string
	Pattern    Pattern
	Op         pb.Operation // Move (default) or Copy
	Credit     int64        // most unacked deliveries; 0: 100 (the server caps it)
	Start      pb.Position  // Current (default), Oldest, AtSeq (StartSeq), AtTime (StartTime)
	StartSeq   uint64
	StartTime  time.Time
	SelectorID string
	// NoReconnect ends the subscription when its stream is lost to
	// UNAVAILABLE (the board stopped or restarted, the network broke).
	// By default it subscribes again with backoff (ReconnectWait doubling
	// up to MaxReconnectWait, jittered) until ctx ends or Close, and Next
	// carries on: the deliveries left unacked come again, under new ids.
	NoReconnect bool
	// OnReconnect, if set, is called with the error when the stream is
	// lost and a new one is sought, and with nil once it is open again.
	OnReconnect func(err error)
	// Redelivery delays this consumer's nacked or lost deliveries before
	// they are delivered again; nil: the queue's policy.
	Redelivery *Redelivery
}

// Delivery is one delivered message: d.Ack(), d.Nack() or d.Reject(), or
// the Subscription's calls with its ID.
type Delivery struct {
	ID      uint64
	Message *Message
	sub     *Subscription
}

// Ack acknowledges the delivery (coalesced as Subscription.Ack); it returns
// the ref of the request that carries it.
func (d *Delivery) Ack() (uint64, error) { return d.sub.Ack(d.ID) }

// Nack gives the delivery back for redelivery; it returns the request's ref.
func (d *Delivery) Nack() (uint64, error) { return d.sub.Nack(d.ID) }

// Reject dead-letters the delivery; it returns the request's ref.
func (d *Delivery) Reject() (uint64, error) { return d.sub.Reject(d.ID) }

// Subscription is a consumer's stream. Next returns the deliveries; Ack,
// Nack and Credit may be called from any goroutine. Acks made while an ack
// request is in flight are held and go as one request when it is answered
// (coalesced acks). Acks are per delivery: one the board cannot apply comes
// back in Rejected, the others go through.
//
// A stream lost to UNAVAILABLE is opened again (see Subscribe.NoReconnect),
// on the primary when the client follows one (WithFailover): at once on the
// primary a standby names, on the next address when its board is gone. The
// deliveries left unacked on the old primary come again from the new one
// (at-least-once). Delivery ids keep increasing across streams: the ids of a lost stream
// are never reused, and acking one is rejected as NOT_FOUND (its message
// comes again); an ack in flight when the stream broke is rejected as
// UNAVAILABLE (applied or not: if not, its message comes again).
type Subscription struct {
	// Selector is the selector the consumer reads.
	Selector *pb.Selector
	// Credit is the credit the board applies (asked, capped by the server);
	// MaxOutstandingBytes the most message bytes it lets the consumer hold.
	Credit              int64
	MaxOutstandingBytes uint64

	client  *Client
	ctx     context.Context
	opened  *pb.Subscription
	address string // the board the last stream was opened on (only open and reopen touch it)
	opts    Subscribe
	cancel  context.CancelFunc

	mu       sync.Mutex
	stream   pb.Board_SubscribeClient
	changed  chan struct{} // closed and replaced whenever the state below changes
	items    []item        // deliveries and in-stream errors not yet read by Next
	done     error         // how the stream ended (io.EOF: OK), once it has
	acked    map[uint64]bool
	rejected map[uint64]*Error
	nextRef  uint64
	inFlight map[uint64]*pb.SubscribeRequest // ack requests sent, not yet answered, by ref
	held     *pb.SubscribeRequest            // the ack request filled while another is in flight
	ended    bool                            // End was asked
	closed   bool                            // the send side is half-closed
	base     uint64                          // this stream's delivery ids are base + the board's
	last     uint64                          // the highest delivery id given out
}

type item struct {
	d   *Delivery
	err error
}

// Subscribe opens a subscription and waits for the board's `subscribed`.
// The stream lives until Close or ctx ends.
func (c *Client) Subscribe(ctx context.Context, s Subscribe) (*Subscription, error) {
	pp, err := s.Pattern.Proto()
	if err != nil {
		return nil, invalid(fmt.Errorf("open.%w", err))
	}
	open := &pb.Subscription{
		Queue: s.Queue, Pattern: pp, Op: s.Op, Credit: s.Credit, Start: s.Start,
		StartSeq: s.StartSeq, SelectorId: s.SelectorID, Redelivery: s.Redelivery.proto(),
	}
	if s.Pattern.Address == "" && s.Pattern.Filter == "" && len(s.Pattern.Templates) == 0 {
		open.Pattern = nil
	}
	if !s.StartTime.IsZero() {
		open.StartTime = timestamppb.New(s.StartTime)
	}
	ctx, cancel := context.WithCancel(ctx)
	sub := &Subscription{
		client: c, ctx: ctx, opened: open, opts: s, cancel: cancel, changed: make(chan struct{}),
		acked: map[uint64]bool{}, rejected: map[uint64]*Error{},
		inFlight: map[uint64]*pb.SubscribeRequest{},
	}
	// Opening is safe to do again: a refused or broken opening leaves no
	// selector behind (a session selector ends with its stream).
	type opened struct {
		stream pb.Board_SubscribeClient
		first  *pb.SubscribeResponse
	}
	o, err := run(ctx, c.boards, true, func(context.Context, pb.BoardClient) (opened, error) {
		stream, first, err := sub.open()
		return opened{stream, first}, err
	})
	if err != nil {
		cancel()
		return nil, err
	}
	sub.opening(o.stream, o.first)
	go sub.receive()
	return sub, nil
}

// open opens one stream on the client's current board and reads the
// board's answer to the opening.
func (s *Subscription) open() (pb.Board_SubscribeClient, *pb.SubscribeResponse, error) {
	address, b, err := s.client.boards.board()
	s.address = address
	if err != nil {
		return nil, nil, err
	}
	stream, err := b.stub.Subscribe(s.ctx)
	if err == nil {
		err = stream.Send(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Open{Open: s.opened}})
		if errors.Is(err, io.EOF) {
			err = nil // the board ended the stream: Recv says why
		}
	}
	var first *pb.SubscribeResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil {
		return nil, nil, fromRPC(err)
	}
	if e := first.GetError(); e != nil {
		return nil, nil, fromWire(e, first.Ref)
	}
	return stream, first, nil
}

// opening takes a new stream and the board's `subscribed` on it.
func (s *Subscription) opening(stream pb.Board_SubscribeClient, first *pb.SubscribeResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stream, s.closed, s.base = stream, false, s.last
	s.Selector, s.Credit = first.GetSubscribed(), first.Credit
	s.MaxOutstandingBytes = first.MaxOutstandingBytes
	if s.ended { // End came while this stream was being opened
		s.closed = true
		_ = stream.CloseSend()
	}
}

// receive reads the stream until it ends, and opens it again when it is
// lost to UNAVAILABLE (unless NoReconnect).
func (s *Subscription) receive() {
	s.mu.Lock()
	stream := s.stream
	s.mu.Unlock()
	for {
		r, err := stream.Recv()
		if err != nil && !errors.Is(err, io.EOF) {
			err = fromRPC(err)
			if s.lost(err) {
				if stream = s.reopen(err); stream != nil {
					continue
				}
				return
			}
		}
		s.mu.Lock()
		switch {
		case err != nil:
			if errors.Is(err, io.EOF) {
				s.done = io.EOF
			} else {
				s.done = err
			}
		case r.GetDeliveries() != nil:
			for _, d := range r.GetDeliveries().Items {
				id := s.base + d.Id
				if id > s.last {
					s.last = id
				}
				s.items = append(s.items, item{d: &Delivery{ID: id, Message: FromProto(d.Message), sub: s}})
			}
		case r.GetAcked() != nil:
			for _, id := range r.GetAcked().Ids {
				s.acked[s.base+id] = true
			}
			for _, x := range r.GetAcked().Rejected {
				s.rejected[s.base+x.Id] = fromWire(x.Error, r.Ref)
			}
			s.answered(r.Ref)
		case r.GetError() != nil:
			s.items = append(s.items, item{err: fromWire(r.GetError(), r.Ref)})
			s.answered(r.Ref)
		}
		s.notify()
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// notify wakes whoever waits on a change (mu held).
func (s *Subscription) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Next returns the next delivery, or an in-stream *Error (a nack or credit
// request the board refused; the stream carries on), or io.EOF once the
// stream has ended OK (after End or Close), or the error that ended it.
func (s *Subscription) Next(ctx context.Context) (*Delivery, error) {
	for {
		s.mu.Lock()
		if len(s.items) > 0 {
			it := s.items[0]
			s.items = s.items[1:]
			s.mu.Unlock()
			return it.d, it.err
		}
		done, changed := s.done, s.changed
		s.mu.Unlock()
		if done != nil {
			return nil, done
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}

// Ack acknowledges deliveries. It returns the ref of the request that
// carries them (several acks may share one).
func (s *Subscription) Ack(ids ...uint64) (uint64, error) { return s.ack(ids, 0) }

// AckUpTo acknowledges every outstanding delivery up to id (cumulative); it
// goes at once, with the acks held.
func (s *Subscription) AckUpTo(id uint64) (uint64, error) { return s.ack(nil, id) }

func (s *Subscription) ack(ids []uint64, upTo uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids = s.board(ids, true)
	if upTo > 0 {
		if up := s.board([]uint64{upTo}, true); len(up) > 0 {
			upTo = up[0]
		} else {
			upTo = 0
		}
	}
	if len(ids) == 0 && upTo == 0 {
		return 0, nil // only deliveries of a lost stream: nothing to send
	}
	r := s.held
	if r != nil {
		a := r.GetAck()
		a.Ids = append(a.Ids, ids...)
		if upTo > a.UpTo {
			a.UpTo = upTo
		}
	} else {
		s.nextRef++
		r = &pb.SubscribeRequest{Ref: s.nextRef, Kind: &pb.SubscribeRequest_Ack{Ack: &pb.Acks{Ids: ids, UpTo: upTo}}}
		s.held = r
	}
	// A cumulative ack is a batch already: it goes at once.
	if len(s.inFlight) == 0 || upTo > 0 {
		return r.Ref, s.release()
	}
	return r.Ref, nil
}

// Nack gives deliveries back for redelivery. It returns the request's ref
// (0 when every delivery came on a lost stream: they come again anyway).
func (s *Subscription) Nack(ids ...uint64) (uint64, error) { return s.nack(ids, false, nil) }

// NackAfter gives deliveries back to be delivered again after delay rather
// than the redelivery policy's next step. It returns the request's ref.
func (s *Subscription) NackAfter(delay time.Duration, ids ...uint64) (uint64, error) {
	return s.nack(ids, false, durationpb.New(delay))
}

// Reject dead-letters deliveries instead of giving them back.
func (s *Subscription) Reject(ids ...uint64) (uint64, error) { return s.nack(ids, true, nil) }

func (s *Subscription) nack(ids []uint64, reject bool, delay *durationpb.Duration) (uint64, error) {
	s.mu.Lock()
	n := len(ids)
	ids = s.board(ids, false)
	s.mu.Unlock()
	if n > 0 && len(ids) == 0 {
		return 0, nil
	}
	r := &pb.Nacks{Ids: ids, Reject: reject, Delay: delay}
	return s.request(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Nack{Nack: r}})
}

// AddCredit raises the consumer's credit by n messages (capped by the server).
func (s *Subscription) AddCredit(n int64) (uint64, error) {
	return s.request(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Credit{Credit: n}})
}

// request sends r after the held acks; returns its ref.
func (s *Subscription) request(r *pb.SubscribeRequest) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.release(); err != nil {
		return 0, err
	}
	s.nextRef++
	r.Ref = s.nextRef
	return r.Ref, s.send(r)
}

// answered notes the answer to request ref; the last ack request in flight
// answered lets the held one go (mu held).
func (s *Subscription) answered(ref uint64) {
	if _, ok := s.inFlight[ref]; ok {
		delete(s.inFlight, ref)
		if len(s.inFlight) == 0 {
			_ = s.release() // a broken stream ends receive() with its error
		}
	}
}

// release sends the held ack request, and the half-close End asked for
// once nothing is held (mu held).
func (s *Subscription) release() error {
	if r := s.held; r != nil {
		s.held = nil
		s.inFlight[r.Ref] = r
		if err := s.send(r); err != nil {
			return err
		}
	}
	if s.ended && !s.closed {
		s.closed = true
		return s.stream.CloseSend()
	}
	return nil
}

func (s *Subscription) send(r *pb.SubscribeRequest) error {
	if s.closed {
		return errors.New("msgboard: the subscription has ended")
	}
	if err := s.stream.Send(r); err != nil {
		if !s.opts.NoReconnect {
			return nil // lost with the stream: receive opens a new one and says so
		}
		return fmt.Errorf("msgboard: the subscription stream broke (Next tells why): %w", err)
	}
	return nil
}

// Acked says whether the board has made the ack of delivery id durable.
func (s *Subscription) Acked(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[id]
}

// Rejected returns the acks the board could not apply, by delivery id, with
// why (NOT_FOUND: already acked or given back; INVALID_ARGUMENT: never
// delivered). Information, not failure: the other acks went through.
func (s *Subscription) Rejected() map[uint64]*Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uint64]*Error, len(s.rejected))
	for k, v := range s.rejected {
		out[k] = v
	}
	return out
}

// WaitAcked waits until the board has made the acks of these deliveries
// durable (or rejected them: see Rejected).
func (s *Subscription) WaitAcked(ctx context.Context, ids ...uint64) error {
	for {
		s.mu.Lock()
		left := 0
		for _, id := range ids {
			if !s.acked[id] && s.rejected[id] == nil {
				left++
			}
		}
		done, changed := s.done, s.changed
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		if done != nil {
			return fmt.Errorf("msgboard: the subscription ended before the acks were answered: %w", done)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Flush waits until every ack sent or held has been answered.
func (s *Subscription) Flush(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.held != nil && len(s.inFlight) == 0 {
			if err := s.release(); err != nil {
				s.mu.Unlock()
				return err
			}
		}
		idle := s.held == nil && len(s.inFlight) == 0
		done, changed := s.done, s.changed
		s.mu.Unlock()
		if idle {
			return nil
		}
		if done != nil {
			if errors.Is(done, io.EOF) {
				return nil
			}
			return done
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// End asks the board to end the stream (a half-close, after the held
// acks): it applies the acks and nacks sent so far, gives back the unacked
// deliveries, and Next returns io.EOF once the deliveries on their way are
// read.
func (s *Subscription) End() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	s.notify() // a reconnection waiting between attempts gives up
	return s.release()
}

// Close ends the subscription: End, then up to wait for the board to
// finish the stream (deliveries still coming are dropped; their messages
// go back), then the stream is cancelled.
func (s *Subscription) Close(wait time.Duration) error {
	err := s.End()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for err == nil {
		s.mu.Lock()
		s.items = nil
		done, changed := s.done, s.changed
		s.mu.Unlock()
		if done != nil {
			if !errors.Is(done, io.EOF) {
				err = done
			}
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-changed:
		}
	}
	s.cancel()
	return err
}
