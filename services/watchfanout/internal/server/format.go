package server

import (
	"fmt"
	"net/http"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// format maps the requested encoding to a cache format.
func format(enc watchv1.Encoding, includeObject string) (cache.Format, error) {
	return formatOf(nil, enc, includeObject)
}

// formatOf is format for resource r: custom resources are not served in
// protobuf (406 Not Acceptable), as kube-apiserver serves them.
func formatOf(r *cache.Resource, enc watchv1.Encoding, includeObject string) (cache.Format, error) {
	if r != nil && r.Registry().Custom != nil && enc == watchv1.Encoding_ENCODING_PROTOBUF {
		return 0, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", r.Registry().GVR.GroupResource(), "",
			"custom resources are not served as protobuf", 0, false)
	}
	switch enc {
	case watchv1.Encoding_ENCODING_UNSPECIFIED, watchv1.Encoding_ENCODING_JSON:
		return cache.FormatJSON, nil
	case watchv1.Encoding_ENCODING_PROTOBUF:
		return cache.FormatProtobuf, nil
	case watchv1.Encoding_ENCODING_TABLE:
		switch metav1.IncludeObjectPolicy(includeObject) {
		case "", metav1.IncludeMetadata:
			return cache.FormatTableMetadata, nil
		case metav1.IncludeNone:
			return cache.FormatTableNone, nil
		case metav1.IncludeObject:
			return cache.FormatTableObject, nil
		}
		return 0, apierrors.NewBadRequest(fmt.Sprintf("includeObject: unsupported value %q", includeObject))
	}
	return 0, apierrors.NewBadRequest(fmt.Sprintf("unsupported encoding %v", enc))
}

// mediaType is the media type of objects and lists in a format.
func mediaType(f cache.Format) string {
	if f == cache.FormatProtobuf {
		return negotiation.Protobuf
	}
	return negotiation.JSON
}
