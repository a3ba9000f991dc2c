package frontend

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// TestGzipWriter: a response is sent compressed once it reaches
// gzipThreshold, whether it gets there in small writes or in one write
// past it (a relayed list chunk, compressed without a copy), and plain
// below it; the compressed body decompresses to what was written.
func TestGzipWriter(t *testing.T) {
	big := bytes.Repeat([]byte(`{"kind":"ConfigMap","data":{"v":"xxxx"}},`), gzipThreshold/16)
	var writers gzipWriters
	for _, tc := range []struct {
		name   string
		writes [][]byte
		gzip   bool
	}{
		{"small", [][]byte{[]byte("{}"), []byte("\n")}, false},
		{"first write past the threshold", [][]byte{big, big[:100], big}, true},
		{"small writes past the threshold", [][]byte{big[:100], big, big[:7]}, true},
		// Buffers are reused: a response holds only what it wrote.
		{"small after others", [][]byte{[]byte("[")}, false},
		{"small, larger than the one before", [][]byte{big[:300], []byte("]")}, false},
		{"small, smaller than the one before", [][]byte{[]byte("{")}, false},
	} {
		rec := httptest.NewRecorder()
		g := &gzipWriter{ResponseWriter: rec, writers: &writers}
		var want []byte
		for _, w := range tc.writes {
			if n, err := g.Write(w); err != nil || n != len(w) {
				t.Fatalf("%s: Write: %d, %v", tc.name, n, err)
			}
			g.Flush()
			want = append(want, w...)
		}
		if err := g.Close(); err != nil {
			t.Fatalf("%s: Close: %v", tc.name, err)
		}
		body := rec.Body.Bytes()
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Fatalf("%s: compressed %v, want %v", tc.name, got, tc.gzip)
		}
		if tc.gzip {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if !bytes.Equal(body, want) {
			t.Errorf("%s: body of %d bytes, want the %d written", tc.name, len(body), len(want))
		}
	}
}

// TestGzipWriterPassesGzippedStream: after StartGzipped, what is written
// is sent as it is with Content-Encoding gzip (a list compressed by
// watchfanout is not compressed again), and the response's status code
// and Vary header are kept; StartGzipped is refused once a response has
// started buffering.
func TestGzipWriterPassesGzippedStream(t *testing.T) {
	var writers gzipWriters
	var stream bytes.Buffer
	zw := gzip.NewWriter(&stream)
	want := bytes.Repeat([]byte(`{"kind":"ConfigMap"},`), 10000)
	if _, err := zw.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	g := &gzipWriter{ResponseWriter: rec, writers: &writers}
	if !g.StartGzipped() {
		t.Fatal("StartGzipped refused on a fresh response")
	}
	g.WriteHeader(http.StatusOK)
	half := stream.Len() / 2
	for _, p := range [][]byte{stream.Bytes()[:half], stream.Bytes()[half:]} {
		if n, err := g.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write: %d, %v", n, err)
		}
		g.Flush()
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != "gzip" || rec.Header().Get("Vary") != "Accept-Encoding" {
		t.Fatalf("status %d, headers %v", rec.Code, rec.Header())
	}
	if !bytes.Equal(rec.Body.Bytes(), stream.Bytes()) {
		t.Fatalf("body of %d bytes, want the %d of the stream as they are", rec.Body.Len(), stream.Len())
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("decoded %d bytes, %v", len(got), err)
	}

	started := &gzipWriter{ResponseWriter: httptest.NewRecorder(), writers: &writers}
	if _, err := started.Write([]byte("{}")); err != nil {
		t.Fatal(err)
	}
	if started.StartGzipped() {
		t.Fatal("StartGzipped accepted after a write")
	}
}
