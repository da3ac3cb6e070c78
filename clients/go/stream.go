package msgboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
)

// ------------------------------------------------------------------ posting many

// PostMany posts msgs to one queue over one PostStream, in batches of
// batch messages (0: 1000), each stored all-or-nothing, all sent without
// waiting for answers (the board commits concurrent batches together). It
// returns the receipts of the batches stored, in order, up to the first
// failed one, whose *Error it returns. With failover on, the first batch
// goes as one Post (keyed, sent again as Post is), which finds the
// primary; the stream of the rest is not sent again if it breaks.
func (c *Client) PostMany(ctx context.Context, queue string, msgs []Message, batch int) ([]Receipt, error) {
	if batch <= 0 {
		batch = 1000
	}
	var head []Receipt
	if c.boards.on() && len(msgs) > 0 {
		n := batch
		if n > len(msgs) {
			n = len(msgs)
		}
		if _, err := protoMessages(msgs); err != nil {
			return nil, invalid(err) // all or nothing checked first, as without failover
		}
		var err error
		if head, err = c.PostReceipts(ctx, queue, msgs[:n]...); err != nil {
			return nil, err
		}
		if msgs = msgs[n:]; len(msgs) == 0 {
			return head, nil
		}
	}
	ms, err := protoMessages(msgs)
	if err != nil {
		return nil, invalid(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Stub().PostStream(ctx)
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
	out := head
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

// Publisher opens a PostStream on the board the client talks to now (with
// failover, make a call first so that it is the primary); it does not
// follow a failover: Close it when done, and open another.
func (c *Client) Publisher(ctx context.Context) (*Publisher, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.Stub().PostStream(ctx)
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
