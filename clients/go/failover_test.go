package msgboard_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
)

// Clients that follow the primary, against real boards: a primary
// (--replication-token) and a standby (--standby-of) that refuses clients
// with NotPrimary naming the primary; a failover done by hand (kill -9 the
// primary, stop the standby, start a board on the standby's directory and
// address) while a client posts and a subscription consumes.

const clusterToken = "cluster-secret"

// pair starts a primary and its standby, stopped at the test's end.
func pair(t *testing.T) (primary, standby *server) {
	t.Helper()
	p, err := startServer("--replication-token", clusterToken, "--sync-timeout-ms", "60000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	s, err := startServer("--replication-token", clusterToken, "--standby-of", p.address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return p, s
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 120 s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestFailoverLandsOnThePrimaryAndSkipsADeadAddress(t *testing.T) {
	p, s := pair(t)
	c, err := msgboard.Dial(s.address + "," + p.address)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	if c.Address() != p.address {
		t.Fatalf("talks to %s, not the primary %s", c.Address(), p.address)
	}
	seqs, err := c.Post(ctx(t), "jobs", msgboard.Message{Tuple: []any{"job", 1}})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Read(ctx(t), "jobs", msgboard.Pattern{})
	if err != nil || len(ms) != 1 || ms[0].Seq != seqs[0] || ms[0].Key == "" {
		t.Fatalf("read %v, %v: want seq %d, keyed by the client", ms, err, seqs[0])
	}
	d, err := msgboard.DialList([]string{freePort(t), p.address})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ms, err := d.Read(ctx(t), "jobs", msgboard.Pattern{}); err != nil || len(ms) != 1 {
		t.Fatalf("through a dead address: %v, %v", ms, err)
	}
	// One address, failover off: the standby's refusal is the answer.
	one, err := msgboard.Dial(s.address)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	_, err = one.Stats(ctx(t), "")
	if !msgboard.IsReason(err, "NotPrimary") || !msgboard.Refused(err) {
		t.Fatalf("want NotPrimary, got %v", err)
	}
}

func TestFailoverByHandLosesNoAnsweredPostAndDoublesNone(t *testing.T) {
	p, s := pair(t)
	c, err := msgboard.DialList([]string{s.address, p.address}, msgboard.WithFailover(120*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	long, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, q := range []string{"jobs", "feed"} {
		if _, err := c.CreateQueue(long, msgboard.QueueSpec{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Subscribe(long, msgboard.Subscribe{Queue: "feed", Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	go func() {
		for {
			d, err := sub.Next(long)
			if err != nil {
				return
			}
			body := string(d.Message.Body)
			mu.Lock()
			got = append(got, body)
			mu.Unlock()
			if body != "unacked" {
				_, _ = d.Ack()
			}
		}
	}()
	seen := func(body string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, b := range got {
			if b == body {
				n++
			}
		}
		return n
	}
	for _, b := range []string{"acked", "unacked"} {
		if _, err := c.Post(long, "feed", msgboard.Message{Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "both delivered", func() bool { return seen("acked") == 1 && seen("unacked") == 1 })
	waitUntil(t, "the first acked", func() bool { return len(sub.Rejected()) == 0 && sub.Acked(1) })

	var answered []string
	var failed error
	var pmu sync.Mutex
	stop := make(chan struct{})
	posting := make(chan struct{})
	go func() {
		defer close(posting)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body := fmt.Sprintf("jobs-%d", i)
			_, err := c.Post(long, "jobs", msgboard.Message{Body: []byte(body)})
			pmu.Lock()
			if err != nil {
				failed = err
			} else {
				answered = append(answered, body)
			}
			pmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	count := func() int { pmu.Lock(); defer pmu.Unlock(); return len(answered) }
	waitUntil(t, "posts before the kill", func() bool { return count() >= 20 })
	p.halt(syscall.SIGKILL)
	s.halt(syscall.SIGTERM)
	board, err := startServerIn(s.dir, s.address)
	if err != nil {
		t.Fatal(err)
	}
	defer board.halt(syscall.SIGTERM)
	before := count()
	waitUntil(t, "posts resume", func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		return len(answered) >= before+20 || failed != nil
	})
	close(stop)
	<-posting
	if failed != nil {
		t.Fatalf("a post failed: %v", failed)
	}
	if _, err := c.Post(long, "feed", msgboard.Message{Body: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the subscription resumed", func() bool { return seen("after") == 1 && seen("unacked") == 2 })
	if n := seen("acked"); n != 1 {
		t.Fatalf("the acked delivery came %d times", n)
	}
	_ = sub.Close(5 * time.Second)

	page, err := c.Browse(long, "jobs", msgboard.Browse{Limit: 10000, Section: pb.Section_SECTION_UNPROCESSED})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, m := range page.Messages {
		counts[string(m.Body)]++
	}
	for _, b := range answered {
		if counts[b] != 1 {
			t.Errorf("%s answered OK, stored %d times", b, counts[b])
		}
	}
	for b, n := range counts {
		if n != 1 {
			t.Errorf("%s stored %d times", b, n)
		}
	}
}

func TestAHostWithoutAPortIsTheBoardsPort(t *testing.T) {
	for given, want := range map[string]string{
		"127.0.0.1": "127.0.0.1:7878", "localhost": "localhost:7878", "h:9": "h:9",
		"[::1]": "[::1]:7878", "[::1]:9": "[::1]:9", "::1": "[::1]:7878",
		"unix:/tmp/b.sock": "unix:/tmp/b.sock", "dns:///h:7": "dns:///h:7",
	} {
		if got := msgboard.WithPort(given); got != want {
			t.Errorf("WithPort(%q) = %q, want %q", given, got, want)
		}
	}
	// Dialled: the channel's target, and a token still goes to a loopback host.
	c, err := msgboard.Dial("127.0.0.1", msgboard.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Address() != "127.0.0.1:7878" || c.Conn().Target() != "127.0.0.1:7878" {
		t.Fatalf("dialled %q (target %q), want 127.0.0.1:7878", c.Address(), c.Conn().Target())
	}
	l, err := msgboard.DialList([]string{"localhost", "[::1]"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Address() != "localhost:7878" {
		t.Fatalf("DialList gave %q, want localhost:7878", l.Address())
	}
}
