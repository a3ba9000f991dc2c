package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	"strconv"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// order. Errors before the first chunk is sent are returned (the caller maps
// them to a Status); after it, the stream is cut.
func (s *Server) streamList(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, filter *selection.Filter, stream apiv1.ResourceService_ListServer) error {
	prefix := keyRange(res, req.GetRef().GetNamespace(), filter)
	opts, minRV, err := s.listOptions(ctx, req, prefix)
	if err != nil {
		return err
	}
	limit := req.GetLimit()
	pageLimit := func(have int64) int64 {
		if limit > 0 && limit-have < listPageSize {
			return limit - have
		}
		return listPageSize
	}
	opts.Limit = pageLimit(0)

	var buf bytes.Buffer
	kind, _ := json.Marshal(res.ListKind)
	apiVersion, _ := json.Marshal(res.GVR.GroupVersion().String())
	buf.WriteString(`{"kind":`)
	buf.Write(kind)
	buf.WriteString(`,"apiVersion":`)
	buf.Write(apiVersion)
	buf.WriteString(`,"items":[`)

	var (
		rev       int64
		count     int64
		next      string
		remaining *int64
	)
	send := func() error {
		if err := stream.Send(&httpbody.HttpBody{ContentType: negotiation.JSON, Data: bytes.Clone(buf.Bytes())}); err != nil {
			return err
		}
		buf.Reset()
		return nil
	}
	for first := true; ; first = false {
		page, err := s.listPage(ctx, res, req, prefix, opts)
		if err != nil {
			return err
		}
		if first {
			if minRV > 0 && page.Revision < minRV {
				return apistatus.TooLargeResourceVersion(minRV, page.Revision)
			}
			rev = page.Revision
		}
		for _, kv := range page.KVs {
			obj := res.New()
			if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
				return apierrors.NewInternalError(err)
			}
			if !filter.Matches(obj) {
				continue
			}
			if count > 0 {
				buf.WriteByte(',')
			}
			if err := s.cfg.Codec.Encode(&buf, obj, negotiation.JSON); err != nil {
				return apierrors.NewInternalError(err)
			}
			if n := buf.Len(); buf.Bytes()[n-1] == '\n' {
				buf.Truncate(n - 1)
			}
			count++
			if buf.Len() >= listChunkBytes {
				if err := send(); err != nil {
					return err
				}
			}
		}
		if !page.More || len(page.KVs) == 0 {
			next = ""
			break
		}
		next = page.KVs[len(page.KVs)-1].Key + "\x00"
		if limit > 0 && count >= limit {
			if filter.Empty() {
				r := page.Count - int64(len(page.KVs))
				remaining = &r
			}
			break
		}
		opts = storage.ListOptions{ReadOptions: storage.ReadOptions{Revision: rev, Serializable: true}, Start: next, Limit: pageLimit(count)}
	}

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
