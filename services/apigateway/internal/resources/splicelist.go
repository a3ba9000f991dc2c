package resources

import (
	"context"
	"errors"
	"strconv"

	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// spliceable reports whether a list in out can be built from the stored
// bytes (spliceList) with the same result as decoding every object and
// encoding the typed list: protobuf, the objects themselves (not a Table,
// not PartialObjectMetadata), and selectors on nothing but names,
// namespaces and labels, which spliceList reads from the stored ObjectMeta
// (a kind's own fields, e.g. a Secret's type, need the decoded object).
// Reads decode stored objects without defaulting, conversion or stripping
// anything, so the stored bytes plus the resourceVersion are the whole
// object.
func spliceable(out output, filter *selection.Filter) bool {
	return out.mediaType == negotiation.Protobuf && !out.table && !out.partial && filter.MetadataOnly()
}

// spliceList serves a protobuf list from the store by splicing the stored
// bytes of its objects into the list envelope (see package protolist)
// instead of decoding and re-encoding each one; it reads the store as
// streamList does, in pages of listPageSize at the revision of the first
// (the next page read while this one is spliced), and sets the same list
// metadata.
//
// Unlike streamList it cannot send before the end: the envelope carries
// the list's length before the first item, and the store reports no value
// sizes without the values. So it holds the whole response, in chunks of
// listChunkBytes (about the size of the stored values), but no more than
// two pages of the store's replies. Bounding a protobuf list's memory
// would need two reads of the store (sizes, then values) or a store that
// reports sizes.
//
// handled is false when a stored value cannot be spliced (another kind, a
// content encoding: see protolist.Parse); nothing has been sent then, and
// the caller serves the list the decoding way.
func (s *Server) spliceList(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, rd readparams.Read, filter *selection.Filter, stream apiv1.ResourceService_ListServer) (handled bool, err error) {
	prefix := keyRange(res, req.GetRef().GetNamespace(), filter)
	opts, minRV, err := s.listOptions(ctx, rd)
	if err != nil {
		return true, err
	}
	gvk := res.GVK()
	w := protolist.NewWriter(gvk.GroupVersion().WithKind(res.ListKind), listChunkBytes)
	read := func(ctx context.Context, o storage.ListOptions) (storage.ListResult, error) {
		return s.listPage(ctx, res, req, prefix, o)
	}
	all := filter.Empty()
	at, err := scanKVs(ctx, all, opts, minRV, req.GetLimit(), listPageSize, read, func(kv storage.KV) (bool, error) {
		o, err := protolist.Parse(kv.Value, gvk)
		if err != nil {
			return false, err
		}
		if !all {
			name, ns, labels, err := o.Metadata()
			if err != nil {
				return false, err
			}
			if !filter.MatchesMetadata(name, ns, labels) {
				return false, nil
			}
		}
		w.Add(&o, kv.ModRevision)
		return true, nil
	})
	if errors.Is(err, protolist.ErrNotSpliceable) {
		s.cfg.Logger.DebugContext(ctx, "protobuf list decoded: a stored value cannot be spliced", "resource", res.GVR.String(), "err", err)
		return false, nil
	}
	if err != nil {
		return true, err
	}
	lm := metav1.ListMeta{ResourceVersion: strconv.FormatInt(at.rev, 10)}
	if at.next != "" {
		tok, err := continuetoken.Encode(at.rev, at.next, prefix)
		if err != nil {
			return true, apierrors.NewInternalError(err)
		}
		lm.Continue, lm.RemainingItemCount = tok, at.remaining
	}
	chunks, err := w.Finish(&lm)
	if err != nil {
		return true, apierrors.NewInternalError(err)
	}
	for _, c := range chunks {
		if err := stream.Send(&httpbody.HttpBody{ContentType: negotiation.Protobuf, Data: c}); err != nil {
			return true, err
		}
	}
	return true, nil
}
