package msgboard_test

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/grpc/codes"
)

func mustQueue(t *testing.T, c *msgboard.Client, spec msgboard.QueueSpec) string {
	t.Helper()
	if spec.Name == "" {
		spec.Name = queue(t)
	}
	if _, err := c.CreateQueue(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	return spec.Name
}

func mustPost(t *testing.T, c *msgboard.Client, q string, tuples ...[]any) []uint64 {
	t.Helper()
	ms := make([]msgboard.Message, len(tuples))
	for i, tu := range tuples {
		ms[i] = msgboard.Message{Tuple: tu}
	}
	seqs, err := c.Post(ctx(t), q, ms...)
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

func tuples(ms []*msgboard.Message) [][]any {
	out := [][]any{}
	for _, m := range ms {
		out = append(out, m.Tuple)
	}
	return out
}

func TestTuplesKeepTheirTypesAndIntIsNotFloat(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	mustPost(t, c, q, []any{"n", 7}, []any{"n", 7.0}, []any{"x", nil, true, []byte{0, 1}, math.NaN()})

	got, err := c.Read(ctx(t), q, msgboard.Match(msgboard.Tpl("n", 7.0)), msgboard.WithMax(10))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]any{{"n", 7.0}}; !reflect.DeepEqual(tuples(got), want) {
		t.Fatalf("float 7.0 matched %v, want %v", tuples(got), want)
	}
	got, err = c.Take(ctx(t), q, msgboard.Match(msgboard.Tpl("n", msgboard.IntType)), msgboard.WithMax(10))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]any{{"n", int64(7)}}; !reflect.DeepEqual(tuples(got), want) {
		t.Fatalf("formal int took %v, want %v", tuples(got), want)
	}
	got, err = c.Take(ctx(t), q, msgboard.Match(msgboard.Tpl("x", nil, msgboard.Any, msgboard.Prefix([]byte{0}), msgboard.FloatType)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Tuple[1] != nil || got[0].Tuple[2] != true || !math.IsNaN(got[0].Tuple[4].(float64)) {
		t.Fatalf("null, bool, bytes and NaN came back as %v", tuples(got))
	}
}

func TestTemplatesAlternativesRangesAddressesAndFilters(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	for i, a := range []string{"rec.pets.cats", "rec.pets.dogs", "rec.cars"} {
		if _, err := c.Post(ctx(t), q, msgboard.Message{Address: a, Priority: int64(i), Tuple: []any{"job", i, "s" + a}}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p msgboard.Pattern) [][]any {
		t.Helper()
		ms, err := c.Read(ctx(t), q, p, msgboard.WithMax(100))
		if err != nil {
			t.Fatal(err)
		}
		return tuples(ms)
	}
	if got := read(msgboard.Match(msgboard.Tpl("job", msgboard.Range(1, 2), msgboard.Any))); len(got) != 2 {
		t.Errorf("range 1..2 read %v", got)
	}
	if got := read(msgboard.Match(msgboard.Tpl("job", 0, msgboard.Any), msgboard.Tpl("job", 2, msgboard.Any))); len(got) != 2 {
		t.Errorf("alternatives read %v", got)
	}
	if got := read(msgboard.Pattern{Address: "topic:rec.pets.*"}); len(got) != 2 {
		t.Errorf("topic read %v", got)
	}
	if got := read(msgboard.Pattern{Address: "prefix:rec.c"}); len(got) != 1 {
		t.Errorf("prefix read %v", got)
	}
	if got := read(msgboard.Pattern{Filter: "priority >= 1 AND address LIKE 'rec.pets.%'"}); len(got) != 1 {
		t.Errorf("filter read %v", got)
	}
	if got := read(msgboard.Match(msgboard.Tpl("job", msgboard.Any, msgboard.Prefix("srec.p")))); len(got) != 2 {
		t.Errorf("string prefix read %v", got)
	}
}

func TestTakeRemovesAndAnEmptyWaitIsNoError(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{MaxHistory: 10})
	mustPost(t, c, q, []any{1}, []any{2})
	got, err := c.Take(ctx(t), q, msgboard.Pattern{}, msgboard.WithMax(5))
	if err != nil || len(got) != 2 || got[0].Seq != 1 || got[0].Section != pb.Section_SECTION_HISTORY {
		t.Fatalf("took %v, %v", got, err)
	}
	got, err = c.Take(ctx(t), q, msgboard.Pattern{}, msgboard.WithTimeout(50*time.Millisecond))
	if err != nil || len(got) != 0 {
		t.Fatalf("an empty queue gave %v, %v", got, err)
	}
	page, err := c.Browse(ctx(t), q, msgboard.Browse{Direction: pb.Direction_DIRECTION_BACKWARD, Limit: 1})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].Seq != 2 || page.NextSeq != 1 {
		t.Fatalf("browse gave %+v, %v", page, err)
	}
	page, err = c.Browse(ctx(t), q, msgboard.Browse{Start: pb.Position_POSITION_SEQ, Seq: page.NextSeq, Direction: pb.Direction_DIRECTION_BACKWARD})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].Seq != 1 || page.NextSeq != 0 {
		t.Fatalf("the next page was %+v, %v", page, err)
	}
}

