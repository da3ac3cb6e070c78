package msgboard

import (
	"fmt"
	"math"
	"strings"
	"time"

	pb "github.com/msgboard/msgboard/clients/go/msgboardpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Tuple values are Go values: nil (null), bool, int64 (and the other Go
// integer types), float64 (and float32), string and []byte. Go keeps int
// and float apart as the board does: 7 is an int, 7.0 a float, and they do
// not match each other. Tuples read back hold nil, bool, int64, float64,
// string or []byte.

// Type names a tuple field's type in a template (a formal field).
type Type pb.ValueType

// The formal field types of a template: IntType matches any int.
const (
	NullType   = Type(pb.ValueType_VALUE_TYPE_NULL)
	BoolType   = Type(pb.ValueType_VALUE_TYPE_BOOL)
	IntType    = Type(pb.ValueType_VALUE_TYPE_INT)
	FloatType  = Type(pb.ValueType_VALUE_TYPE_FLOAT)
	StringType = Type(pb.ValueType_VALUE_TYPE_STRING)
	BytesType  = Type(pb.ValueType_VALUE_TYPE_BYTES)
)

type anyField struct{}

// Any in a template matches any value, null included.
var Any = anyField{}

// RangeField matches numbers (int or float) or strings between Lo and Hi,
// both included.
type RangeField struct{ Lo, Hi any }

// Range is the template field for lo <= value <= hi.
func Range(lo, hi any) RangeField { return RangeField{lo, hi} }

// PrefixField matches strings (or bytes) that start with its value.
type PrefixField struct{ Prefix any }

// Prefix is the template field for a string (or []byte) prefix.
func Prefix(p any) PrefixField { return PrefixField{p} }

// Template is one pattern per tuple field, in order: a Type (formal), Any,
// a Range, a Prefix, or any other value (an actual, matched exactly; nil is
// the null value).
type Template []any

// Tpl makes a template: Tpl("job", msgboard.IntType, msgboard.Any,
// msgboard.Range(1, 9)).
func Tpl(fields ...any) Template { return Template(fields) }

// Pattern is what Take, Read, Browse, selectors and subscriptions match:
// address AND (any one of the templates) AND filter; each part optional.
type Pattern struct {
	// Address in the CLI notation: "" or "all" (every address), "eq:NAME",
	// "topic:rec.pets.*", "prefix:rec." or a bare exact address.
	Address string
	// Alternatives (OR); none: every message.
	Templates []Template
	// A JMS message selector, e.g. "priority > 3 AND t[0] = 'job'".
	Filter string
}

// Match is the pattern of these templates (alternatives), any address.
func Match(templates ...Template) Pattern { return Pattern{Templates: templates} }

// Value converts a Go value to the board's typed field.
func Value(v any) (*pb.FieldValue, error) {
	switch x := v.(type) {
	case nil:
		return &pb.FieldValue{Kind: &pb.FieldValue_Null{Null: structpb.NullValue_NULL_VALUE}}, nil
	case bool:
		return &pb.FieldValue{Kind: &pb.FieldValue_Bool{Bool: x}}, nil
	case int:
		return intValue(int64(x)), nil
	case int8:
		return intValue(int64(x)), nil
	case int16:
		return intValue(int64(x)), nil
	case int32:
		return intValue(int64(x)), nil
	case int64:
		return intValue(x), nil
	case uint8:
		return intValue(int64(x)), nil
	case uint16:
		return intValue(int64(x)), nil
	case uint32:
		return intValue(int64(x)), nil
	case uint:
		return uintValue(uint64(x))
	case uint64:
		return uintValue(x)
	case float32:
		return floatValue(float64(x)), nil
	case float64:
		return floatValue(x), nil
	case string:
		return &pb.FieldValue{Kind: &pb.FieldValue_String_{String_: x}}, nil
	case []byte:
		return &pb.FieldValue{Kind: &pb.FieldValue_Bytes{Bytes: x}}, nil
	case *pb.FieldValue:
		return x, nil
	}
	return nil, fmt.Errorf("a %T is not a tuple value (nil, bool, int, float, string or []byte)", v)
}

func intValue(i int64) *pb.FieldValue { return &pb.FieldValue{Kind: &pb.FieldValue_Int{Int: i}} }

func floatValue(f float64) *pb.FieldValue {
	return &pb.FieldValue{Kind: &pb.FieldValue_Float{Float: f}}
}

func uintValue(u uint64) (*pb.FieldValue, error) {
	if u > math.MaxInt64 {
		return nil, fmt.Errorf("%d is past the int64 range of a tuple int", u)
	}
	return intValue(int64(u)), nil
}

// FromValue converts the board's typed field to a Go value.
func FromValue(v *pb.FieldValue) any {
	switch k := v.GetKind().(type) {
	case *pb.FieldValue_Bool:
		return k.Bool
	case *pb.FieldValue_Int:
		return k.Int
	case *pb.FieldValue_Float:
		return k.Float
	case *pb.FieldValue_String_:
		return k.String_
	case *pb.FieldValue_Bytes:
		return k.Bytes
	}
	return nil
}

// Tuple converts Go values to a board tuple.
func Tuple(values ...any) ([]*pb.FieldValue, error) {
	out := make([]*pb.FieldValue, len(values))
	for i, v := range values {
		fv, err := Value(v)
		if err != nil {
			return nil, fmt.Errorf("tuple[%d]: %w", i, err)
		}
		out[i] = fv
	}
	return out, nil
}

// Proto converts the template to its proto form.
func (t Template) Proto() (*pb.Template, error) {
	out := &pb.Template{Fields: make([]*pb.FieldPattern, len(t))}
	for i, f := range t {
		fp, err := fieldPattern(f)
		if err != nil {
			return nil, fmt.Errorf("fields[%d]: %w", i, err)
		}
		out.Fields[i] = fp
	}
	return out, nil
}

func fieldPattern(f any) (*pb.FieldPattern, error) {
	switch x := f.(type) {
	case Type:
		return &pb.FieldPattern{Kind: &pb.FieldPattern_Formal{Formal: pb.ValueType(x)}}, nil
	case anyField:
		return &pb.FieldPattern{Kind: &pb.FieldPattern_Any{Any: &emptypb.Empty{}}}, nil
	case RangeField:
		lo, err := Value(x.Lo)
		if err != nil {
			return nil, fmt.Errorf("range lo: %w", err)
		}
		hi, err := Value(x.Hi)
		if err != nil {
			return nil, fmt.Errorf("range hi: %w", err)
		}
		return &pb.FieldPattern{Kind: &pb.FieldPattern_Range{Range: &pb.Range{Lo: lo, Hi: hi}}}, nil
	case PrefixField:
		p, err := Value(x.Prefix)
		if err != nil {
			return nil, fmt.Errorf("prefix: %w", err)
		}
		return &pb.FieldPattern{Kind: &pb.FieldPattern_Prefix{Prefix: p}}, nil
	case *pb.FieldPattern:
		return x, nil
	}
	v, err := Value(f)
	if err != nil {
		return nil, err
	}
	return &pb.FieldPattern{Kind: &pb.FieldPattern_Actual{Actual: v}}, nil
}

// Proto converts the pattern to its proto form.
func (p Pattern) Proto() (*pb.Pattern, error) {
	out := &pb.Pattern{Address: address(p.Address), Filter: p.Filter}
	for i, t := range p.Templates {
		pt, err := t.Proto()
		if err != nil {
			return nil, fmt.Errorf("pattern.templates[%d].%w", i, err)
		}
		out.Templates = append(out.Templates, pt)
	}
	return out, nil
}

// address reads the CLI notation; unset for every address.
func address(text string) *pb.AddressPattern {
	if text == "" || text == "all" {
		return nil
	}
	kind, rest, found := strings.Cut(text, ":")
	if found {
		switch kind {
		case "eq":
			return &pb.AddressPattern{Kind: &pb.AddressPattern_Eq{Eq: rest}}
		case "topic":
			return &pb.AddressPattern{Kind: &pb.AddressPattern_Topic{Topic: rest}}
		case "prefix":
			return &pb.AddressPattern{Kind: &pb.AddressPattern_Prefix{Prefix: rest}}
		}
	}
	return &pb.AddressPattern{Kind: &pb.AddressPattern_Eq{Eq: text}}
}

// Message is a board message: an envelope, a tuple and a body. The fields
// marked "set by the board" are ignored when posting.
type Message struct {
	Address     string
	Priority    int64
	Headers     map[string]string
	ReplyTo     string
	ExpiresAt   time.Time // zero: never expires
	Tuple       []any
	ContentType string
	Body        []byte
	// Key is an idempotency key (at most 256 bytes): a post of a key the
	// queue holds stores nothing and answers the first message's seq, with
	// the disposition DISPOSITION_DUPLICATE.
	Key string
	// NotBefore stores the message at once but keeps it unseen (takes,
	// reads, selectors, subscribers) until then; zero: none. Delay does the
	// same from the time of the post (NotBefore wins when both are set).
	NotBefore time.Time
	Delay     time.Duration

	Queue         string     // set by the board
	Seq           uint64     // set by the board
	PostedAt      time.Time  // set by the board
	ProcessedAt   time.Time  // set by the board; zero while it waits
	Section       pb.Section // set by the board
	DeliveryCount uint32     // set by the board
	RedeliverAt   time.Time  // in a Browse page: when a message backing off comes back
}

// Proto converts the message to its proto form (for posting).
func (m *Message) Proto() (*pb.Message, error) {
	t, err := Tuple(m.Tuple...)
	if err != nil {
		return nil, err
	}
	out := &pb.Message{
		Address: m.Address, Priority: m.Priority, Headers: m.Headers, ReplyTo: m.ReplyTo,
		Tuple: t, ContentType: m.ContentType, Body: m.Body,
	}
	if !m.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(m.ExpiresAt)
	}
	out.Key = m.Key
	if !m.NotBefore.IsZero() {
		out.NotBefore = timestamppb.New(m.NotBefore)
	} else if m.Delay > 0 {
		out.NotBefore = timestamppb.New(time.Now().Add(m.Delay))
	}
	return out, nil
}

