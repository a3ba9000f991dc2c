package resources

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/metaonly"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/table"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// output is what a read returns: the media type, and whether the client
// asked for a Table (Accept: application/json;as=Table;g=meta.k8s.io;v=v1)
// and with which objects in its rows.
type output struct {
	mediaType     string
	table         bool
	partial       bool
	includeObject metav1.IncludeObjectPolicy
}

// negotiateOutput negotiates a response against one of the negotiation
// option sets: a Table where the client lists it first, else the object.
func negotiateOutput(accept, includeObject string, opts negotiation.Options) (output, error) {
	mt, ok := negotiation.Negotiate(accept, opts)
	if !ok {
		return output{}, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
			"none of the requested media types is served: "+strings.Join(opts.Types, ", ")+" and application/json;as=Table;g=meta.k8s.io;v=v1 are", 0, false)
	}
	out := output{mediaType: mt.Type, partial: negotiation.IsPartialObjectMetadata(mt)}
	if negotiation.IsTable(mt) {
		out.table = true
		switch p := metav1.IncludeObjectPolicy(includeObject); p {
		case "":
			out.includeObject = metav1.IncludeMetadata
		case metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
			out.includeObject = p
		default:
			return output{}, apierrors.NewBadRequest(fmt.Sprintf("includeObject: unsupported value %q", includeObject))
		}
	}
	return out, nil
}

// render encodes a read's result as the client asked: a Table or the
// object.
func (s *Server) render(res *registry.Resource, obj runtime.Object, out output) ([]byte, error) {
	if out.partial {
		p, err := metaonly.Convert(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		return s.cfg.Codec.EncodeToBytes(p, out.mediaType)
	}
	if !out.table {
		return s.cfg.Codec.EncodeToBytes(obj, out.mediaType)
	}
	t, err := table.Render(s.cfg.Codec, res, obj, out.includeObject, s.cfg.Now())
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return s.cfg.Codec.EncodeToBytes(t, negotiation.JSON)
}
