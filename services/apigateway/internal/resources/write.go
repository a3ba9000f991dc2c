package resources

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// maxConflictRetries bounds the retries of an unconditional update or
// delete that raced another writer.
const maxConflictRetries = 16

// generateNameAttempts bounds the retries of a create with generateName
// whose generated name was taken.
const generateNameAttempts = 8

func toGRPC(err error) error { return apistatus.ToGRPC(err) }

func toGRPCBody(b *httpbody.HttpBody, err error) (*httpbody.HttpBody, error) {
	if err != nil {
		return nil, toGRPC(err)
	}
	return b, nil
}

// isDryRun validates the dryRun parameter: empty or ["All"].
func isDryRun(v []string) (bool, error) {
	if len(v) == 0 {
		return false, nil
	}
	for _, d := range v {
		if d != metav1.DryRunAll {
			return false, apierrors.NewBadRequest(fmt.Sprintf("Invalid dry run value: %q: valid values are %q", d, metav1.DryRunAll))
		}
	}
	return true, nil
}

// resolveWrite resolves the object an update or a patch names and reads
// its dryRun parameter.
func (s *Server) resolveWrite(ctx context.Context, ref *apiv1.ResourceRef, dryRunParam []string) (res *registry.Resource, dryRun bool, err error) {
	if res, err = s.resolve(ctx, ref, true); err != nil {
		return nil, false, err
	}
	if dryRun, err = isDryRun(dryRunParam); err != nil {
		return nil, false, err
	}
	return res, dryRun, nil
}

// decodeBody decodes a create or update body into a new object of res,
// handling unknown and duplicate fields as fieldValidation says, and
// gives it the namespace ns of the URL (see checkNamespace).
func (s *Server) decodeBody(ctx context.Context, res *registry.Resource, ns string, body *httpbody.HttpBody, fieldValidation string) (runtime.Object, metav1.Object, error) {
	fv, err := parseFieldValidation(fieldValidation)
	if err != nil {
		return nil, nil, err
	}
	if body == nil || len(body.GetData()) == 0 {
		return nil, nil, apierrors.NewBadRequest("the request body is empty")
	}
	ct := body.GetContentType()
	switch ct {
	case "", negotiation.JSON, negotiation.YAML, negotiation.Protobuf:
	default:
		return nil, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s", negotiation.JSON, negotiation.YAML, negotiation.Protobuf), 0, false)
	}
	obj := res.New()
	problems, err := s.cfg.Codec.DecodeStrict(body.GetData(), ct, res.GVK(), obj)
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized or malformed: %v", err))
	}
	if err := fv.apply(ctx, problems); err != nil {
		return nil, nil, err
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	if err := checkNamespace(res, acc, ns); err != nil {
		return nil, nil, err
	}
	return obj, acc, nil
}

// checkNamespace fills an object's namespace from the URL, or fails when
// they disagree.
func checkNamespace(res *registry.Resource, acc metav1.Object, ns string) error {
	if !res.Namespaced {
		acc.SetNamespace("")
		return nil
	}
	switch acc.GetNamespace() {
	case "":
		acc.SetNamespace(ns)
	case ns:
	default:
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// Create stores a new object.
func (s *Server) Create(ctx context.Context, req *apiv1.CreateRequest) (*httpbody.HttpBody, error) {
	ctx = withFieldValidation(ctx, req.GetFieldValidation())
	return s.write(ctx, req.GetRef(), req.GetAccept(), http.StatusCreated, func() (runtime.Object, error) { return s.create(ctx, req) })
}

func (s *Server) create(ctx context.Context, req *apiv1.CreateRequest) (runtime.Object, error) {
	ref := req.GetRef()
	if ref.GetName() != "" {
		return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Group: ref.GetGroup(), Resource: ref.GetResource()}, "create")
	}
	res, err := s.resolve(ctx, ref, false)
	if err != nil {
		return nil, err
	}
	if res.Namespaced && ref.GetNamespace() == "" {
		return nil, apierrors.NewBadRequest("a namespace is required to create a " + res.Kind)
	}
	if res.Custom != nil && res.Custom.Terminating() {
		return nil, apierrors.NewMethodNotSupported(res.GVR.GroupResource(), "create")
	}
	dryRun, err := isDryRun(req.GetDryRun())
	if err != nil {
		return nil, err
	}
	obj, acc, err := s.decodeBody(ctx, res, ref.GetNamespace(), req.GetBody(), req.GetFieldValidation())
	if err != nil {
		return nil, err
	}
	if obj, acc, err = s.trackCreate(ctx, res, obj, req.GetFieldManager()); err != nil {
		return nil, err
	}
	return s.insert(ctx, res, ref, obj, acc, dryRun)
}