func TestPostManyStreamsBatchesInOrder(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	ms := make([]msgboard.Message, 250)
	for i := range ms {
		ms[i] = msgboard.Message{Tuple: []any{i}}
	}
	rs, err := c.PostMany(ctx(t), q, ms, 100)
	if err != nil || len(rs) != 250 {
		t.Fatalf("post many: %d receipts, %v", len(rs), err)
	}
	for i, r := range rs {
		if r.Seq != uint64(i+1) || r.Disposition != pb.Disposition_DISPOSITION_STORED {
			t.Fatalf("receipt %d is %+v", i, r)
		}
	}
	_, err = c.PostMany(ctx(t), q+"-missing", ms[:1], 0)
	if !msgboard.IsReason(err, "QueueNotFound") {
		t.Fatalf("a post stream to a missing queue gave %v", err)
	}
}

func TestLeasedTakesAckAndNack(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	mustPost(t, c, q, []any{"a"}, []any{"b"})
	ls, err := c.TakeLeased(ctx(t), q, msgboard.Pattern{}, time.Minute, msgboard.WithMax(2))
	if err != nil || len(ls) != 2 {
		t.Fatalf("leased take: %v, %v", ls, err)
	}
	if got, _ := c.Take(ctx(t), q, msgboard.Pattern{}, msgboard.WithMax(2)); len(got) != 0 {
		t.Fatalf("leased messages were visible: %v", tuples(got))
	}
	// Acks are per lease: a lease never given beside a good one is rejected
	// on its own (INVALID_ARGUMENT, naming its place); the good one applies.
	a, err := c.Nack(ctx(t), q, 999999999, ls[1].Lease)
	if r := a.Rejected[999999999]; err != nil || len(a.IDs) != 1 || a.IDs[0] != ls[1].Lease || r == nil || r.Code != codes.InvalidArgument || r.Field != "lease_ids[0]" {
		t.Fatalf("nack beside a lease never given: %+v, %v", a, err)
	}
	if a, err := c.Ack(ctx(t), q, ls[0].Lease); err != nil || len(a.IDs) != 1 || a.IDs[0] != ls[0].Lease {
		t.Fatal(a, err)
	}
	got, err := c.Take(ctx(t), q, msgboard.Pattern{}, msgboard.WithMax(2), msgboard.WithTimeout(30*time.Second)) // after the nack backoff
	if err != nil || len(got) != 1 || got[0].Tuple[0] != "b" || got[0].DeliveryCount != 2 {
		t.Fatalf("after ack a, nack b: took %v (%v)", got, err)
	}
	// An acked lease is rejected on its own (NOT_FOUND, naming its place),
	// the call succeeds; a bad request fails it.
	a, err = c.Ack(ctx(t), q, ls[0].Lease)
	if r := a.Rejected[ls[0].Lease]; err != nil || len(a.IDs) != 0 || r == nil || r.Code != codes.NotFound || r.Field != "lease_ids[0]" {
		t.Fatalf("acking an acked lease gave %+v, %v", a, err)
	}
	if _, err := c.Ack(ctx(t), q); !msgboard.IsCode(err, codes.InvalidArgument) {
		t.Fatalf("an ack of no leases gave %v", err)
	}
}

