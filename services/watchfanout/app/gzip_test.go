package app_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/meridian-cp/meridian/lib/gzsplice"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// gunzip decodes a gzip stream as compress/gzip (client-go's transport)
// and klauspost's gzip do; both must give the same bytes.
func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	std, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("compress/gzip: %v", err)
	}
	kr, err := kgzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	k, err := io.ReadAll(kr)
	if err != nil {
		t.Fatalf("klauspost gzip: %v", err)
	}
	if !bytes.Equal(std, k) {
		t.Fatal("compress/gzip and klauspost gzip read different bytes")
	}
	return std
}

// TestStreamListGzip: a StreamList asked for gzip (gzsplice.MetadataAccept)
// answers, when the list is at least gzsplice.Threshold, with the
// response header gzsplice.MetadataEncoding and chunks that are one gzip
// stream of byte for byte the list the same call without the request
// gives (same metadata and continue tokens), in JSON and protobuf, whole,
// resourceVersion=0 and in chunks of random limits; over objects of
// random names and sizes, listed again (from the memoized runs) and after
// random changes and deletions (runs that no longer match).
func TestStreamListGzip(t *testing.T) {
	e := newEnv(t, app.Config{})
	r := rand.New(rand.NewPCG(7, 11))
	names := map[string]bool{}
	put := func() {
		name := fmt.Sprintf("cm-%d", r.IntN(1_000_000))
		names[name] = true
		e.mustPut(configMap("gz", name, map[string]string{"n": name}, strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(3000))+fmt.Sprint(r.Int())))
	}
	for range 600 {
		put()
	}
	call := func(ctx context.Context, req *watchv1.ListRequest, gz bool) (streamed, metadata.MD) {
		t.Helper()
		if gz {
			ctx = metadata.AppendToOutgoingContext(ctx, gzsplice.MetadataAccept, "gzip")
		}
		var header metadata.MD
		s := readStreamList(e.watch.StreamList(ctx, &watchv1.StreamListRequest{List: req}, grpc.Header(&header)))
		if s.err != nil {
			t.Fatalf("%v: %v", req, s.err)
		}
		return s, header
	}
	check := func(what string, req *watchv1.ListRequest) string {
		t.Helper()
		plain, ph := call(t.Context(), req, false)
		zipped, zh := call(t.Context(), req, true)
		if len(ph.Get(gzsplice.MetadataEncoding)) != 0 {
			t.Fatalf("%s: a list not asked for gzip says it is compressed", what)
		}
		got := zipped.data
		if isGzip := len(zh.Get(gzsplice.MetadataEncoding)) > 0; isGzip {
			got = gunzip(t, zipped.data)
		} else if len(plain.data) >= gzsplice.Threshold*2 {
			t.Fatalf("%s: a list of %d bytes not compressed", what, len(plain.data))
		}
		if !bytes.Equal(got, plain.data) {
			t.Fatalf("%s: decompressed %d bytes differ from the list's %d", what, len(got), len(plain.data))
		}
		if plain.meta.GetResourceVersion() != zipped.meta.GetResourceVersion() || plain.meta.GetRemainingItemCount() != zipped.meta.GetRemainingItemCount() ||
			(plain.meta.GetContinueToken() == "") != (zipped.meta.GetContinueToken() == "") {
			t.Fatalf("%s: metadata %v, want %v", what, zipped.meta, plain.meta)
		}
		return plain.meta.GetContinueToken()
	}
	for round := range 4 {
		for _, enc := range []watchv1.Encoding{watchv1.Encoding_ENCODING_JSON, watchv1.Encoding_ENCODING_PROTOBUF} {
			for _, rv := range []string{"", "0"} {
				check(fmt.Sprintf("round %d %s rv=%q", round, enc, rv), &watchv1.ListRequest{Resource: cmResource, Namespace: "gz", ResourceVersion: rv, Encoding: enc})
			}
			limit := int64(50 + r.IntN(300))
			cont := ""
			for chunk := 0; ; chunk++ {
				req := &watchv1.ListRequest{Resource: cmResource, Namespace: "gz", Limit: limit, ContinueToken: cont, Encoding: enc}
				if cont = check(fmt.Sprintf("round %d %s limit %d chunk %d", round, enc, limit, chunk), req); cont == "" {
					break
				}
			}
			// A label selector: runs of other objects than the whole list's.
			check(fmt.Sprintf("round %d %s selector", round, enc), &watchv1.ListRequest{Resource: cmResource, Namespace: "gz", LabelSelector: "n notin (cm-1,cm-2)", Encoding: enc})
		}
		// Change, add and delete some objects: their runs no longer match.
		i := 0
		for name := range names {
			switch i++; {
			case i%7 == 0:
				e.mustPut(configMap("gz", name, nil, "changed"))
			case i%11 == 0:
				if _, err := e.del(t.Context(), "gz", name); err != nil {
					t.Fatal(err)
				}
				delete(names, name)
			}
		}
		for range 30 {
			put()
		}
	}
}
