package resources

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Delete deletes an object, honouring the uid and resourceVersion
// preconditions of a DeleteOptions body.
func (s *Server) Delete(ctx context.Context, req *apiv1.DeleteRequest) (*httpbody.HttpBody, error) {
	out, err := s.delete(ctx, req)
	if err != nil {
		return nil, toGRPC(err)
	}
	mt, err := mediaType(req.GetAccept())
	if err != nil {
		return nil, toGRPC(err)
	}
	return toGRPCBody(s.respond(out, mt))
}

func (s *Server) delete(ctx context.Context, req *apiv1.DeleteRequest) (runtime.Object, error) {
	ref := req.GetRef()
	res, err := s.resolve(ref, true)
	if err != nil {
		return nil, err
	}
	opts, err := s.deleteOptions(req.GetBody())
	if err != nil {
		return nil, err
	}
	dry := req.GetDryRun()
	if len(dry) == 0 {
		dry = opts.DryRun
	}
	dryRun, err := isDryRun(dry)
	if err != nil {
		return nil, err
	}
	gr := res.GVR.GroupResource()
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		old, _, err := s.get(ctx, res, ref.GetNamespace(), ref.GetName(), readLatest, 0)
		if err != nil {
			return nil, err
		}
		oldAcc, _ := meta.Accessor(old)
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != oldAcc.GetUID() {
				return nil, apierrors.NewConflict(gr, ref.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, oldAcc.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != oldAcc.GetResourceVersion() {
				return nil, apierrors.NewConflict(gr, ref.GetName(), fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, oldAcc.GetResourceVersion()))
			}
		}
		if err := s.admit(ctx, res, ref, nil, old, apiv1Delete, dryRun); err != nil {
			return nil, err
		}
		status := &metav1.Status{Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{
			Name: ref.GetName(), Group: res.GVR.Group, Kind: res.GVR.Resource, UID: oldAcc.GetUID(),
		}}
		if dryRun {
			return status, nil
		}
		modRev, _ := parseRV(oldAcc.GetResourceVersion())
		var delErr error
		if res.GVR.Resource == "namespaces" && res.GVR.Group == "" {
			_, delErr = s.deleteNamespace(ctx, ref.GetName(), modRev)
		} else {
			_, delErr = s.cfg.Store.Delete(ctx, res.Key(ref.GetNamespace(), ref.GetName()), modRev)
		}
		if errors.Is(delErr, storage.ErrConflict) && (opts.Preconditions == nil || opts.Preconditions.ResourceVersion == nil) {
			continue
		}
		if delErr != nil {
			return nil, storageError(delErr, res, ref.GetNamespace(), ref.GetName())
		}
		return status, nil
	}
	return nil, apierrors.NewConflict(gr, ref.GetName(), errors.New("too many concurrent writers; try again"))
}

// deleteOptions decodes an optional DeleteOptions body.
func (s *Server) deleteOptions(body *httpbody.HttpBody) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if body == nil || len(body.GetData()) == 0 {
		return opts, nil
	}
	ct := body.GetContentType()
	if ct != "" && ct != negotiation.JSON && ct != negotiation.YAML && ct != negotiation.Protobuf {
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "", "DeleteOptions must be JSON, YAML or protobuf", 0, false)
	}
	if err := s.cfg.Codec.DecodeOptions(body.GetData(), ct, opts); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid DeleteOptions: %v", err))
	}
	return opts, nil
}
