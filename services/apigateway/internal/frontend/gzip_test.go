package frontend

import (
	"bytes"
	"io"
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
