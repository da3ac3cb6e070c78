package msgboard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/grpc/codes"
)

// A board of its own on a fixed loopback port, restarted on the same port
// (and, unless told otherwise, the same data directory).
type restartable struct {
	t    *testing.T
	addr string
	dir  string
	srv  *server
}

func newRestartable(t *testing.T) *restartable {
	r := &restartable{t: t, addr: freePort(t), dir: t.TempDir()}
	r.start()
	t.Cleanup(func() {
		if r.srv != nil {
			r.srv.halt(syscall.SIGTERM)
		}
	})
	return r
}

func (r *restartable) start() {
	srv, err := startServerIn(r.dir, r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.srv = srv
}

// restart kills the board (SIGKILL) and starts it again on the same port,
// over dir (the same data directory when "").
func (r *restartable) restart(dir string) {
	r.srv.halt(syscall.SIGKILL)
	r.srv = nil
	if dir != "" {
		r.dir = dir
	}
	r.start()
}

// post posts one tuple, trying again while the connection comes back.
func post(t *testing.T, c *msgboard.Client, q string, tuple ...any) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.Post(ctx(t), q, msgboard.Message{Tuple: tuple})
		if err == nil {
			return
		}
		if !errors.Is(err, msgboard.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// events records OnReconnect's calls: "lost: <code>" and "back".
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) note(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		e.got = append(e.got, "back")
	} else {
		var me *msgboard.Error
		if errors.As(err, &me) {
			e.got = append(e.got, "lost: "+me.Code.String())
		} else {
			e.got = append(e.got, "lost: "+err.Error())
		}
	}
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// seen is a delivery as the restart checker sees it: its id and its job.
type seen struct {
	id  uint64
	job int64
}

// violations says what a restart broke: each job posted seen at least
// once; none acked before the restart seen after it; none seen before and
// not acked missing after; no delivery id reused.
func violations(posted, acked []int64, before, after []seen) []string {
	var out []string
	all, again, first, done := map[int64]bool{}, map[int64]bool{}, map[int64]bool{}, map[int64]bool{}
	old := map[uint64]bool{}
	for _, d := range before {
		all[d.job], first[d.job], old[d.id] = true, true, true
	}
	for _, d := range after {
		all[d.job], again[d.job] = true, true
	}
	for _, n := range acked {
		done[n] = true
	}
	for _, n := range posted {
		if !all[n] {
			out = append(out, fmt.Sprintf("%d never seen", n))
		}
		if done[n] && again[n] {
			out = append(out, fmt.Sprintf("%d acked, then delivered again", n))
		}
		if first[n] && !done[n] && !again[n] {
			out = append(out, fmt.Sprintf("%d not acked, not delivered again", n))
		}
	}
	for _, d := range after {
		if old[d.id] {
			out = append(out, fmt.Sprintf("delivery id %d reused", d.id))
		}
	}
	return out
}

func TestTheRestartCheckerCatchesEachViolation(t *testing.T) {
	before := []seen{{1, 1}, {2, 2}}
	for _, c := range []struct {
		posted []int64
		after  []seen
		want   string
	}{
		{[]int64{1, 2, 3}, []seen{{3, 2}, {4, 3}}, "[]"},
		{[]int64{1, 2, 3}, []seen{{3, 2}}, "[3 never seen]"},
		{[]int64{1, 2}, []seen{{3, 2}, {4, 1}}, "[1 acked, then delivered again]"},
		{[]int64{1, 2, 3}, []seen{{4, 3}}, "[2 not acked, not delivered again]"},
		{[]int64{1, 2}, []seen{{2, 2}}, "[delivery id 2 reused]"},
	} {
		if got := fmt.Sprint(violations(c.posted, []int64{1}, before, c.after)); got != c.want {
			t.Errorf("violations(%v, after %v) = %s, want %s", c.posted, c.after, got, c.want)
		}
	}
}

func TestSubscriptionSubscribesAgainWhenTheBoardRestarts(t *testing.T) {
	b := newRestartable(t)
	c, err := msgboard.Dial(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	var ev events
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: "jobs", Credit: 10, OnReconnect: ev.note})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(5 * time.Second)
	for i := 1; i <= 3; i++ {
		post(t, c, "jobs", "job", i)
	}
	first := map[int64]*msgboard.Delivery{}
	for len(first) < 3 {
		d, err := sub.Next(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		first[d.Message.Tuple[1].(int64)] = d
	}
	// Job 1 acked for good; 2 and 3 left unacked when the board dies.
	if _, err := first[1].Ack(); err != nil {
		t.Fatal(err)
	}
	if err := sub.WaitAcked(ctx(t), first[1].ID); err != nil || !sub.Acked(first[1].ID) {
		t.Fatalf("ack of job 1: %v", err)
	}

	b.restart("")
	post(t, c, "jobs", "job", 4)
	again := map[int64]*msgboard.Delivery{}
	for len(again) < 3 {
		d, err := sub.Next(ctx(t))
		if err != nil {
			t.Fatalf("the subscription ended across the restart: %v (seen %v)", err, again)
		}
		again[d.Message.Tuple[1].(int64)] = d
		if _, err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	var was, is []seen
	for n, d := range first {
		was = append(was, seen{d.ID, n})
	}
	for n, d := range again {
		is = append(is, seen{d.ID, n})
	}
	if v := violations([]int64{1, 2, 3, 4}, []int64{1}, was, is); len(v) > 0 {
		t.Fatalf("the restart broke: %v", v)
	}
	if err := sub.WaitAcked(ctx(t), again[2].ID, again[3].ID, again[4].ID); err != nil {
		t.Fatal(err)
	}
	// An ack of a delivery of the lost stream is set aside, never sent on
	// the new one (where its id would name another delivery).
	if ref, err := first[2].Ack(); err != nil || ref != 0 {
		t.Fatalf("ack of a lost delivery: ref %d, %v", ref, err)
	}
	if e := sub.Rejected()[first[2].ID]; e == nil || !errors.Is(e, msgboard.ErrNotFound) {
		t.Fatalf("ack of a lost delivery: rejected %v", e)
	}
	if got, want := fmt.Sprint(ev.list()), "[lost: Unavailable back]"; got != want {
		t.Fatalf("OnReconnect calls: %s, want %s", got, want)
	}
	if left, err := c.GetQueue(ctx(t), "jobs"); err != nil || left.Unprocessed != 0 {
		t.Fatalf("left on the queue: %v, %v", left, err)
	}
}

func TestSubscriptionEndsWhenTheQueueIsGoneAfterARestart(t *testing.T) {
	b := newRestartable(t)
	c, err := msgboard.Dial(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(time.Second)
	b.restart(t.TempDir()) // a new board with no queue "jobs": NOT_FOUND is no outage
	_, err = sub.Next(ctx(t))
	if !errors.Is(err, msgboard.ErrQueueNotFound) {
		t.Fatalf("Next after the queue went: %v, want QueueNotFound", err)
	}
}

func TestNoReconnectEndsTheSubscriptionWithUnavailable(t *testing.T) {
	b := newRestartable(t)
	c, err := msgboard.Dial(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: "jobs", NoReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(time.Second)
	b.restart("")
	ctx, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, msgboard.ErrUnavailable) {
		t.Fatalf("Next after the board died: %v, want Unavailable", err)
	}
}

func TestAKickedSubscriptionEndsWithAbortedAndDoesNotComeBack(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: q, OnReconnect: func(err error) {
		t.Errorf("OnReconnect(%v) after a kick", err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(time.Second)
	var list pb.ListConsumersResponse
	if err := c.Invoke(ctx(t), "ListConsumers", &pb.ListConsumersRequest{Queue: q}, &list); err != nil || len(list.Consumers) != 1 {
		t.Fatalf("consumers of %s: %v, %v", q, list.Consumers, err)
	}
	if err := c.Invoke(ctx(t), "KickConsumer", &pb.KickConsumerRequest{Id: list.Consumers[0].Id}, &pb.KickConsumerResponse{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx(t)); !msgboard.IsReason(err, "Kicked") || !msgboard.IsCode(err, codes.Aborted) {
		t.Fatalf("Next after a kick: %v, want ABORTED (Kicked)", err)
	}
}
