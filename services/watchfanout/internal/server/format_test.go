package server

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestFormat: the cache format of each encoding and includeObject, the
// media type of its objects and lists, and 400 for what is not served.
func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		enc       watchv1.Encoding
		include   string
		want      cache.Format
		mediaType string
		bad       bool
	}{
		{enc: watchv1.Encoding_ENCODING_UNSPECIFIED, want: cache.FormatJSON, mediaType: negotiation.JSON},
		{enc: watchv1.Encoding_ENCODING_JSON, want: cache.FormatJSON, mediaType: negotiation.JSON},
		{enc: watchv1.Encoding_ENCODING_JSON, include: "Object", want: cache.FormatJSON, mediaType: negotiation.JSON}, // only tables read it
		{enc: watchv1.Encoding_ENCODING_PROTOBUF, want: cache.FormatProtobuf, mediaType: negotiation.Protobuf},
		{enc: watchv1.Encoding_ENCODING_TABLE, want: cache.FormatTableMetadata, mediaType: negotiation.JSON},
		{enc: watchv1.Encoding_ENCODING_TABLE, include: "Metadata", want: cache.FormatTableMetadata, mediaType: negotiation.JSON},
		{enc: watchv1.Encoding_ENCODING_TABLE, include: "None", want: cache.FormatTableNone, mediaType: negotiation.JSON},
		{enc: watchv1.Encoding_ENCODING_TABLE, include: "Object", want: cache.FormatTableObject, mediaType: negotiation.JSON},
		{enc: watchv1.Encoding_ENCODING_TABLE, include: "object", bad: true},
		{enc: 99, bad: true},
	} {
		f, err := format(tc.enc, tc.include)
		if tc.bad {
			if !apierrors.IsBadRequest(err) {
				t.Errorf("%v includeObject %q: %v, want a 400", tc.enc, tc.include, err)
			}
			continue
		}
		if err != nil || f != tc.want {
			t.Errorf("%v includeObject %q: format %v (%v), want %v", tc.enc, tc.include, f, err, tc.want)
		}
		if got := mediaType(f); got != tc.mediaType {
			t.Errorf("%v includeObject %q: media type %q, want %q", tc.enc, tc.include, got, tc.mediaType)
		}
	}
}