// insert stores a new, decoded object: server-owned fields, defaults,
// validation, admission, then a store create (retried over generated names).
func (s *Server) insert(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, obj runtime.Object, acc metav1.Object, dryRun bool) (runtime.Object, error) {
	s.prepareCreate(res, obj, acc)
	if err := s.guard(ctx, res, ref, obj, nil); err != nil {
		return nil, err
	}
	parent, err := s.namespaceGuard(ctx, res, acc.GetNamespace(), acc.GetName(), dryRun)
	if err != nil {
		return nil, err
	}

	generate := acc.GetName() == "" && acc.GetGenerateName() != ""
	attempts := 1
	if generate {
		attempts = generateNameAttempts
	}
	for attempt := 0; ; attempt++ {
		if generate {
			acc.SetName(acc.GetGenerateName() + randomSuffix())
		}
		if err := s.admitSchema(ctx, res, obj, nil, ""); err != nil {
			return nil, err
		}
		// A custom resource's admission (crdschema.Admit) ran the
		// strategy's metadata validation already, on this object.
		if res.Custom == nil {
			if errs := res.Strategy.Validate(obj); len(errs) > 0 {
				return nil, apierrors.NewInvalid(res.GVK().GroupKind(), acc.GetName(), errs)
			}
		}
		if err := s.admit(ctx, res, ref, obj, nil, apiv1Create, dryRun); err != nil {
			return nil, err
		}
		if s.cfg.Quota != nil {
			if err := s.cfg.Quota.Charge(ctx, acc.GetNamespace(), res.GVR.GroupResource(), acc.GetName(), dryRun); err != nil {
				return nil, err
			}
		}
		if dryRun {
			return obj, nil
		}
		data, err := s.encodeStored(ctx, res, obj)
		if err != nil {
			return nil, err
		}
		lease, err := s.leaseFor(ctx, res)
		if err != nil {
			return nil, err
		}
		rev, err := s.createGuarded(ctx, res, acc.GetNamespace(), acc.GetName(), res.Key(acc.GetNamespace(), acc.GetName()), data, parent, lease)
		if apierrors.IsAlreadyExists(err) && generate && attempt+1 < attempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		acc.SetResourceVersion(fmt.Sprint(rev))
		return obj, nil
	}
}

// prepareCreate sets the fields of a new object the server owns and
// applies the kind's strategy for a create; acc is obj's accessor.
func (s *Server) prepareCreate(res *registry.Resource, obj runtime.Object, acc metav1.Object) {
	acc.SetUID(types.UID(uuid.NewString()))
	acc.SetCreationTimestamp(metav1.NewTime(s.cfg.Now().Truncate(1e9)))
	acc.SetResourceVersion("")
	acc.SetDeletionTimestamp(nil)
	acc.SetDeletionGracePeriodSeconds(nil)
	acc.SetSelfLink("")
	res.Strategy.PrepareForCreate(obj)
}

// namespaceKey is the store key of a namespace.
func namespaceKey(s *Server, ns string) string {
	res, _ := s.cfg.Registry.Lookup(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	return res.Key("", ns)
}

// randomSuffix is the 5-character suffix of generated names, from the same
// alphabet kube-apiserver uses (no vowels, no confusable characters).
func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	var b [5]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}

// Update replaces an object. A resourceVersion in the body is a
// precondition (409 Conflict when stale); without one the update is
// unconditional and retried over concurrent writes.
func (s *Server) Update(ctx context.Context, req *apiv1.UpdateRequest) (*httpbody.HttpBody, error) {
	ctx = withFieldValidation(ctx, req.GetFieldValidation())
	return s.write(ctx, req.GetRef(), req.GetAccept(), 0, func() (runtime.Object, error) { return s.update(ctx, req) })
}

