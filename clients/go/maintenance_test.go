package msgboard_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/grpc/codes"
)

func moved(ms []*pb.MovedMessage) [][3]any {
	out := [][3]any{}
	for _, m := range ms {
		out = append(out, [3]any{m.Seq, m.Queue, m.NewSeq})
	}
	return out
}

func TestResubmitMoveDeleteReleaseAndPurge(t *testing.T) {
	c := open(t)
	dlq := mustQueue(t, c, msgboard.QueueSpec{})
	q := mustQueue(t, c, msgboard.QueueSpec{
		MaxUnprocessed: 2, Overflow: msgboard.OverflowDeadLetter, DeadLetter: dlq, MaxHistory: 10,
	})
	parked := mustQueue(t, c, msgboard.QueueSpec{})
	for i := 0; i < 4; i++ {
		if _, err := c.Post(ctx(t), q, msgboard.Message{Tuple: []any{"order", i}, Key: string(rune('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Take(ctx(t), q, msgboard.Pattern{}, msgboard.WithMax(2)); err != nil {
		t.Fatal(err)
	}
	// The two dead letters, each back on the queue it came from.
	got, err := c.MoveMessages(ctx(t), dlq, "", msgboard.Choose{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][3]any{{uint64(1), q, uint64(3)}, {uint64(2), q, uint64(4)}}; !reflect.DeepEqual(moved(got), want) {
		t.Fatalf("resubmitted %v, want %v", moved(got), want)
	}
	ms, err := c.Read(ctx(t), q, msgboard.Pattern{})
	if err != nil || len(ms) != 1 || ms[0].Key != "c" || ms[0].Headers["x-moved-from"] != dlq {
		t.Fatalf("the resubmitted message reads %+v (%v)", ms, err)
	}
	got, err = c.MoveMessages(ctx(t), q, parked, msgboard.Choose{Seqs: []uint64{4}})
	if err != nil || !reflect.DeepEqual(moved(got), [][3]any{{uint64(4), parked, uint64(1)}}) {
		t.Fatalf("moved %v (%v)", moved(got), err)
	}
	seqs, err := c.DeleteMessages(ctx(t), parked, msgboard.Choose{Pattern: msgboard.Match(msgboard.Tpl("order", msgboard.IntType))})
	if err != nil || !reflect.DeepEqual(seqs, []uint64{1}) {
		t.Fatalf("deleted %v (%v)", seqs, err)
	}
	leased, err := c.TakeLeased(ctx(t), q, msgboard.Pattern{}, time.Hour)
	if err != nil || len(leased) != 1 {
		t.Fatalf("leased %v (%v)", leased, err)
	}
	leases, err := c.ListLeases(ctx(t), q)
	if err != nil || len(leases) != 1 || leases[0].Id != leased[0].Lease || leases[0].Seq != 3 ||
		leases[0].Until.AsTime().Sub(leases[0].Since.AsTime()) != time.Hour {
		t.Fatalf("the leases listed are %v (%v)", leases, err)
	}
	seqs, err = c.ReleaseMessages(ctx(t), q, leased[0].Seq)
	if err != nil || !reflect.DeepEqual(seqs, []uint64{3}) {
		t.Fatalf("released %v (%v)", seqs, err)
	}
	purged, err := c.PurgeQueue(ctx(t), q, true)
	if err != nil || purged != (msgboard.Purged{Purged: 1, History: 3}) {
		t.Fatalf("purged %+v (%v)", purged, err)
	}
}

func TestABadMoveIsRefusedAndMovesNothing(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	full := mustQueue(t, c, msgboard.QueueSpec{MaxUnprocessed: 1})
	mustPost(t, c, q, []any{"a"}, []any{"b"})
	if _, err := c.MoveMessages(ctx(t), q, full, msgboard.Choose{All: true}); !errors.Is(err, msgboard.ErrQueueFull) {
		t.Fatalf("a move into a full queue gave %v", err)
	}
	if _, err := c.MoveMessages(ctx(t), q, "no-such-queue", msgboard.Choose{All: true}); !errors.Is(err, msgboard.ErrQueueNotFound) {
		t.Fatalf("a move into a missing queue gave %v", err)
	}
	var e *msgboard.Error
	_, err := c.MoveMessages(ctx(t), q, q, msgboard.Choose{All: true})
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Field != "destination" {
		t.Fatalf("a move into the source gave %#v", err)
	}
	_, err = c.DeleteMessages(ctx(t), q, msgboard.Choose{Seqs: []uint64{1, 9}})
	if !errors.Is(err, msgboard.ErrNotFound) {
		t.Fatalf("deleting a seq not waiting gave %v", err)
	}
	if _, err := c.MoveMessages(ctx(t), q, "", msgboard.Choose{All: true}); !errors.Is(err, msgboard.ErrFailedPrecondition) {
		t.Fatalf("a resubmit of messages without an origin gave %v", err)
	}
	got, err := c.GetQueue(ctx(t), q)
	if err != nil || got.Unprocessed != 2 {
		t.Fatalf("the queue holds %v messages (%v), want 2", got.GetUnprocessed(), err)
	}
}
