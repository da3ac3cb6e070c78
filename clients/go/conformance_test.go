package msgboard_test

// The Go runner of the conformance suite: every case of
// conformance/cases/*.json (format: conformance/README.md), one subtest
// each, through this client's connection (Client.Invoke, Conn) and its
// error mapping (*msgboard.Error), with protojson for requests and answers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
)

type caseFile struct {
	Cases []struct {
		Name  string                   `json:"name"`
		Steps []map[string]interface{} `json:"steps"`
	} `json:"cases"`
}

var board = pb.File_msgboard_v1_board_proto.Services().ByName("Board")

func TestConformance(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(), "conformance", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no conformance cases under %s (%v)", repoRoot(), err)
	}
	sort.Strings(files)
	c := open(t)
	run := fmt.Sprintf("g%04x", rand.New(rand.NewSource(time.Now().UnixNano())).Intn(1<<16))
	index := 0
	for _, file := range files {
		var cf caseFile
		if err := decode(mustRead(t, file), &cf); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		stem := strings.TrimSuffix(filepath.Base(file), ".json")
		for _, cs := range cf.Cases {
			index++
			r := &runner{c: c, prefix: fmt.Sprintf("%s-%d", run, index), vars: map[string]any{}, streams: map[string]*stream{}}
			steps := cs.Steps
			t.Run(stem+"/"+cs.Name, func(t *testing.T) {
				defer r.cancelStreams()
				for i, step := range steps {
					if err := r.step(step); err != nil {
						js, _ := json.Marshal(step)
						t.Fatalf("step %d %s: %v", i, js, err)
					}
				}
			})
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode is json.Unmarshal keeping numbers as json.Number.
func decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

type runner struct {
	c       *msgboard.Client
	prefix  string
	vars    map[string]any
	streams map[string]*stream
}

type stream struct {
	cs      grpc.ClientStream
	cancel  context.CancelFunc
	out     protoreflect.MessageType
	in      protoreflect.MessageType
	kinds   map[string]bool // JSON names of the response's oneof `kind`, if it has one
	pending []map[string]any
	flat    []any // deliveries not yet matched, flattened
	ended   bool
}

func (r *runner) cancelStreams() {
	for _, s := range r.streams {
		s.cancel()
	}
}

var variable = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
var queueVar = regexp.MustCompile(`^q[0-9]*$`)

// subst replaces ${...} in every string of v.
func (r *runner) subst(v any) (any, error) {
	switch x := v.(type) {
	case string:
		if m := variable.FindStringSubmatch(x); m != nil && m[0] == x && !queueVar.MatchString(m[1]) {
			val, ok := r.vars[m[1]]
			if !ok {
				return nil, fmt.Errorf("unknown variable %s", x)
			}
			return val, nil
		}
		var bad error
		out := variable.ReplaceAllStringFunc(x, func(s string) string {
			name := s[2 : len(s)-1]
			if queueVar.MatchString(name) {
				return r.prefix + "-" + name
			}
			val, ok := r.vars[name]
			if !ok {
				bad = fmt.Errorf("unknown variable %s", s)
				return s
			}
			return fmt.Sprint(val)
		})
		return out, bad
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			s, err := r.subst(e)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			s, err := r.subst(e)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
	return v, nil
}

func (r *runner) step(raw map[string]any) error {
	v, err := r.subst(raw)
	if err != nil {
		return err
	}
	st := v.(map[string]any)
	if name, ok := st["stream"].(string); ok {
		return r.streamStep(name, st)
	}
	return r.unary(st)
}

func messageType(d protoreflect.MessageDescriptor) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		panic(err)
	}
	return mt
}

// parse reads a request in the JSON mapping, rejecting unknown fields.
func parse(mt protoreflect.MessageType, v any) (proto.Message, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("request %s: %w", b, err)
	}
	return m, nil
}

// printed is a response in the JSON mapping, as a generic value.
func printed(m proto.Message) (map[string]any, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, decode(b, &out)
}

