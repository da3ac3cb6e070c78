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

// ------------------------------------------------------------------ posting many

// PostMany posts msgs to one queue over one PostStream, in batches of
// batch messages (0: 1000), each stored all-or-nothing, all sent without
// waiting for answers (the board commits concurrent batches together). It
// returns the receipts of the batches stored, in order, up to the first
// failed one, whose *Error it returns.
func (c *Client) PostMany(ctx context.Context, queue string, msgs []Message, batch int) ([]Receipt, error) {
	if batch <= 0 {
		batch = 1000
	}
	ms, err := protoMessages(msgs)
	if err != nil {
		return nil, invalid(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.stub.PostStream(ctx)
	if err != nil {
		return nil, fromRPC(err)
	}
	sent := make(chan error, 1)
	go func() {
		for i := 0; i < len(ms); i += batch {
			end := i + batch
			if end > len(ms) {
				end = len(ms)
			}
			req := &pb.PostStreamRequest{BatchId: uint64(i / batch), Queue: queue, Messages: ms[i:end]}
			if err := stream.Send(req); err != nil {
				sent <- err // the stream broke: Recv says why
				return
			}
		}
		sent <- stream.CloseSend()
	}()
	var out []Receipt
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fromRPC(err)
		}
		if r.Error != nil {
			return out, fromWire(r.Error, 0)
		}
		out = append(out, receipts(r.Seqs, r.Dispositions)...)
	}
}

// Publisher is one open PostStream that many goroutines may post on at
// once: each Post is one batch, stored all-or-nothing, answered once
// durable; batches from concurrent posters are committed together.
type Publisher struct {
	stream pb.Board_PostStreamClient
	cancel context.CancelFunc

	mu      sync.Mutex // orders sends with the waiters' queue
	batch   uint64
	waiters []chan answer // in request order: the board answers in that order
	done    error         // how the stream ended, once it has
	ended   chan struct{} // closed when receive returns
}

// errPostStreamEnded answers posts after the stream ended OK (Close).
var errPostStreamEnded = errors.New("msgboard: the post stream has ended")

type answer struct {
	r   *pb.PostStreamResponse
	err error
}

// Publisher opens a PostStream; Close it when done.
func (c *Client) Publisher(ctx context.Context) (*Publisher, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.stub.PostStream(ctx)
	if err != nil {
		cancel()
		return nil, fromRPC(err)
	}
	p := &Publisher{stream: stream, cancel: cancel, ended: make(chan struct{})}
	go p.receive()
	return p, nil
}

func (p *Publisher) receive() {
	defer close(p.ended)
	for {
		r, err := p.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errPostStreamEnded
			} else {
				err = fromRPC(err)
			}
		}
		p.mu.Lock()
		var w chan answer
		if len(p.waiters) > 0 {
			w, p.waiters = p.waiters[0], p.waiters[1:]
		}
		if err != nil {
			p.done = err
			for _, x := range p.waiters {
				x <- answer{err: err}
			}
			p.waiters = nil
		}
		p.mu.Unlock()
		if w != nil {
			w <- answer{r, err}
		}
		if err != nil {
			return
		}
	}
}

// Post posts messages to one queue in one batch and returns their seqs.
func (p *Publisher) Post(queue string, msgs ...Message) ([]uint64, error) {
	rs, err := p.PostReceipts(queue, msgs...)
	return seqs(rs), err
}

// PostReceipts is Post, answering what became of each message.
func (p *Publisher) PostReceipts(queue string, msgs ...Message) ([]Receipt, error) {
	ms, err := protoMessages(msgs)
	if err != nil {
		return nil, invalid(err)
	}
	w := make(chan answer, 1)
	p.mu.Lock()
	if p.done != nil {
		p.mu.Unlock()
		return nil, p.done
	}
	p.batch++
	err = p.stream.Send(&pb.PostStreamRequest{BatchId: p.batch, Queue: queue, Messages: ms})
	if err == nil {
		p.waiters = append(p.waiters, w)
	}
	p.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("msgboard: the post stream broke: %w", err)
	}
	a := <-w
	if a.err != nil {
		return nil, a.err
	}
	if a.r.Error != nil {
		return nil, fromWire(a.r.Error, 0)
	}
	return receipts(a.r.Seqs, a.r.Dispositions), nil
}

// Close ends the stream once the posts in flight have their answers.
func (p *Publisher) Close() error {
	p.mu.Lock()
	err := p.stream.CloseSend()
	p.mu.Unlock()
	if err == nil {
		<-p.ended
		if !errors.Is(p.done, errPostStreamEnded) {
			err = p.done
		}
	}
	p.cancel()
	return err
}

// ------------------------------------------------------------------ subscribing

