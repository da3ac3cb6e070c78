package msgboard_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
)

func TestErrorTextsNameTheCodeOnce(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	for _, p := range []msgboard.Pattern{{Filter: "priority >"}, {Templates: []msgboard.Template{{struct{}{}}}}} {
		_, err := c.Take(ctx(t), q, p)
		if err == nil || !strings.HasPrefix(err.Error(), "InvalidArgument: ") ||
			strings.Contains(err.Error(), "(InvalidArgument)") {
			t.Fatalf("a bad pattern (board's or client's): %v", err)
		}
	}
	_, err := c.Take(ctx(t), "nosuch-"+q, msgboard.Pattern{})
	if err == nil || !strings.HasPrefix(err.Error(), "NotFound (QueueNotFound): ") {
		t.Fatalf("a missing queue: %v", err)
	}
}

func TestCreateQueueTakesAGoSpec(t *testing.T) {
	c := open(t)
	q := queue(t)
	got, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{
		Name: q, MaxUnprocessed: 1, Overflow: msgboard.OverflowDropNew, UnlimitedHistory: true, MaxDeliveries: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Spec; s.MaxUnprocessed != 1 || s.Overflow != msgboard.OverflowDropNew || !s.UnlimitedHistory || s.MaxDeliveries != 3 {
		t.Fatalf("spec read back: %v", s)
	}
	rs, err := c.PostReceipts(ctx(t), q, msgboard.Message{Tuple: []any{1}}, msgboard.Message{Tuple: []any{2}})
	if err != nil || len(rs) != 2 || rs[1].Seq != 0 {
		t.Fatalf("a post over MaxUnprocessed with OverflowDropNew: %v, %v", rs, err)
	}
}

func TestADeliveryAcksAndNacksItself(t *testing.T) {
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	mustPost(t, c, q, []any{"a"}, []any{"b"})
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: q, Credit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(5 * time.Second)
	a, err := sub.Next(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sub.Next(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Ack(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Nack(); err != nil {
		t.Fatal(err)
	}
	if err := sub.WaitAcked(ctx(t), a.ID); err != nil || !sub.Acked(a.ID) {
		t.Fatalf("d.Ack(): %v", err)
	}
	again, err := sub.Next(ctx(t)) // b, given back, comes again (after the nack backoff)
	if err != nil || again.Message.Tuple[0] != "b" || again.Message.DeliveryCount != 2 {
		t.Fatalf("after d.Nack(): %v, %v", again, err)
	}
	if _, err := again.Ack(); err != nil {
		t.Fatal(err)
	}
}

// The README's way for a program in its own module, outside clients/go:
// `go mod init`, scripts/vendor-app, then `go build` with no module proxy.
func TestAProgramOutsideTheModuleBuildsOfflineAndRuns(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	c := open(t)
	q := mustQueue(t, c, msgboard.QueueSpec{})
	app := t.TempDir()
	main := `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
)

func main() {
	ctx := context.Background()
	c, err := msgboard.Dial(os.Args[1])
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Post(ctx, os.Args[2], msgboard.Message{Tuple: []any{"hello", 42}}); err != nil {
		panic(err)
	}
	ms, err := c.Take(ctx, os.Args[2], msgboard.Match(msgboard.Tpl("hello", msgboard.IntType)),
		msgboard.WithTimeout(5*time.Second))
	if err != nil || len(ms) != 1 {
		panic(fmt.Sprint(ms, err))
	}
	fmt.Println(ms[0].Tuple...)
}
`
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	// Offline: no proxy, no checksum database, nothing of this module's env.
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOSUMDB=off", "GO111MODULE=on",
		"GOPATH="+filepath.Join(app, "gopath"), "GOMODCACHE="+filepath.Join(app, "gopath", "mod"))
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = app, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("go", "mod", "init", "example.com/hello")
	run(filepath.Join(repoRoot(), "clients", "go", "scripts", "vendor-app"), ".")
	run("go", "build", "-o", "hello", ".")
	if got := run(filepath.Join(app, "hello"), shared.address, q); got != "hello 42\n" {
		t.Fatalf("the program printed %q", got)
	}
}
