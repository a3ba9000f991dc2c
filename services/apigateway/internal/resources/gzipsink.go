package resources

import (
	"context"
	"slices"

	"github.com/meridian-cp/meridian/lib/gzsplice"
	"google.golang.org/grpc/metadata"
)

// GzipSink is the HTTP response of a list whose client takes gzip: a list
// relayed from watchfanout may then come gzip-compressed already
// (gzsplice), and its bytes go out as they are.
type GzipSink interface {
	// StartGzipped makes the response gzip-encoded, the bytes written
	// to it from now on being a gzip stream as they are; false when it
	// can no longer be (the response has started).
	StartGzipped() bool
}

// gzipSinkKey is the context key of a request's GzipSink.
type gzipSinkKey struct{}

// WithGzipSink returns ctx carrying the GzipSink of its HTTP response; the
// front end sets it on a list request whose client takes gzip, and the
// ResourceService reached in process reads it.
func WithGzipSink(ctx context.Context, s GzipSink) context.Context {
	return context.WithValue(ctx, gzipSinkKey{}, s)
}

// gzipSink returns ctx's GzipSink, or nil.
func gzipSink(ctx context.Context) GzipSink {
	s, _ := ctx.Value(gzipSinkKey{}).(GzipSink)
	return s
}

// askGzip adds the request for a gzip-compressed list to a StreamList
// call's context when the response takes one.
func askGzip(ctx context.Context, sink GzipSink) context.Context {
	if sink == nil {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, gzsplice.MetadataAccept, "gzip")
}

// gzipped reports whether a StreamList's response header says its chunks
// are a gzip stream.
func gzipped(header metadata.MD) bool {
	return slices.Contains(header.Get(gzsplice.MetadataEncoding), "gzip")
}
