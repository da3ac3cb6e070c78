// Package msgboard is the Go client of msgboard, a persistent tuple-space
// message board, over its gRPC API (the generated code is in msgboardpb).
//
//	c, err := msgboard.Dial("127.0.0.1:7878")
//	defer c.Close()
//	_, err = c.CreateQueue(ctx, msgboard.QueueSpec{Name: "jobs"})
//	seqs, err := c.Post(ctx, "jobs", msgboard.Message{Tuple: []any{"job", 7, "resize"}})
//	tpl := msgboard.Tpl("job", msgboard.IntType, msgboard.Any)
//	ms, err := c.Take(ctx, "jobs", msgboard.Match(tpl), msgboard.WithTimeout(5*time.Second))
//
// Every error the board answers is an *Error carrying the google.rpc.Status
// details (reason, field path).
package msgboard

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultAddress is the board's default listener.
const DefaultAddress = "127.0.0.1:7878"

// margin is what a blocking call's gRPC deadline gets beyond its timeout, so
// that the server answers "nothing in time" before the deadline cuts it off.
const margin = 30 * time.Second

// Client is a connection to one board, or to the primary among several
// (see WithFailover). It is safe for concurrent use.
type Client struct {
	boards *failover
}

type options struct {
	token    string
	tls      *tls.Config
	files    [3]string // CA, client certificate, client key
	dial     []grpc.DialOption
	failover *time.Duration
}

// Option configures Dial.
type Option func(*options)

// WithToken sends a bearer token on every call (the board's users file
// knows its SHA-256). It is sent only over TLS or to a loopback address.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS connects over TLS with this configuration.
func WithTLS(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// WithTLSFiles connects over TLS trusting the CA certificates of the PEM file
// caFile ("" for the system's), showing the client certificate certFile and
// its key keyFile when both are given (mutual TLS).
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) { o.files = [3]string{caFile, certFile, keyFile} }
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// FromEnv reads MSGBOARD_TOKEN and MSGBOARD_TLS_CA (as the msgboard CLI does).
func FromEnv() Option {
	return func(o *options) {
		if t := os.Getenv("MSGBOARD_TOKEN"); t != "" {
			o.token = t
		}
		if ca := os.Getenv("MSGBOARD_TLS_CA"); ca != "" {
			o.files[0] = ca
		}
	}
}

// Dial connects to the board at address ("" : $MSGBOARD_SERVER, else
// DefaultAddress). The connection is made lazily, on the first call.
// Several addresses, "a,b,c" (a primary and its standbys): the client finds
// the primary among them and follows it (see WithFailover).
func Dial(address string, opts ...Option) (*Client, error) {
	if address == "" {
		address = os.Getenv("MSGBOARD_SERVER")
	}
	if address == "" {
		address = DefaultAddress
	}
	addresses, err := splitAddresses(address)
	if err != nil {
		return nil, err
	}
	return DialList(addresses, opts...)
}

// DialList connects to the boards at addresses, a primary and its
// standbys: the client finds the primary among them and follows it (see
// WithFailover). Connections are made lazily, on the first call to each.
// A host given without a port gets the board's (see WithPort).
func DialList(addresses []string, opts ...Option) (*Client, error) {
	if len(addresses) == 0 {
		return nil, invalid(errors.New("server: no address given"))
	}
	given := addresses
	addresses = make([]string, len(given))
	for i, a := range given {
		addresses[i] = WithPort(a)
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.tls == nil && o.files != [3]string{} {
		c, err := tlsFiles(o.files)
		if err != nil {
			return nil, err
		}
		o.tls = c
	}
	deadline := time.Duration(0)
	if o.failover != nil {
		deadline = *o.failover
	} else if len(addresses) > 1 {
		deadline = FailoverDeadline
	}
	// A board that comes back is found within 5 s (grpc-go waits up to 120 s
	// between attempts to connect by default); following the primary, within
	// 1 s (a board that takes over on the address of one that was gone).
	reconnect := backoff.DefaultConfig
	reconnect.MaxDelay = 5 * time.Second
	if deadline > 0 {
		reconnect.BaseDelay, reconnect.MaxDelay = 100*time.Millisecond, time.Second
	}
	dial := []grpc.DialOption{grpc.WithInsecure(), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: reconnect, MinConnectTimeout: 20 * time.Second})}
	if o.tls != nil {
		dial[0] = grpc.WithTransportCredentials(credentials.NewTLS(o.tls))
	}
	if o.token != "" {
		for _, address := range addresses {
			if o.tls == nil && !loopback(address) {
				return nil, fmt.Errorf("refusing to send a token in plaintext to %s: "+
					"connect with TLS, or to a loopback address", address)
			}
		}
		dial = append(dial,
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
				cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return invoker(bearer(ctx, o.token), method, req, reply, cc, opts...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
				cc *grpc.ClientConn, method string, streamer grpc.Streamer,
				opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(bearer(ctx, o.token), desc, cc, method, opts...)
			}))
	}
	dial = append(dial, o.dial...)
	f := &failover{
		addresses: append([]string(nil), addresses...),
		current:   addresses[0],
		boards:    map[string]board{},
		// grpc 1.33 (Debian's) has no grpc.NewClient: Dial without WithBlock
		// is the same lazy connection.
		dial: func(address string) (*grpc.ClientConn, error) { return grpc.Dial(address, dial...) },
	}
	f.deadline = deadline
	if _, _, err := f.board(); err != nil { // a bad first address: said now
		return nil, err
	}
	return &Client{boards: f}, nil
}