// Subscribe asks for a consumer's stream: a session selector on Queue, or
// attaching to the durable terminal selector SelectorID.
type Subscribe struct {
	Queue      string
	Pattern    Pattern
	Op         pb.Operation // MOVE (default) or COPY
	Credit     int64        // most unacked deliveries; 0: 100 (the server caps it)
	Start      pb.Position
	StartSeq   uint64
	StartTime  time.Time
	SelectorID string
	// Redelivery delays this consumer's nacked or lost deliveries before
	// they are delivered again; nil: the queue's policy.
	Redelivery *pb.Redelivery
}

// Delivery is one delivered message, acked or nacked by its ID.
type Delivery struct {
	ID      uint64
	Message *Message
}

// Subscription is a consumer's stream. Next returns the deliveries; Ack,
// Nack and Credit may be called from any goroutine. Acks made while an ack
// request is in flight are held and go as one request when it is answered
// (coalesced acks). Acks are per delivery: one the board cannot apply comes
// back in Rejected, the others go through.
type Subscription struct {
	// Selector is the selector the consumer reads.
	Selector *pb.Selector
	// Credit is the credit the board applies (asked, capped by the server);
	// MaxOutstandingBytes the most message bytes it lets the consumer hold.
	Credit              int64
	MaxOutstandingBytes uint64

	stream pb.Board_SubscribeClient
	cancel context.CancelFunc

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever the state below changes
	items    []item        // deliveries and in-stream errors not yet read by Next
	done     error         // how the stream ended (io.EOF: OK), once it has
	acked    map[uint64]bool
	rejected map[uint64]*Error
	nextRef  uint64
	inFlight map[uint64]bool      // refs of ack requests sent, not yet answered
	held     *pb.SubscribeRequest // the ack request filled while another is in flight
	ended    bool                 // End was asked
	closed   bool                 // the send side is half-closed
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
		StartSeq: s.StartSeq, SelectorId: s.SelectorID, Redelivery: s.Redelivery,
	}
	if s.Pattern.Address == "" && s.Pattern.Filter == "" && len(s.Pattern.Templates) == 0 {
		open.Pattern = nil
	}
	if !s.StartTime.IsZero() {
		open.StartTime = timestamppb.New(s.StartTime)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.stub.Subscribe(ctx)
	if err == nil {
		err = stream.Send(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Open{Open: open}})
		if errors.Is(err, io.EOF) {
			err = nil // the board ended the stream: Recv says why
		}
	}
	var first *pb.SubscribeResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, fromRPC(err)
	}
	if e := first.GetError(); e != nil {
		cancel()
		return nil, fromWire(e, first.Ref)
	}
	sub := &Subscription{
		Selector: first.GetSubscribed(), Credit: first.Credit,
		MaxOutstandingBytes: first.MaxOutstandingBytes,
		stream:              stream, cancel: cancel, changed: make(chan struct{}),
		acked: map[uint64]bool{}, rejected: map[uint64]*Error{}, inFlight: map[uint64]bool{},
	}
	go sub.receive()
	return sub, nil
}

// receive reads the stream until it ends.
func (s *Subscription) receive() {
	for {
		r, err := s.stream.Recv()
		s.mu.Lock()
		switch {
		case err != nil:
			if errors.Is(err, io.EOF) {
				s.done = io.EOF
			} else {
				s.done = fromRPC(err)
			}
		case r.GetDeliveries() != nil:
			for _, d := range r.GetDeliveries().Items {
				s.items = append(s.items, item{d: &Delivery{ID: d.Id, Message: FromProto(d.Message)}})
			}
		case r.GetAcked() != nil:
			for _, id := range r.GetAcked().Ids {
				s.acked[id] = true
			}
			for _, x := range r.GetAcked().Rejected {
				s.rejected[x.Id] = fromWire(x.Error, r.Ref)
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

// Nack gives deliveries back for redelivery. It returns the request's ref.
func (s *Subscription) Nack(ids ...uint64) (uint64, error) {
	return s.request(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Nack{Nack: &pb.Nacks{Ids: ids}}})
}

// NackAfter gives deliveries back to be delivered again after delay rather
// than the redelivery policy's next step. It returns the request's ref.
func (s *Subscription) NackAfter(delay time.Duration, ids ...uint64) (uint64, error) {
	n := &pb.Nacks{Ids: ids, Delay: durationpb.New(delay)}
	return s.request(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Nack{Nack: n}})
}

// Reject dead-letters deliveries instead of giving them back.
func (s *Subscription) Reject(ids ...uint64) (uint64, error) {
	return s.request(&pb.SubscribeRequest{Kind: &pb.SubscribeRequest_Nack{Nack: &pb.Nacks{Ids: ids, Reject: true}}})
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
	if s.inFlight[ref] {
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
		s.inFlight[r.Ref] = true
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
