package server

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// Codec is the service's gRPC codec: gRPC's protobuf codec, except that
// a DecideRequest, the message every decision arrives in, is decoded by
// hand. The generic decoder allocates each call's four messages (the
// call, its oneof wrapper, the AcquireRequest, its RequestDigest) and
// every string apart; here the calls of a message are allocated in one
// slice, and the strings that repeat from request to request (users,
// groups, verbs, resources, namespaces, gateway ids, terms) come from a
// bounded table of the strings seen, so a repeat costs no allocation.
// A message the hand decoder does not expect (an unknown field, a
// field sent twice where that means a merge, invalid UTF-8) is decoded
// by the generic decoder instead, so the outcome is always proto's.
type Codec struct {
	proto   encoding.CodecV2
	strings interner
}

// NewCodec returns a Codec; give it to the gRPC server with
// grpc.ForceServerCodecV2.
func NewCodec() *Codec {
	return &Codec{proto: encoding.GetCodecV2("proto"), strings: interner{max: maxInterned}}
}

// Name is the protobuf codec's: clients see no difference.
func (c *Codec) Name() string { return "proto" }

// Marshal encodes v as gRPC's protobuf codec does.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal decodes data into v; a *DecideRequest by hand.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*flowcontrolv1.DecideRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	proto.Reset(req)
	if c.decodeRequest(b, req) {
		return nil
	}
	proto.Reset(req)
	if err := proto.Unmarshal(b, req); err != nil {
		return fmt.Errorf("decoding DecideRequest: %w", err)
	}
	return nil
}

// DecideRequest, AcquireRequest, RequestDigest, ReleaseGrantsRequest
// and Duration field numbers (decide.proto, flowcontrol.proto).
const (
	fieldDecideID          = 1
	fieldDecideAcquire     = 2
	fieldDecideRelease     = 3
	fieldDecideCancel      = 4
	fieldDecideCalls       = 5
	fieldDecideTraceparent = 6

	fieldAcquireDigest  = 1
	fieldAcquireGateway = 2
	fieldAcquireTerm    = 3

	fieldDigestUser              = 1
	fieldDigestGroups            = 2
	fieldDigestVerb              = 3
	fieldDigestAPIGroup          = 4
	fieldDigestResource          = 5
	fieldDigestSubresource       = 6
	fieldDigestNamespace         = 7
	fieldDigestName              = 8
	fieldDigestPath              = 9
	fieldDigestIsResourceRequest = 10
	fieldDigestEstimatedWidth    = 11
	fieldDigestFinalSeats        = 12
	fieldDigestAdditionalLatency = 13

	fieldReleaseGrantIDs = 1

	fieldDurationSeconds = 1
	fieldDurationNanos   = 2
)

// call holds the messages of one call of a DecideRequest, allocated
// together.
type call struct {
	req        flowcontrolv1.DecideRequest
	acquire    flowcontrolv1.DecideRequest_Acquire
	acquireReq flowcontrolv1.AcquireRequest
	digest     flowcontrolv1.RequestDigest
	release    flowcontrolv1.DecideRequest_ReleaseGrants
	releaseReq flowcontrolv1.ReleaseGrantsRequest
	cancel     flowcontrolv1.DecideRequest_Cancel
}

// decodeRequest decodes b into req, a reset message, and reports
// whether it could; req's batched calls are allocated as one slice.
func (c *Codec) decodeRequest(b []byte, req *flowcontrolv1.DecideRequest) bool {
	n := 0
	for rest := b; len(rest) > 0; {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 {
			return false
		}
		rest = rest[l:]
		if num == fieldDecideCalls {
			n++
		}
		if l = protowire.ConsumeFieldValue(num, typ, rest); l < 0 {
			return false
		}
		rest = rest[l:]
	}
	var calls []call
	if n > 0 {
		calls = make([]call, n)
		req.Calls = make([]*flowcontrolv1.DecideRequest, 0, n)
	}
	return c.decodeCall(b, req, nil, calls)
}

// decodeCall decodes b into m, a reset DecideRequest. own, when not nil,
// is the call m belongs to, whose other messages m's oneof uses; calls
// are where m's batched calls go (only the outermost message has them).
func (c *Codec) decodeCall(b []byte, m *flowcontrolv1.DecideRequest, own *call, calls []call) bool {
	oneofs := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		switch {
		case num == fieldDecideID && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return false
			}
			m.Id, b = v, b[l:]
		case num == fieldDecideCancel && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return false
			}
			b = b[l:]
			if own == nil {
				own = new(call)
			}
			own.cancel.Cancel = protowire.DecodeBool(v)
			m.Call = &own.cancel
			oneofs++
		case typ != protowire.BytesType:
			return false // unknown to this decoder
		default:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return false
			}
			b = b[l:]
			switch num {
			case fieldDecideAcquire:
				if own == nil {
					own = new(call)
				}
				if !c.decodeAcquire(v, &own.acquireReq, &own.digest) {
					return false
				}
				own.acquire.Acquire = &own.acquireReq
				m.Call = &own.acquire
				oneofs++
			case fieldDecideRelease:
				if own == nil {
					own = new(call)
				}
				if !decodeRelease(v, &own.releaseReq) {
					return false
				}
				own.release.ReleaseGrants = &own.releaseReq
				m.Call = &own.release
				oneofs++
			case fieldDecideCalls:
				if len(m.Calls) == cap(m.Calls) || calls == nil {
					return false // a nested batch
				}
				next := &calls[len(m.Calls)]
				if !c.decodeCall(v, &next.req, next, nil) {
					return false
				}
				m.Calls = append(m.Calls, &next.req)
			case fieldDecideTraceparent:
				s, ok := str(v)
				if !ok {
					return false
				}
				m.Traceparent = s
			default:
				return false
			}
		}
		if oneofs > 1 {
			return false // a oneof sent twice: the generic decoder merges
		}
	}
	return true
}