func (s *Server) update(ctx context.Context, req *apiv1.UpdateRequest) (runtime.Object, error) {
	ref := req.GetRef()
	res, dryRun, err := s.resolveWrite(ctx, ref, req.GetDryRun())
	if err != nil {
		return nil, err
	}
	if isScale(res, ref) {
		return s.updateScale(ctx, res, req, dryRun)
	}
	obj, acc, err := s.decodeBody(ctx, res, ref.GetNamespace(), req.GetBody(), req.GetFieldValidation())
	if err != nil {
		return nil, err
	}
	if acc.GetName() != ref.GetName() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", acc.GetName(), ref.GetName()))
	}
	precondition := acc.GetResourceVersion()
	if err := validateManager(req.GetFieldManager()); err != nil {
		return nil, err
	}
	return s.updateLoop(ctx, res, ref, precondition, dryRun, func(old runtime.Object) (runtime.Object, error) {
		return s.trackUpdate(ctx, res, ref, old, obj.DeepCopyObject(), req.GetFieldManager()), nil
	})
}

// mutateFunc computes the new object from the stored one. It must not
// modify old.
type mutateFunc func(old runtime.Object) (runtime.Object, error)

// updateLoop reads the stored object, computes its replacement with mutate,
// and stores it if nobody wrote in between. With a precondition (the
// resourceVersion the client saw) a concurrent write is a 409 Conflict;
// without one the loop reads again and retries. A replacement that stores
// exactly what is stored writes nothing (unchanged.go).
//
// The first attempt may start from the object's hint instead of a read
// (objhints.go); unless that attempt stores its result, it is not counted
// and the loop starts over from a read, so only a hint that was the
// stored object shapes the outcome.
func (s *Server) updateLoop(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, precondition string, dryRun bool, mutate mutateFunc) (runtime.Object, error) {
	gr := res.GVR.GroupResource()
	key := res.Key(ref.GetNamespace(), ref.GetName())
	var hint storage.KV
	hinted := false
	if !dryRun { // a dry run stores nothing, so nothing would check a hint
		hint, hinted = s.objHints.begin(key)
		defer s.objHints.end(key)
	}
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		var old runtime.Object
		var stored []byte
		speculative, stale := false, false
		if hinted {
			hinted = false
			if o, err := s.decodeStored(ctx, res, hint.Value, hint.ModRevision); err == nil {
				old, stored, speculative = o, hint.Value, true
			}
		}
		if old == nil {
			var err error
			if old, stored, stale, err = s.readStored(ctx, res, ref.GetNamespace(), ref.GetName()); err != nil {
				return nil, err
			}
		}
		from := current{obj: old, stored: stored, read: !speculative, stale: stale}
		obj, retry, err := s.updateFrom(ctx, res, ref, key, from, precondition, dryRun, mutate)
		if speculative && (err != nil || retry) {
			s.objHints.forget(key)
			attempt--
			continue
		}
		if err != nil {
			return nil, err
		}
		if !retry {
			return obj, nil
		}
	}
	return nil, apierrors.NewConflict(gr, ref.GetName(), errors.New("too many concurrent writers; try again"))
}

// current is the object an update attempt starts from.
type current struct {
	// obj is the object decoded, with its resourceVersion.
	obj runtime.Object
	// stored is obj as the store holds it (Codec.EncodeStorage).
	stored []byte
	// read: obj was read from the store by this attempt, not taken from a
	// hint, so an attempt that would store the same bytes may answer
	// without writing.
	read bool
	// stale: stored was decrypted with anything but the key new writes
	// use, so even an unchanged object is written again, re-encrypted,
	// as kube-apiserver's storage does (storage.KV.Stale).
	stale bool
}

// readStored reads the object stored under ns/name linearizably and
// returns it decoded and as stored, and whether it is stale.
func (s *Server) readStored(ctx context.Context, res *registry.Resource, ns, name string) (runtime.Object, []byte, bool, error) {
	kv, _, err := s.cfg.Store.Get(ctx, res.Key(ns, name), readLatest)
	if err != nil {
		return nil, nil, false, storageError(err, res, ns, name)
	}
	obj, err := s.decodeStored(ctx, res, kv.Value, kv.ModRevision)
	if err != nil {
		return nil, nil, false, err
	}
	return obj, kv.Value, kv.Stale, nil
}