func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func loopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func tlsFiles(f [3]string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f[0] != "" {
		pem, err := os.ReadFile(f[0])
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in it", f[0])
		}
	}
	if f[1] != "" || f[2] != "" {
		cert, err := tls.LoadX509KeyPair(f[1], f[2])
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error { return c.boards.close() }

// Address is the board the client talks to now (the primary, once found).
func (c *Client) Address() string {
	c.boards.mu.Lock()
	defer c.boards.mu.Unlock()
	return c.boards.current
}

// Conn is the gRPC connection to the current board, with the client's credentials.
func (c *Client) Conn() *grpc.ClientConn {
	_, b, _ := c.boards.board()
	return b.conn
}

// Stub is the generated stub over Conn, for what this package does not
// wrap (no failover). Its errors are raw gRPC errors: Wrap turns them into *Error.
func (c *Client) Stub() pb.BoardClient {
	_, b, _ := c.boards.board()
	return b.stub
}

// Wrap turns the error of a raw stub call into an *Error with the status
// details (nil stays nil).
func Wrap(err error) error { return fromRPC(err) }

// keyed says whether every message carries an idempotency key (a Post of
// them may be sent again).
func keyed(ms []*pb.Message) bool {
	for _, m := range ms {
		if m.Key == "" {
			return false
		}
	}
	return true
}

// withKeys gives every message without a Key a random one.
func withKeys(msgs []Message) ([]Message, error) {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if m.Key == "" {
			var b [16]byte
			if _, err := rand.Read(b[:]); err != nil {
				return nil, err
			}
			m.Key = hex.EncodeToString(b[:])
		}
		out[i] = m
	}
	return out, nil
}

// ------------------------------------------------------------------ queues

// CreateQueue creates a queue (only Name is required); creating one that
// exists with the same properties returns it.
func (c *Client) CreateQueue(ctx context.Context, spec QueueSpec) (*pb.Queue, error) {
	return call(ctx, c, pb.BoardClient.CreateQueue, &pb.CreateQueueRequest{Spec: spec.proto()}, true)
}

// GetQueue returns one queue with its counts.
func (c *Client) GetQueue(ctx context.Context, name string) (*pb.Queue, error) {
	return call(ctx, c, pb.BoardClient.GetQueue, &pb.GetQueueRequest{Name: name}, true)
}

// ListQueues returns every queue the caller may see, by name.
func (c *Client) ListQueues(ctx context.Context) ([]*pb.Queue, error) {
	r, err := call(ctx, c, pb.BoardClient.ListQueues, &pb.ListQueuesRequest{}, true)
	return r.GetQueues(), err
}

// DeleteQueue deletes a queue with its messages.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	_, err := call(ctx, c, pb.BoardClient.DeleteQueue, &pb.DeleteQueueRequest{Name: name}, false)
	return err
}

// ------------------------------------------------------------------ posting

// Receipt is what became of one posted message: its seq (0 when the queue
// was full and the message went elsewhere) and its disposition.
type Receipt struct {
	Seq         uint64
	Disposition pb.Disposition
}