// decodeAcquire decodes an AcquireRequest into m, its digest into d.
func (c *Codec) decodeAcquire(b []byte, m *flowcontrolv1.AcquireRequest, d *flowcontrolv1.RequestDigest) bool {
	for len(b) > 0 {
		num, v, rest, ok := bytesField(b)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case fieldAcquireDigest:
			if m.Digest != nil || !c.decodeDigest(v, d) {
				return false // a second digest merges into the first
			}
			m.Digest = d
		case fieldAcquireGateway:
			s, ok := c.strings.get(v)
			if !ok {
				return false
			}
			m.GatewayId = s
		case fieldAcquireTerm:
			s, ok := c.strings.get(v)
			if !ok {
				return false
			}
			m.Term = s
		default:
			return false
		}
	}
	return true
}

// decodeDigest decodes a RequestDigest into d.
func (c *Codec) decodeDigest(b []byte, d *flowcontrolv1.RequestDigest) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return false
			}
			b = b[l:]
			switch num {
			case fieldDigestIsResourceRequest:
				d.IsResourceRequest = protowire.DecodeBool(v)
			case fieldDigestEstimatedWidth:
				d.EstimatedWidth = uint32(v)
			case fieldDigestFinalSeats:
				d.FinalSeats = uint32(v)
			default:
				return false
			}
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if num == fieldDigestAdditionalLatency {
			if d.AdditionalLatency != nil {
				return false // a second one merges into the first
			}
			var ok bool
			if d.AdditionalLatency, ok = decodeDuration(v); !ok {
				return false
			}
			continue
		}
		s, ok := c.strings.get(v)
		if !ok {
			return false
		}
		switch num {
		case fieldDigestUser:
			d.User = s
		case fieldDigestGroups:
			d.Groups = append(d.Groups, s)
		case fieldDigestVerb:
			d.Verb = s
		case fieldDigestAPIGroup:
			d.ApiGroup = s
		case fieldDigestResource:
			d.Resource = s
		case fieldDigestSubresource:
			d.Subresource = s
		case fieldDigestNamespace:
			d.Namespace = s
		case fieldDigestName:
			d.Name = s
		case fieldDigestPath:
			d.Path = s
		default:
			return false
		}
	}
	return true
}

// decodeRelease decodes a ReleaseGrantsRequest into m. Grant ids are
// unique: they are not interned.
func decodeRelease(b []byte, m *flowcontrolv1.ReleaseGrantsRequest) bool {
	for len(b) > 0 {
		num, v, rest, ok := bytesField(b)
		if !ok || num != fieldReleaseGrantIDs {
			return false
		}
		b = rest
		s, ok := str(v)
		if !ok {
			return false
		}
		m.GrantIds = append(m.GrantIds, s)
	}
	return true
}

// bytesField consumes one length-delimited field from b: its number,
// its value and what follows; ok is false for another wire type or a
// malformed field.
func bytesField(b []byte) (num protowire.Number, v, rest []byte, ok bool) {
	num, typ, l := protowire.ConsumeTag(b)
	if l < 0 || typ != protowire.BytesType {
		return 0, nil, nil, false
	}
	b = b[l:]
	v, l = protowire.ConsumeBytes(b)
	if l < 0 {
		return 0, nil, nil, false
	}
	return num, v, b[l:], true
}

// decodeDuration decodes a google.protobuf.Duration.
func decodeDuration(b []byte) (*durationpb.Duration, bool) {
	d := &durationpb.Duration{}
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 || typ != protowire.VarintType {
			return nil, false
		}
		b = b[l:]
		v, l := protowire.ConsumeVarint(b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
		switch num {
		case fieldDurationSeconds:
			d.Seconds = int64(v)
		case fieldDurationNanos:
			d.Nanos = int32(v)
		default:
			return nil, false
		}
	}
	return d, true
}

// str returns b as a string, false when it is not valid UTF-8 (which
// proto3 requires of a string field).
func str(b []byte) (string, bool) {
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// maxInterned bounds the strings an interner keeps: when full it starts
// again empty, so names that never repeat (object names, paths) cost an
// insertion each and no lasting memory.
const maxInterned = 4096

// interner hands out one string for each distinct byte sequence it has
// seen recently. It is safe for concurrent use (each stream's receiving
// goroutine decodes).
type interner struct {
	max int
	mu  sync.Mutex
	m   map[string]string
}

// get returns b as a string, the one handed out before when there is
// one; false when b is not valid UTF-8.
func (in *interner) get(b []byte) (string, bool) {
	if len(b) == 0 {
		return "", true
	}
	in.mu.Lock()
	s, ok := in.m[string(b)] // no allocation for the lookup
	in.mu.Unlock()
	if ok {
		return s, true
	}
	s, ok = str(b)
	if !ok {
		return "", false
	}
	in.mu.Lock()
	if in.m == nil || len(in.m) >= in.max {
		in.m = make(map[string]string, in.max)
	}
	in.m[s] = s
	in.mu.Unlock()
	return s, true
}
