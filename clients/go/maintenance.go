package msgboard

// An operator's hands on waiting messages: purge a queue, move messages to
// another queue (or each back to its dead-letter origin), delete them, give
// back leased ones. Each is one call on the board, all or nothing, and
// needs the manage verb (a move: on the source and on each destination).

import (
	"context"
	"fmt"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
)

// Choose says which waiting messages MoveMessages and DeleteMessages act
// on: Seqs, or the oldest matching Pattern, or (All) the oldest waiting,
// at most Limit (0: the board's most, 10,000). One of Seqs, Pattern and
// All is needed: the board refuses the zero Choose (INVALID_ARGUMENT).
type Choose struct {
	Seqs    []uint64
	Pattern Pattern
	Limit   uint32
	All     bool
}

func (ch Choose) pattern() (*pb.Pattern, error) {
	p := ch.Pattern
	if p.Address == "" && len(p.Templates) == 0 && p.Filter == "" {
		return nil, nil // no pattern: with Seqs, not both
	}
	pp, err := p.Proto()
	if err != nil {
		return nil, invalid(err)
	}
	return pp, nil
}

// Purged is what PurgeQueue removed: waiting messages, history records.
type Purged struct {
	Purged  uint64
	History uint64
}

// PurgeQueue removes every waiting message of queue that no consumer or
// lease holds (with history, its history too), kept in no history.
func (c *Client) PurgeQueue(ctx context.Context, queue string, history bool) (Purged, error) {
	r, err := call(ctx, c, pb.BoardClient.PurgeQueue, &pb.PurgeQueueRequest{Queue: queue, History: history}, false)
	if err != nil {
		return Purged{}, err
	}
	return Purged{Purged: r.Purged, History: r.HistoryPurged}, nil
}

// MoveMessages moves the chosen waiting messages of source to destination,
// all or none; destination "" sends each back to the queue its
// x-dead-letter-queue header names (the dead-letter resubmit). Each keeps
// its envelope and key and gets x-moved-from and x-moved-seq. The answer
// says where each went, in seq order.
func (c *Client) MoveMessages(ctx context.Context, source, destination string, ch Choose) ([]*pb.MovedMessage, error) {
	pp, err := ch.pattern()
	if err != nil {
		return nil, err
	}
	req := &pb.MoveMessagesRequest{
		Source: source, Destination: destination, Seqs: ch.Seqs, Pattern: pp, Limit: ch.Limit, All: ch.All,
	}
	r, err := call(ctx, c, pb.BoardClient.MoveMessages, req, false)
	return r.GetMessages(), err
}

// DeleteMessages deletes the chosen waiting messages of queue, all or none,
// kept in no history; it returns their seqs.
func (c *Client) DeleteMessages(ctx context.Context, queue string, ch Choose) ([]uint64, error) {
	pp, err := ch.pattern()
	if err != nil {
		return nil, err
	}
	req := &pb.DeleteMessagesRequest{Queue: queue, Seqs: ch.Seqs, Pattern: pp, Limit: ch.Limit, All: ch.All}
	r, err := call(ctx, c, pb.BoardClient.DeleteMessages, req, false)
	return r.GetSeqs(), err
}

// ReleaseMessages gives back leased messages of queue now, by seq, as if
// their leases had run out; it returns their seqs.
func (c *Client) ReleaseMessages(ctx context.Context, queue string, seqs ...uint64) ([]uint64, error) {
	if len(seqs) == 0 {
		return nil, invalid(fmt.Errorf("seqs: at least one seq is needed"))
	}
	r, err := call(ctx, c, pb.BoardClient.ReleaseMessages, &pb.ReleaseMessagesRequest{Queue: queue, Seqs: seqs}, false)
	return r.GetSeqs(), err
}

// ListLeases returns the messages taken with a lease and not yet acked, of
// queue (manage on it) or of every queue ("": admin), oldest lease first:
// what ReleaseMessages gives back.
func (c *Client) ListLeases(ctx context.Context, queue string) ([]*pb.LeaseInfo, error) {
	r, err := call(ctx, c, pb.BoardClient.ListLeases, &pb.ListLeasesRequest{Queue: queue}, true)
	return r.GetLeases(), err
}