// updateFrom is one attempt of updateLoop, from cur, the object stored at
// key. retry reports a write that lost a race the loop may retry, or an
// unchanged object that was not read by this attempt (cur.read false),
// which only a read can confirm is still what is stored.
func (s *Server) updateFrom(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, key string, cur current, precondition string, dryRun bool, mutate mutateFunc) (_ runtime.Object, retry bool, _ error) {
	gr := res.GVR.GroupResource()
	old := cur.obj
	oldAcc, _ := meta.Accessor(old)
	if precondition != "" && precondition != oldAcc.GetResourceVersion() {
		return nil, false, apierrors.NewConflict(gr, ref.GetName(), errors.New(conflictMessage))
	}
	obj, err := s.prepareUpdate(ctx, res, ref, old, dryRun, mutate)
	if err != nil {
		return nil, false, err
	}
	if dryRun {
		return obj, false, nil
	}
	modRev, _ := parseRV(oldAcc.GetResourceVersion())
	if finalized(obj) {
		// The last finalizer is gone: the object goes.
		err := s.removeFinalized(ctx, res, ref, modRev)
		if errors.Is(err, storage.ErrConflict) {
			if precondition == "" {
				return nil, true, nil
			}
			return nil, false, apierrors.NewConflict(gr, ref.GetName(), errors.New(conflictMessage))
		}
		if err == nil {
			s.objHints.forget(key)
		}
		return obj, false, err
	}
	data, err := s.encodeStored(ctx, res, obj)
	if err != nil {
		return nil, false, err
	}
	if bytes.Equal(data, cur.stored) && !cur.stale {
		if !cur.read {
			return nil, true, nil
		}
		return old, false, nil
	}
	lease, err := s.leaseFor(ctx, res)
	if err != nil {
		return nil, false, err
	}
	rev, err := s.cfg.Store.Update(ctx, key, data, modRev, lease)
	if errors.Is(err, storage.ErrConflict) && precondition == "" {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, storageError(err, res, ref.GetNamespace(), ref.GetName())
	}
	s.objHints.put(key, data, rev)
	acc, _ := meta.Accessor(obj)
	acc.SetResourceVersion(fmt.Sprint(rev))
	return obj, false, nil
}

// prepareUpdate computes the object an update of old stores, without
// storing it: mutate's result with the metadata the server owns carried
// over from old, the kind's strategy applied, validated, and admitted.
// The result has old's resourceVersion.
func (s *Server) prepareUpdate(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, old runtime.Object, dryRun bool, mutate mutateFunc) (runtime.Object, error) {
	gr := res.GVR.GroupResource()
	oldAcc, _ := meta.Accessor(old)
	obj, err := mutate(old)
	if err != nil {
		return nil, err
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if acc.GetName() != ref.GetName() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", acc.GetName(), ref.GetName()))
	}
	if err := checkNamespace(res, acc, ref.GetNamespace()); err != nil {
		return nil, err
	}
	// Metadata the server owns is carried over; a changed uid is caught
	// by validation.
	if acc.GetUID() == "" {
		acc.SetUID(oldAcc.GetUID())
	}
	acc.SetCreationTimestamp(oldAcc.GetCreationTimestamp())
	acc.SetDeletionTimestamp(oldAcc.GetDeletionTimestamp())
	acc.SetDeletionGracePeriodSeconds(oldAcc.GetDeletionGracePeriodSeconds())
	acc.SetResourceVersion(oldAcc.GetResourceVersion())
	if sub := ref.GetSubresource(); sub != "" {
		ss, ok := res.Strategy.(registry.SubresourceStrategy)
		if !ok || !ss.PrepareForSubresourceUpdate(sub, obj, old) {
			return nil, apierrors.NewNotFound(gr, ref.GetName())
		}
	} else {
		res.Strategy.PrepareForUpdate(obj, old)
	}
	if err := s.guard(ctx, res, ref, obj, old); err != nil {
		return nil, err
	}
	if err := s.admitSchema(ctx, res, obj, old, ref.GetSubresource()); err != nil {
		return nil, err
	}
	if errs := res.Strategy.ValidateUpdate(obj, old); len(errs) > 0 {
		return nil, apierrors.NewInvalid(res.GVK().GroupKind(), acc.GetName(), errs)
	}
	keepManagedFieldsTimes(obj, old)
	if err := s.admit(ctx, res, ref, obj, old, apiv1Update, dryRun); err != nil {
		return nil, err
	}
	return obj, nil
}

// guard runs the configured WriteGuard on a create (old nil) or an update.
func (s *Server) guard(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, obj, old runtime.Object) error {
	if s.cfg.WriteGuard == nil {
		return nil
	}
	return s.cfg.WriteGuard.GuardWrite(ctx, res, ref.GetNamespace(), ref.GetName(), obj, old)
}

// readLatest is a linearizable read.
var readLatest = storage.ReadOptions{}

func parseRV(rv string) (int64, error) {
	var n int64
	_, err := fmt.Sscan(rv, &n)
	return n, err
}
