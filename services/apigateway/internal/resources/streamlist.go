package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// listPageSize is how many keys a streamed list reads from the store at
	// a time: the bound on what the gateway holds of a list.
	listPageSize = 500
	// listChunkBytes is how much encoded JSON is gathered before it is sent.
	listChunkBytes = 256 << 10
)

// streamList writes a JSON list while reading it: the store is read in
// pages of listPageSize at the revision of the first page (one snapshot, as
// for continue tokens), each item is encoded on its own, and chunks of
// about listChunkBytes are sent as they fill. Memory is bounded by one page,
// whatever the list's size.
//
// The list's metadata (resourceVersion, continue, remainingItemCount) is
// known only at the end, so it is written after the items:
//
//	{"kind":"ConfigMapList","apiVersion":"v1","items":[…],"metadata":{…}}
//
// which is the same JSON object as kube-apiserver's, members in another
// order (items without their own apiVersion and kind, as there). Errors before the first chunk is sent are returned (the caller maps
// them to a Status); after it, the stream is cut.
func (s *Server) streamList(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, rd readparams.Read, filter *selection.Filter, stream apiv1.ResourceService_ListServer) error {
	prefix := keyRange(res, req.GetRef().GetNamespace(), filter)
	opts, minRV, err := s.listOptions(ctx, rd)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	kind, _ := json.Marshal(res.ListKind)
	apiVersion, _ := json.Marshal(res.GVR.GroupVersion().String())
	buf.WriteString(`{"kind":`)
	buf.Write(kind)
	buf.WriteString(`,"apiVersion":`)
	buf.Write(apiVersion)
	buf.WriteString(`,"items":[`)

	send := func() error {
		if err := stream.Send(&httpbody.HttpBody{ContentType: negotiation.JSON, Data: bytes.Clone(buf.Bytes())}); err != nil {
			return err
		}
		buf.Reset()
		return nil
	}
	count := 0
	read := func(ctx context.Context, o storage.ListOptions) (storage.ListResult, error) {
		return s.listPage(ctx, res, req, prefix, o)
	}
	at, err := s.scan(ctx, res, filter, opts, minRV, req.GetLimit(), listPageSize, read, func(obj runtime.Object) error {
		if count > 0 {
			buf.WriteByte(',')
		}
		count++
		if err := s.cfg.Codec.EncodeListItem(&buf, obj, negotiation.JSON); err != nil {
			return apierrors.NewInternalError(err)
		}
		if n := buf.Len(); buf.Bytes()[n-1] == '\n' {
			buf.Truncate(n - 1)
		}
		if buf.Len() >= listChunkBytes {
			return send()
		}
		return nil
	})
	if err != nil {
		return err
	}
	rev, next, remaining := at.rev, at.next, at.remaining

	lm := metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10), RemainingItemCount: remaining}
	if next != "" {
		tok, err := continuetoken.Encode(rev, next, prefix)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		lm.Continue = tok
	}
	meta, err := json.Marshal(lm)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	buf.WriteString(`],"metadata":`)
	buf.Write(meta)
	buf.WriteString("}\n")
	return send()
}
