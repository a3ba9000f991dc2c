package server_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/server"
)

// decodeBoth decodes b with the Codec and with proto.Unmarshal.
func decodeBoth(t *testing.T, c *server.Codec, b []byte) (got, want *flowcontrolv1.DecideRequest, gotErr, wantErr error) {
	t.Helper()
	got, want = &flowcontrolv1.DecideRequest{}, &flowcontrolv1.DecideRequest{}
	gotErr = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
	wantErr = proto.Unmarshal(b, want)
	return got, want, gotErr, wantErr
}

// randomRequest is a DecideRequest as gateways send them, single or
// batched, with every field of the calls set now and then.
func randomRequest(rng *rand.Rand) *flowcontrolv1.DecideRequest {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	one := func(id uint64) *flowcontrolv1.DecideRequest {
		r := &flowcontrolv1.DecideRequest{Id: id}
		if rng.IntN(4) == 0 {
			r.Traceparent = fmt.Sprintf("00-%032x-%016x-01", rng.Uint64(), rng.Uint64())
		}
		switch rng.IntN(5) {
		case 0:
			r.Call = &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{
				GrantIds: []string{fmt.Sprintf("%x", rng.Uint64()), fmt.Sprintf("%x", rng.Uint64())}[:rng.IntN(3)],
			}}
		case 1:
			r.Call = &flowcontrolv1.DecideRequest_Cancel{Cancel: rng.IntN(2) == 0}
		case 2:
			// no call
		default:
			d := &flowcontrolv1.RequestDigest{
				User:   pick("alice", "bob", "system:serviceaccount:kube-system:x", "", "jürgen"),
				Groups: []string{"system:authenticated", "system:masters", "team"}[:rng.IntN(4)],
				Verb:   pick("get", "list", "create"), ApiGroup: pick("", "apps"), Resource: pick("configmaps", "pods", ""),
				Subresource: pick("", "status"), Namespace: pick("", "default", "kube-system"), Name: fmt.Sprintf("obj-%d", rng.IntN(50)),
				Path: pick("", "/api", "/healthz"), IsResourceRequest: rng.IntN(2) == 0,
				EstimatedWidth: uint32(rng.IntN(3)), FinalSeats: uint32(rng.IntN(3)),
			}
			if rng.IntN(3) == 0 {
				d.AdditionalLatency = durationpb.New(time.Duration(rng.Int64N(int64(time.Second))) - 100*time.Millisecond)
			}
			a := &flowcontrolv1.AcquireRequest{GatewayId: pick("gw-1", "gw-2"), Term: pick("", "term-a")}
			if rng.IntN(8) != 0 {
				a.Digest = d
			}
			r.Call = &flowcontrolv1.DecideRequest_Acquire{Acquire: a}
		}
		return r
	}
	if rng.IntN(3) == 0 {
		return one(rng.Uint64())
	}
	r := &flowcontrolv1.DecideRequest{}
	for i := range rng.IntN(20) {
		r.Calls = append(r.Calls, one(uint64(i)))
	}
	return r
}

// TestCodecDecodesAsProto: the Codec decodes DecideRequests, and
// malformed or unexpected encodings of them, exactly as proto.Unmarshal
// does: the same message, or an error where proto gives one.
func TestCodecDecodesAsProto(t *testing.T) {
	c := server.NewCodec()
	rng := rand.New(rand.NewPCG(21, 1))
	check := func(name string, b []byte) {
		t.Helper()
		got, want, gotErr, wantErr := decodeBoth(t, c, b)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%s: codec error %v, proto error %v", name, gotErr, wantErr)
		}
		if wantErr == nil && !proto.Equal(got, want) {
			t.Fatalf("%s: codec decoded\n%v\nproto decoded\n%v", name, got, want)
		}
	}
	for i := range 3000 {
		b, err := proto.Marshal(randomRequest(rng))
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("random %d", i), b)
		// Every truncation of a few of them.
		if i%100 == 0 {
			for n := range len(b) {
				check(fmt.Sprintf("random %d cut at %d", i, n), b[:n])
			}
		}
	}

	acquire, _ := proto.Marshal(&flowcontrolv1.DecideRequest{Id: 7, Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: &flowcontrolv1.AcquireRequest{
		GatewayId: "gw", Digest: &flowcontrolv1.RequestDigest{User: "alice", Verb: "get"},
	}}})
	digest2, _ := proto.Marshal(&flowcontrolv1.AcquireRequest{Digest: &flowcontrolv1.RequestDigest{Namespace: "ns", Groups: []string{"g"}}})
	cancel, _ := proto.Marshal(&flowcontrolv1.DecideRequest{Call: &flowcontrolv1.DecideRequest_Cancel{Cancel: true}})
	batch, _ := proto.Marshal(&flowcontrolv1.DecideRequest{Calls: []*flowcontrolv1.DecideRequest{{Id: 1}}})
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	for name, b := range map[string][]byte{
		"unknown field":             append(append([]byte{}, acquire...), protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)...),
		"acquire sent twice":        append(append([]byte{}, acquire...), field(2, digest2)...),
		"acquire then cancel":       append(append([]byte{}, acquire...), cancel...),
		"cancel then acquire":       append(append([]byte{}, cancel...), acquire...),
		"nested batch":              field(5, batch),
		"id as bytes":               field(1, []byte("x")),
		"invalid UTF-8 traceparent": field(6, []byte{0xff, 0xfe}),
		"invalid UTF-8 user":        field(2, field(1, field(1, []byte{0xc3}))),
		"invalid UTF-8 grant id":    field(3, field(1, []byte{0x80})),
		"group field":               protowire.AppendTag(nil, 2, protowire.StartGroupType),
		"empty":                     nil,
	} {
		check(name, b)
	}
}

// TestCodecAllocations: a batch of Acquires whose strings repeat (as a
// gateway's users, groups and resources do) is decoded with a fraction
// of proto.Unmarshal's allocations: the calls in one slice, the strings
// from the Codec's table.
func TestCodecAllocations(t *testing.T) {
	req := &flowcontrolv1.DecideRequest{}
	for i := range 16 {
		req.Calls = append(req.Calls, &flowcontrolv1.DecideRequest{Id: uint64(i), Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: &flowcontrolv1.AcquireRequest{
			GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{
				User: fmt.Sprintf("user-%d", i%4), Groups: []string{"system:authenticated"}, Verb: "get",
				Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
			},
		}}})
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	c := server.NewCodec()
	codec := testing.AllocsPerRun(100, func() {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &flowcontrolv1.DecideRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	generic := testing.AllocsPerRun(100, func() {
		if err := proto.Unmarshal(b, &flowcontrolv1.DecideRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per message of 16 Acquires: codec %.0f, proto.Unmarshal %.0f", codec, generic)
	if codec > generic/4 {
		t.Fatalf("codec: %.0f allocations per message of 16 Acquires, proto.Unmarshal %.0f: want at most a quarter", codec, generic)
	}
}