func TestSelectorsMoveAndCopy(t *testing.T) {
	c := open(t)
	src := mustQueue(t, c, msgboard.QueueSpec{})
	jobs := mustQueue(t, c, msgboard.QueueSpec{})
	audit := mustQueue(t, c, msgboard.QueueSpec{})
	move, err := c.CreateSelector(ctx(t), msgboard.SelectorSpec{Source: src, Destination: jobs, Pattern: msgboard.Match(msgboard.Tpl("job", msgboard.Any))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSelector(ctx(t), msgboard.SelectorSpec{Source: src, Destination: audit, Op: pb.Operation_OPERATION_COPY}); err != nil {
		t.Fatal(err)
	}
	mustPost(t, c, src, []any{"job", 1}, []any{"other", 2})
	got, err := c.Take(ctx(t), jobs, msgboard.Pattern{}, msgboard.WithTimeout(10*time.Second), msgboard.WithMax(5))
	if err != nil || len(got) != 1 || got[0].Tuple[0] != "job" {
		t.Fatalf("the MOVE gave %v, %v", got, err)
	}
	got, err = c.Read(ctx(t), audit, msgboard.Pattern{}, msgboard.WithMax(5))
	if err != nil || len(got) != 2 {
		t.Fatalf("the COPY gave %v, %v", got, err)
	}
	sels, err := c.ListSelectors(ctx(t), src)
	if err != nil || len(sels) != 2 {
		t.Fatalf("selectors: %v, %v", sels, err)
	}
	if err := c.DeleteSelector(ctx(t), move.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSelector(ctx(t), move.Id); !msgboard.IsCode(err, codes.NotFound) {
		t.Fatalf("a deleted selector gave %v", err)
	}
}

func TestSubscribeWithCreditAcksRejectedAndNacks(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	mustPost(t, c, q, []any{1}, []any{2}, []any{3})
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: q, Credit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(5 * time.Second)
	if sub.Credit != 2 || sub.Selector.GetSpec().GetSource() != q {
		t.Fatalf("subscribed: credit %d, selector %v", sub.Credit, sub.Selector)
	}
	d1, err := sub.Next(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := sub.Next(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if d1.Message.Tuple[0] != int64(1) || d2.Message.Tuple[0] != int64(2) {
		t.Fatalf("deliveries out of order: %v %v", d1.Message.Tuple, d2.Message.Tuple)
	}
	// Credit 2 is spent: the third comes only after an ack. A nack gives d2
	// back (it comes again, later); an ack of an unknown id is rejected.
	if _, err := sub.Ack(d1.ID, 999); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Nack(d2.ID); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if !sub.Acked(d1.ID) {
		t.Fatalf("delivery %d not acked", d1.ID)
	}
	if r := sub.Rejected()[999]; r == nil || r.Code != codes.InvalidArgument {
		t.Fatalf("ack of a never-delivered id: rejected %v", sub.Rejected())
	}
	seen := map[any]bool{}
	for len(seen) < 2 {
		d, err := sub.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Message.Tuple[0]] = true
		if d.Message.Tuple[0] == int64(2) && d.Message.DeliveryCount != 2 {
			t.Fatalf("the nacked message came again with delivery count %d", d.Message.DeliveryCount)
		}
		if _, err := sub.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if !seen[int64(2)] || !seen[int64(3)] {
		t.Fatalf("after the nack got %v", seen)
	}
	if _, err := sub.AddCredit(-1); err != nil {
		t.Fatal(err)
	}
	_, err = sub.Next(ctx(t))
	var e *msgboard.Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Ref == 0 || e.Reason != "InvalidArgument" || e.Field != "credit" {
		t.Fatalf("negative credit gave %#v", err)
	}
	if err := sub.End(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx(t)); !errors.Is(err, io.EOF) {
		t.Fatalf("after End: %v", err)
	}
	st, err := c.Stats(ctx(t), q)
	if err != nil || st.Queues[0].Unprocessed != 0 {
		t.Fatalf("stats after acking all: %v, %v", st, err)
	}
}

func TestErrorsCarryReasonAndFieldPath(t *testing.T) {
	c := open(t)
	_, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: "no-such-queue"})
	if !errors.Is(err, msgboard.ErrQueueNotFound) {
		t.Fatalf("subscribing to a missing queue gave %v", err)
	}
	_, err = c.GetQueue(ctx(t), "no-such-queue")
	var e *msgboard.Error
	if !errors.As(err, &e) || e.Code != codes.NotFound || e.Reason != "QueueNotFound" {
		t.Fatalf("a missing queue gave %#v", err)
	}
	if !errors.Is(err, msgboard.ErrNotFound) || !errors.Is(err, msgboard.ErrQueueNotFound) || errors.Is(err, msgboard.ErrQueueExists) {
		t.Fatalf("errors.Is does not follow the code and reason of %v", err)
	}
	q := mustQueue(t, c, msgboard.QueueSpec{})
	// Sent raw through the stub: a value with no kind set is the board's
	// INVALID_ARGUMENT, with the path of the bad field.
	_, err = c.Stub().Post(ctx(t), &pb.PostRequest{Queue: q, Messages: []*pb.Message{{}, {Tuple: []*pb.FieldValue{{}, {}}}}})
	if !errors.As(msgboard.Wrap(err), &e) || e.Code != codes.InvalidArgument {
		t.Fatalf("an empty value gave %v", err)
	}
	if e.Reason != "InvalidArgument" || e.Domain != "msgboard" || e.Field != "messages[1].tuple[0]" {
		t.Fatalf("the error says %#v", e)
	}
	// A Go value that is no tuple value never leaves the client.
	_, err = c.Post(ctx(t), q, msgboard.Message{}, msgboard.Message{Tuple: []any{1, struct{}{}}})
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Field != "messages[1].tuple[1]" {
		t.Fatalf("a struct in a tuple gave %#v", err)
	}
	_, err = c.Snapshot(ctx(t), "relative/path")
	if !msgboard.IsCode(err, codes.InvalidArgument) {
		t.Fatalf("a relative snapshot path gave %v", err)
	}
}

func TestAcksMadeWhileOneIsInFlightGoAsOneRequest(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	mustPost(t, c, q, []any{1}, []any{2}, []any{3})
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(5 * time.Second)
	var ds []*msgboard.Delivery
	for len(ds) < 3 {
		d, err := sub.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	answer := msgboard.PretendAckInFlight(sub)
	r1, _ := sub.Ack(ds[0].ID)
	r2, _ := sub.Ack(ds[1].ID)
	if r1 != r2 || sub.Acked(ds[0].ID) {
		t.Fatalf("acks while one is in flight: refs %d and %d, acked early: %v", r1, r2, sub.Acked(ds[0].ID))
	}
	answer()
	if err := sub.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if !sub.Acked(ds[0].ID) || !sub.Acked(ds[1].ID) || sub.Acked(ds[2].ID) {
		t.Fatal("the held acks did not go as one request once the one in flight was answered")
	}
	// A cumulative ack never waits.
	answer = msgboard.PretendAckInFlight(sub)
	defer answer()
	if _, err := sub.AckUpTo(ds[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := sub.WaitAcked(ctx(t), ds[2].ID); err != nil {
		t.Fatal(err)
	}
}

func TestAPublisherTakesPostsFromManyGoroutines(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	p, err := c.Publisher(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			for i := 0; i < 10; i++ {
				if _, err := p.Post(q, msgboard.Message{Tuple: []any{g, i}}, msgboard.Message{Tuple: []any{g, i}}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	_, err = p.Post(q+"-missing", msgboard.Message{})
	if !errors.Is(err, msgboard.ErrQueueNotFound) {
		t.Fatalf("a batch to a missing queue gave %v", err)
	}
	if _, err := p.Post(q, msgboard.Message{Tuple: []any{"after a failed batch"}}); err != nil {
		t.Fatalf("the stream did not carry on after a failed batch: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Post(q, msgboard.Message{}); err == nil {
		t.Fatal("a closed publisher posted")
	}
	st, err := c.Stats(ctx(t), q)
	if err != nil || st.Queues[0].Unprocessed != 161 {
		t.Fatalf("stats: %v, %v", st, err)
	}
}

func TestATerminalSelectorIsReadBySubscribingToIt(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	sel, err := c.CreateSelector(ctx(t), msgboard.SelectorSpec{Source: q, Pattern: msgboard.Pattern{Address: "topic:rec.#"}, Credit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(ctx(t), q, msgboard.Message{Address: "misc"}, msgboard.Message{Address: "rec.pets"}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{SelectorID: sel.Id})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(5 * time.Second)
	d, err := sub.Next(ctx(t))
	if err != nil || d.Message.Address != "rec.pets" || sub.Selector.Id != sel.Id {
		t.Fatalf("attached to %v: got %v, %v", sub.Selector, d, err)
	}
}

func TestSnapshotWritesACopyOfTheBoard(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	mustPost(t, c, q, []any{"kept"})
	dir := filepath.Join(t.TempDir(), "snap")
	s, err := c.Snapshot(ctx(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Path != dir || s.Messages < 1 || s.Queues < 1 {
		t.Fatalf("snapshot: %v", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "data.mdb")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx(t), dir); !errors.Is(err, msgboard.ErrFailedPrecondition) {
		t.Fatalf("a snapshot over a non-empty directory gave %v", err)
	}
}

func TestKeysDelaysAndANackWithItsOwnDelay(t *testing.T) {
	c := open(t)
	none := time.Duration(0)
	q := mustQueue(t, c, msgboard.QueueSpec{
		DedupWindow: &none,
		Redelivery:  &msgboard.Redelivery{Initial: time.Second, Multiplier: 2, Max: time.Minute},
	})
	rs, err := c.PostReceipts(ctx(t), q, msgboard.Message{Key: "k1"}, msgboard.Message{Key: "k1"})
	if err != nil || len(rs) != 2 || rs[1].Seq != 1 || rs[1].Disposition != pb.Disposition_DISPOSITION_DUPLICATE {
		t.Fatalf("a repeated key gave %+v, %v", rs, err)
	}
	seqs, err := c.Post(ctx(t), q, msgboard.Message{Tuple: []any{"later"}, Delay: 300 * time.Millisecond})
	if err != nil || len(seqs) != 1 || seqs[0] != 2 {
		t.Fatalf("a delayed post gave %v, %v", seqs, err)
	}
	page, err := c.Browse(ctx(t), q, msgboard.Browse{Section: msgboard.Scheduled})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].NotBefore.IsZero() {
		t.Fatalf("browsing the scheduled section gave %+v, %v", page, err)
	}
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: q, Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(5 * time.Second)
	d, err := sub.Next(ctx(t))
	if err != nil || d.Message.Key != "k1" {
		t.Fatalf("first delivery %+v, %v", d, err)
	}
	if _, err := sub.NackAfter(time.Hour, d.ID); err != nil {
		t.Fatal(err)
	}
	d, err = sub.Next(ctx(t)) // the delayed one, once due
	if err != nil || d.Message.Seq != 2 || time.Now().Before(d.Message.NotBefore) {
		t.Fatalf("second delivery %+v, %v", d, err)
	}
	page, err = c.Browse(ctx(t), q, msgboard.Browse{})
	if err != nil || len(page.Messages) != 2 || page.Messages[0].RedeliverAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("the nacked message browsed as %+v, %v", page.Messages[0], err)
	}
}

func TestPostIdempotentKeysItsPostsAndWaitsForTheBoard(t *testing.T) {
	data := t.TempDir()
	first, err := startServer("--data", data)
	if err != nil {
		t.Fatal(err)
	}
	addr := first.address
	c, err := msgboard.Dial(addr)
	if err != nil {
		first.stop()
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "jobs"}); err != nil {
		first.stop()
		t.Fatal(err)
	}
	rs, err := c.PostIdempotent(ctx(t), "jobs", msgboard.Message{Tuple: []any{"a"}})
	if err != nil || len(rs) != 1 || rs[0].Seq != 1 {
		first.stop()
		t.Fatalf("first post %+v, %v", rs, err)
	}
	first.stop() // the board is down: the next post waits for it
	answered := make(chan []msgboard.Receipt, 1)
	failed := make(chan error, 1)
	go func() {
		rs, err := c.PostIdempotent(ctx(t), "jobs", msgboard.Message{Key: "k", Tuple: []any{"b"}})
		if err != nil {
			failed <- err
			return
		}
		answered <- rs
	}()
	time.Sleep(300 * time.Millisecond) // let it try the board while it is down
	second, err := startServer("--data", data, "--listen", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.stop()
	select {
	case rs := <-answered:
		if len(rs) != 1 || rs[0].Seq != 2 || rs[0].Disposition != pb.Disposition_DISPOSITION_STORED {
			t.Fatalf("the post once back %+v", rs)
		}
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatal("the post never came through")
	}
	// A retry of the same keyed post (its answer lost) is stored once.
	rs, err = c.PostIdempotent(ctx(t), "jobs", msgboard.Message{Key: "k", Tuple: []any{"b"}})
	if err != nil || rs[0].Seq != 2 || rs[0].Disposition != pb.Disposition_DISPOSITION_DUPLICATE {
		t.Fatalf("the retry %+v, %v", rs, err)
	}
}

func TestTheDropHeadPolicyDropsTheOldestWaitingMessage(t *testing.T) {
	c := open(t)
	q := queue(t)
	got, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: q, MaxUnprocessed: 2, Overflow: msgboard.OverflowDropHead, MaxHistory: 10})
	if err != nil || got.Spec.Overflow != msgboard.OverflowDropHead {
		t.Fatalf("CreateQueue with OverflowDropHead: %v, %v", got, err)
	}
	rs, err := c.PostReceipts(ctx(t), q, msgboard.Message{Tuple: []any{"a"}}, msgboard.Message{Tuple: []any{"b"}}, msgboard.Message{Tuple: []any{"c"}})
	if err != nil || len(rs) != 3 || rs[2].Seq != 3 || rs[2].Disposition != pb.Disposition_DISPOSITION_STORED {
		t.Fatalf("a post over MaxUnprocessed with OverflowDropHead: %v, %v", rs, err)
	}
	ms, err := c.Read(ctx(t), q, msgboard.Pattern{}, msgboard.WithMax(5))
	if err != nil || len(ms) != 2 || ms[0].Seq != 2 || ms[1].Seq != 3 {
		t.Fatalf("waiting after the drop: %v, %v", ms, err)
	}
	// The dropped one left into history (its exit, dropped, is not in the Go Message).
	h, err := c.Browse(ctx(t), q, msgboard.Browse{Section: pb.Section_SECTION_HISTORY})
	if err != nil || len(h.Messages) != 1 || h.Messages[0].Seq != 1 {
		t.Fatalf("history after the drop: %v, %v", h, err)
	}
}