// FromProto converts a message from its proto form.
func FromProto(m *pb.Message) *Message {
	out := &Message{
		Address: m.Address, Priority: m.Priority, Headers: m.Headers, ReplyTo: m.ReplyTo,
		ContentType: m.ContentType, Body: m.Body, Queue: m.Queue, Seq: m.Seq, Key: m.Key,
		NotBefore: when(m.NotBefore), RedeliverAt: when(m.RedeliverAt),
		Section: m.Section, DeliveryCount: m.DeliveryCount,
		ExpiresAt: when(m.ExpiresAt), PostedAt: when(m.PostedAt), ProcessedAt: when(m.ProcessedAt),
	}
	for _, v := range m.Tuple {
		out.Tuple = append(out.Tuple, FromValue(v))
	}
	return out
}

func when(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func messages(ms []*pb.Message) []*Message {
	out := make([]*Message, len(ms))
	for i, m := range ms {
		out[i] = FromProto(m)
	}
	return out
}

func protoMessages(ms []Message) ([]*pb.Message, error) {
	out := make([]*pb.Message, len(ms))
	for i := range ms {
		m, err := ms[i].Proto()
		if err != nil {
			return nil, fmt.Errorf("messages[%d].%w", i, err)
		}
		out[i] = m
	}
	return out, nil
}
