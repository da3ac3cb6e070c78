package msgboard_test

import (
	"context"
	"fmt"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
)

// The README's quickstart (compiled, not run: it needs a board on the
// default address).
func ExampleDial() {
	ctx := context.Background()
	c, err := msgboard.Dial("127.0.0.1:7878") // options: msgboard.WithToken, WithTLSFiles, FromEnv
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx, msgboard.QueueSpec{Name: "jobs", MaxHistory: 1000}); err != nil { // as the main README makes it
		panic(err)
	}
	// Go keeps int and float apart as the board does: 7 is an int, 3.0 a float.
	seqs, err := c.Post(ctx, "jobs", msgboard.Message{Tuple: []any{"job", 7, "resize", 3.0}})
	fmt.Println(seqs, err)
	// A template: actuals, formal types, Any, Range, Prefix.
	tpl := msgboard.Tpl("job", msgboard.IntType, msgboard.Any, msgboard.Range(1, 9))
	ms, err := c.Take(ctx, "jobs", msgboard.Match(tpl), msgboard.WithTimeout(5*time.Second))
	fmt.Println(ms[0].Tuple, err) // [job 7 resize 3]: int64, string, float64

	// A consumer: deliveries paced by credit, acks coalesced while one is in flight.
	sub, err := c.Subscribe(ctx, msgboard.Subscribe{Queue: "jobs", Credit: 10})
	if err != nil {
		panic(err)
	}
	defer sub.Close(5 * time.Second)
	c.Post(ctx, "jobs", msgboard.Message{Address: "rec.pets.cats", Tuple: []any{"job", 8}})
	d, err := sub.Next(ctx)
	fmt.Println(d.Message.Tuple, err)
	d.Ack()
}
