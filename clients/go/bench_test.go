package msgboard_test

import (
	"testing"

	msgboard "github.com/msgboard/msgboard/clients/go"
)

// go test -run - -bench . -benchtime 20000x: time per message posted over
// one PostStream in batches of 100, and per message posted and taken one by
// one (a round trip each).

func BenchmarkPostMany(b *testing.B) {
	c := open(b)
	q := queue(b)
	if _, err := c.CreateQueue(ctx(b), msgboard.QueueSpec{Name: q}); err != nil {
		b.Fatal(err)
	}
	ms := make([]msgboard.Message, b.N)
	for i := range ms {
		ms[i] = msgboard.Message{Tuple: []any{"job", i}}
	}
	b.ResetTimer()
	if _, err := c.PostMany(ctx(b), q, ms, 100); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPostTake(b *testing.B) {
	c := open(b)
	q := queue(b)
	if _, err := c.CreateQueue(ctx(b), msgboard.QueueSpec{Name: q}); err != nil {
		b.Fatal(err)
	}
	tpl := msgboard.Match(msgboard.Tpl("job", msgboard.IntType))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Post(ctx(b), q, msgboard.Message{Tuple: []any{"job", i}}); err != nil {
			b.Fatal(err)
		}
		if ms, err := c.Take(ctx(b), q, tpl); err != nil || len(ms) != 1 {
			b.Fatal(ms, err)
		}
	}
}