// Post posts messages to one queue, all or none, and returns their seqs once
// they are durable.
func (c *Client) Post(ctx context.Context, queue string, msgs ...Message) ([]uint64, error) {
	rs, err := c.PostReceipts(ctx, queue, msgs...)
	return seqs(rs), err
}

// PostReceipts is Post, answering what became of each message. With
// failover on, each message without a Key gets one, so that a post whose
// answer was lost is sent again and stored once.
func (c *Client) PostReceipts(ctx context.Context, queue string, msgs ...Message) ([]Receipt, error) {
	// A duplicate of a key the client made is its own earlier attempt, stored.
	mine := make([]bool, len(msgs))
	if c.boards.on() {
		for i, m := range msgs {
			mine[i] = m.Key == ""
		}
		var err error
		if msgs, err = withKeys(msgs); err != nil {
			return nil, err
		}
	}
	ms, err := protoMessages(msgs)
	if err != nil {
		return nil, invalid(err)
	}
	r, err := call(ctx, c, pb.BoardClient.Post, &pb.PostRequest{Queue: queue, Messages: ms}, keyed(ms))
	if err != nil {
		return nil, err
	}
	out := receipts(r.Seqs, r.Dispositions)
	for i := range out {
		if i < len(mine) && mine[i] && out[i].Seq != 0 && out[i].Disposition == pb.Disposition_DISPOSITION_DUPLICATE {
			out[i].Disposition = pb.Disposition_DISPOSITION_STORED
		}
	}
	return out, nil
}

// PostIdempotent posts as PostReceipts does, safe to retry: every message
// without a Key gets a random one, and a post whose answer is lost (the
// board or the connection down: codes.Unavailable) is sent again with the
// same keys, waiting for the board to be back, until ctx is done. The board
// stores what it had not and answers DISPOSITION_DUPLICATE, with the first
// seq, for what it had: each message is stored once.
func (c *Client) PostIdempotent(ctx context.Context, queue string, msgs ...Message) ([]Receipt, error) {
	keyed, err := withKeys(msgs)
	if err != nil {
		return nil, err
	}
	ms, err := protoMessages(keyed)
	if err != nil {
		return nil, invalid(err)
	}
	req := &pb.PostRequest{Queue: queue, Messages: ms}
	// With failover, the client finds the board; without, it waits for its one.
	ready := grpc.WaitForReady(!c.boards.on())
	pause := 100 * time.Millisecond
	for {
		r, err := run(ctx, c.boards, true, func(ctx context.Context, s pb.BoardClient) (*pb.PostResponse, error) {
			return s.Post(ctx, req, ready)
		})
		if err == nil {
			return receipts(r.Seqs, r.Dispositions), nil
		}
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		if pause < 2*time.Second {
			pause *= 2
		}
	}
}

func receipts(seqs []uint64, ds []pb.Disposition) []Receipt {
	out := make([]Receipt, len(seqs))
	for i, s := range seqs {
		out[i] = Receipt{Seq: s}
		if i < len(ds) {
			out[i].Disposition = ds[i]
		}
	}
	return out
}