func (r *runner) unary(st map[string]any) error {
	name, _ := st["call"].(string)
	md := board.Methods().ByName(protoreflect.Name(name))
	if md == nil || md.IsStreamingClient() || md.IsStreamingServer() {
		return fmt.Errorf("no unary method %q", name)
	}
	req, err := parse(messageType(md.Input()), st["request"])
	if err != nil {
		return err
	}
	wait := 30 * time.Second
	if f := md.Input().Fields().ByName("timeout"); f != nil && req.ProtoReflect().Has(f) {
		wait += req.ProtoReflect().Get(f).Message().Interface().(*durationpb.Duration).AsDuration()
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp := messageType(md.Output()).New().Interface()
	err = r.c.Invoke(ctx, name, req, resp)
	if want, ok := st["error"]; ok {
		return checkError(err, want.(map[string]any))
	}
	if err != nil {
		return fmt.Errorf("failed: %w", err)
	}
	got, err := printed(resp)
	if err != nil {
		return err
	}
	return r.expectAndCapture(st, "expect", got)
}

func (r *runner) expectAndCapture(st map[string]any, key string, got map[string]any) error {
	if want, ok := st[key]; ok {
		if err := match(want, got, ""); err != nil {
			js, _ := json.Marshal(got)
			return fmt.Errorf("%v\n  response: %s", err, js)
		}
	}
	if caps, ok := st["capture"].(map[string]any); ok {
		for name, path := range caps {
			val, err := lookup(got, path.(string))
			if err != nil {
				return fmt.Errorf("capture %s: %w", name, err)
			}
			r.vars[name] = val
		}
	}
	return nil
}

var pathPart = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)((?:\[[0-9]+\])*)$`)

// lookup follows a capture path ("messages[1].seq") in a printed response.
func lookup(v any, path string) (any, error) {
	for _, part := range strings.Split(path, ".") {
		m := pathPart.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("bad path %q", path)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not an object", part)
		}
		if v, ok = obj[m[1]]; !ok {
			return nil, fmt.Errorf("%s: absent", m[1])
		}
		for _, ix := range regexp.MustCompile(`[0-9]+`).FindAllString(m[2], -1) {
			var i int
			fmt.Sscan(ix, &i)
			arr, ok := v.([]any)
			if !ok || i >= len(arr) {
				return nil, fmt.Errorf("%s: no element %d", part, i)
			}
			v = arr[i]
		}
	}
	return v, nil
}

// match is the subset match of conformance/README.md, "Matching".
func match(want, got any, at string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %v", at, got)
		}
		for k, wv := range w {
			if k == "$unset" {
				for _, u := range wv.([]any) {
					if gv, present := g[u.(string)]; present {
						return fmt.Errorf("%s.%s: want it unset, got %v", at, u, gv)
					}
				}
				continue
			}
			gv, present := g[k]
			if !present {
				return fmt.Errorf("%s.%s: absent", at, k)
			}
			if err := match(wv, gv, at+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: want %d elements, got %v", at, len(w), got)
		}
		for i := range w {
			if err := match(w[i], g[i], fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		return nil
	case json.Number:
		g, ok := got.(json.Number)
		wf, _ := w.Float64()
		if gf, err := g.Float64(); !ok || err != nil || gf != wf {
			return fmt.Errorf("%s: want %s, got %v", at, w, got)
		}
		return nil
	case nil:
		if got != nil {
			return fmt.Errorf("%s: want null, got %v", at, got)
		}
		return nil
	}
	if want != got {
		return fmt.Errorf("%s: want %#v, got %#v", at, want, got)
	}
	return nil
}

// codeNames are the gRPC status names the cases use.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// checkError checks the client's typed error against an `error` object.
func checkError(err error, want map[string]any) error {
	var e *msgboard.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("want an error %v, got %v", want, err)
	}
	if c, ok := want["code"]; ok && codeNames[e.Code] != c {
		return fmt.Errorf("want code %v, got %#v", c, e)
	}
	if rs, ok := want["reason"]; ok && e.Reason != rs {
		return fmt.Errorf("want reason %v, got %#v", rs, e)
	}
	if f, ok := want["field"]; ok {
		found := false
		for _, v := range e.Violations {
			found = found || v.Field == f
		}
		if !found {
			return fmt.Errorf("want a violation of field %v, got %#v", f, e)
		}
	}
	if s, ok := want["contains"].(string); ok && !strings.Contains(e.Message, s) {
		return fmt.Errorf("want a message containing %q, got %#v", s, e)
	}
	return nil
}

// ------------------------------------------------------------------ streams

func (r *runner) streamStep(name string, st map[string]any) error {
	s := r.streams[name]
	if s == nil {
		call, _ := st["call"].(string)
		md := board.Methods().ByName(protoreflect.Name(call))
		if md == nil || !md.IsStreamingClient() {
			return fmt.Errorf("stream %s: no streaming method %q", name, call)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cs, err := r.c.Conn().NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/msgboard.v1.Board/"+call)
		if err != nil {
			cancel()
			return msgboard.Wrap(err)
		}
		s = &stream{cs: cs, cancel: cancel, out: messageType(md.Input()), in: messageType(md.Output())}
		if o := md.Output().Oneofs().ByName("kind"); o != nil {
			s.kinds = map[string]bool{}
			for i := 0; i < o.Fields().Len(); i++ {
				s.kinds[o.Fields().Get(i).JSONName()] = true
			}
		}
		r.streams[name] = s
	}
	switch {
	case st["send"] != nil:
		req, err := parse(s.out, st["send"])
		if err != nil {
			return err
		}
		return s.cs.SendMsg(req)
	case st["receive"] != nil:
		got, err := s.receive(st["receive"].(map[string]any))
		if err != nil {
			return err
		}
		return r.expectAndCapture(st, "receive", got)
	case st["close"] == true || st["end"] == true:
		if st["close"] == true {
			if err := s.cs.CloseSend(); err != nil {
				return err
			}
		}
		var err error
		for err == nil {
			err = s.cs.RecvMsg(s.in.New().Interface())
		}
		s.ended = true
		if errors.Is(err, io.EOF) {
			err = nil
		} else {
			err = msgboard.Wrap(err)
		}
		if want, ok := st["error"].(map[string]any); ok {
			return checkError(err, want)
		}
		if err != nil {
			return fmt.Errorf("the stream ended with %w", err)
		}
		return nil
	}
	return errors.New("a stream step without send, receive, close or end")
}

// next reads one response from the stream.
func (s *stream) next() (map[string]any, error) {
	m := s.in.New().Interface()
	if err := s.cs.RecvMsg(m); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the stream ended")
		}
		return nil, fmt.Errorf("the stream failed: %w", msgboard.Wrap(err))
	}
	return printed(m)
}

// kindOf is the oneof member set in a printed response.
func (s *stream) kindOf(v map[string]any) string {
	for k := range v {
		if s.kinds[k] {
			return k
		}
	}
	return ""
}

// receive takes the response a `receive` step asks for: the next one on a
// stream without a oneof; else the next of its kind, deliveries flattened.
func (s *stream) receive(want map[string]any) (map[string]any, error) {
	if s.kinds == nil {
		return s.next()
	}
	kind := s.kindOf(want)
	if kind == "" {
		return nil, fmt.Errorf("receive names no kind of %v", s.kinds)
	}
	if kind == "deliveries" {
		return s.deliveries(want)
	}
	for i, p := range s.pending {
		if s.kindOf(p) == kind {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return p, nil
		}
	}
	for {
		got, err := s.next()
		if err != nil {
			return nil, err
		}
		switch s.kindOf(got) {
		case kind:
			return got, nil
		case "deliveries":
			s.flatten(got)
		default:
			s.pending = append(s.pending, got)
		}
	}
}

func (s *stream) flatten(got map[string]any) {
	for _, items := range got["deliveries"].(map[string]any) {
		s.flat = append(s.flat, items.([]any)...)
	}
}

func (s *stream) deliveries(want map[string]any) (map[string]any, error) {
	n := 0
	inner := ""
	for k, items := range want["deliveries"].(map[string]any) {
		inner, n = k, len(items.([]any))
	}
	for len(s.flat) < n {
		got, err := s.next()
		if err != nil {
			return nil, err
		}
		if s.kindOf(got) == "deliveries" {
			s.flatten(got)
		} else {
			s.pending = append(s.pending, got)
		}
	}
	items := s.flat[:n]
	s.flat = s.flat[n:]
	return map[string]any{"deliveries": map[string]any{inner: items}}, nil
}