func seqs(rs []Receipt) []uint64 {
	if rs == nil {
		return nil
	}
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

// ------------------------------------------------------------------ matching

// Take removes and returns the oldest waiting messages that match (Linda
// in/inp): at most WithMax (default 1), waiting up to WithTimeout for a
// first match (default: try once). Nothing in time is an empty answer, not
// an error.
func (c *Client) Take(ctx context.Context, queue string, p Pattern, opts ...WaitOption) ([]*Message, error) {
	o := waitFor(opts)
	req, err := takeRequest(queue, p, o, 0)
	if err != nil {
		return nil, err
	}
	ctx, cancel := wait(ctx, o.timeout)
	defer cancel()
	r, err := call(ctx, c, pb.BoardClient.Take, req, false)
	return messages(r.GetMessages()), err
}

// Leased is a message taken with a lease, and the lease to ack it by.
type Leased struct {
	*Message
	Lease uint64
}

// TakeLeased takes messages with a lease: they stay on the queue, invisible
// to others, until acked (Ack) or given back (Nack); when the lease runs
// out first they come back. Options as for Take.
func (c *Client) TakeLeased(ctx context.Context, queue string, p Pattern, lease time.Duration, opts ...WaitOption) ([]Leased, error) {
	if lease <= 0 {
		return nil, invalid(fmt.Errorf("lease: must be positive, got %s", lease))
	}
	o := waitFor(opts)
	req, err := takeRequest(queue, p, o, lease)
	if err != nil {
		return nil, err
	}
	ctx, cancel := wait(ctx, o.timeout)
	defer cancel()
	r, err := call(ctx, c, pb.BoardClient.Take, req, false)
	if err != nil {
		return nil, err
	}
	out := make([]Leased, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = Leased{Message: FromProto(m), Lease: r.LeaseIds[i]}
	}
	return out, nil
}

// Acked is what an ack of leases did. Acks are per lease, as a
// subscription's are per delivery: one the board cannot ack does not stop
// the others.
type Acked struct {
	// IDs are the leases applied (acked, or given back by Nack), in request order.
	IDs []uint64
	// Rejected holds each lease the board could not ack, by id, with why:
	// codes.NotFound (already acked or given back, or run out) or
	// codes.InvalidArgument (never given, or on another queue). Its Field is
	// the lease's place in the request ("lease_ids[1]").
	Rejected map[uint64]*Error
}

// Ack processes leased messages for good, each lease on its own: see
// Acked. The error is for a request the board refuses as a whole (no
// leases, a missing queue).
func (c *Client) Ack(ctx context.Context, queue string, leases ...uint64) (Acked, error) {
	return c.ack(ctx, &pb.AckRequest{Queue: queue, LeaseIds: leases})
}

// Nack gives leased messages back to the queue (after the queue's
// redelivery step, else the nack backoff), each lease on its own, as Ack.
func (c *Client) Nack(ctx context.Context, queue string, leases ...uint64) (Acked, error) {
	return c.ack(ctx, &pb.AckRequest{Queue: queue, LeaseIds: leases, Nack: true})
}

func (c *Client) ack(ctx context.Context, req *pb.AckRequest) (Acked, error) {
	r, err := call(ctx, c, pb.BoardClient.Ack, req, false)
	if err != nil {
		return Acked{}, err
	}
	out := Acked{IDs: r.LeaseIds, Rejected: map[uint64]*Error{}}
	for _, x := range r.Rejected {
		out.Rejected[x.Id] = fromWire(x.Error, 0)
	}
	return out, nil
}

// Read is Take that leaves the messages where they are (Linda rd/rdp).
func (c *Client) Read(ctx context.Context, queue string, p Pattern, opts ...WaitOption) ([]*Message, error) {
	o := waitFor(opts)
	pp, err := p.Proto()
	if err != nil {
		return nil, invalid(err)
	}
	ctx, cancel := wait(ctx, o.timeout)
	defer cancel()
	r, err := call(ctx, c, pb.BoardClient.Read, &pb.ReadRequest{
		Queue: queue, Pattern: pp, Timeout: duration(o.timeout), Max: int32(o.max),
	}, true)
	return messages(r.GetMessages()), err
}

func takeRequest(queue string, p Pattern, o waitOptions, lease time.Duration) (*pb.TakeRequest, error) {
	pp, err := p.Proto()
	if err != nil {
		return nil, invalid(err)
	}
	return &pb.TakeRequest{
		Queue: queue, Pattern: pp, Timeout: duration(o.timeout), Max: int32(o.max), Lease: duration(lease),
	}, nil
}

func duration(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

// wait gives a blocking call a deadline past its timeout, unless ctx has one.
func wait(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout+margin)
}

// ------------------------------------------------------------------ browsing

// Browse asks for one page of a queue.
type Browse struct {
	Start     pb.Position // OLDEST, LATEST, SEQ (with Seq) or TIME (with Since)
	Seq       uint64
	Since     time.Time
	Direction pb.Direction
	Limit     int        // 0: 100
	Section   pb.Section // unspecified: both
	Pattern   Pattern
}

// Page is one page of a queue; NextSeq starts the next one (0: no more).
type Page struct {
	Messages []*Message
	NextSeq  uint64
}

// Browse pages through a queue's waiting messages and its history.
func (c *Client) Browse(ctx context.Context, queue string, b Browse) (*Page, error) {
	pp, err := b.Pattern.Proto()
	if err != nil {
		return nil, invalid(err)
	}
	req := &pb.BrowseRequest{
		Queue: queue, Start: b.Start, StartSeq: b.Seq, Direction: b.Direction,
		Limit: int32(b.Limit), Section: b.Section, Pattern: pp,
	}
	if !b.Since.IsZero() {
		req.StartTime = timestamppb.New(b.Since)
	}
	r, err := call(ctx, c, pb.BoardClient.Browse, req, true)
	if err != nil {
		return nil, err
	}
	return &Page{Messages: messages(r.Messages), NextSeq: r.NextSeq}, nil
}

// Stats returns board figures and one row per queue ("" : every queue).
func (c *Client) Stats(ctx context.Context, queue string) (*pb.StatsResponse, error) {
	return call(ctx, c, pb.BoardClient.Stats, &pb.StatsRequest{Queue: queue}, true)
}

// ------------------------------------------------------------------ selectors

// SelectorSpec is a selector's properties; see msgboardpb.SelectorSpec.
type SelectorSpec struct {
	Source          string
	Pattern         Pattern
	Op              pb.Operation
	Destination     string // "": terminal (a consumer attaches with Subscribe)
	Credit          int64  // terminal only; 0: 100
	UnlimitedCredit bool   // terminal only
	Quota           uint64 // to a queue only: most messages it will move; 0: no limit
	Start           pb.Position
	StartSeq        uint64
	StartTime       time.Time
	Role            pb.Role
}

// CreateSelector creates a standing MOVE, COPY, DELETE or BOUNCE.
func (c *Client) CreateSelector(ctx context.Context, s SelectorSpec) (*pb.Selector, error) {
	pp, err := s.Pattern.Proto()
	if err != nil {
		return nil, invalid(fmt.Errorf("spec.%w", err))
	}
	spec := &pb.SelectorSpec{
		Source: s.Source, Pattern: pp, Op: s.Op, Destination: s.Destination, Credit: s.Credit,
		UnlimitedCredit: s.UnlimitedCredit, Quota: s.Quota, Start: s.Start, StartSeq: s.StartSeq,
		Role: s.Role,
	}
	if !s.StartTime.IsZero() {
		spec.StartTime = timestamppb.New(s.StartTime)
	}
	return call(ctx, c, pb.BoardClient.CreateSelector, &pb.CreateSelectorRequest{Spec: spec}, false)
}

// GetSelector returns one selector by id.
func (c *Client) GetSelector(ctx context.Context, id string) (*pb.Selector, error) {
	return call(ctx, c, pb.BoardClient.GetSelector, &pb.GetSelectorRequest{Id: id}, true)
}

// ListSelectors returns the selectors of one queue ("": of every queue).
func (c *Client) ListSelectors(ctx context.Context, queue string) ([]*pb.Selector, error) {
	r, err := call(ctx, c, pb.BoardClient.ListSelectors, &pb.ListSelectorsRequest{Queue: queue}, true)
	return r.GetSelectors(), err
}

// DeleteSelector deletes a selector; its unacked deliveries go back.
func (c *Client) DeleteSelector(ctx context.Context, id string) error {
	_, err := call(ctx, c, pb.BoardClient.DeleteSelector, &pb.DeleteSelectorRequest{Id: id}, false)
	return err
}

// ------------------------------------------------------------------ snapshots

// Snapshot has the server write a consistent copy of the board to path (on
// the server's file system; relative to its snapshot directory if it has
// one). Needs the admin verb.
func (c *Client) Snapshot(ctx context.Context, path string) (*pb.SnapshotResponse, error) {
	return call(ctx, c, pb.BoardClient.Snapshot, &pb.SnapshotRequest{Path: path}, false)
}

// Invoke calls the unary RPC method ("Post", "Take"...) of service Board
// with the client's connection and credentials, for a request built
// elsewhere (e.g. parsed from JSON); its error is an *Error as for every
// call of this package.
func (c *Client) Invoke(ctx context.Context, method string, req, resp any) error {
	_, err := run(ctx, c.boards, again[method], func(ctx context.Context, _ pb.BoardClient) (struct{}, error) {
		_, b, err := c.boards.board()
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, b.conn.Invoke(ctx, "/msgboard.v1.Board/"+method, req, resp)
	})
	return err
}
