package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// tokenRequestKind is the kind TokenRequest errors name.
var tokenRequestKind = authenticationv1.SchemeGroupVersion.WithKind("TokenRequest").GroupKind()

// Request serves a TokenRequest for the service account namespace/name
// (POST .../serviceaccounts/{name}/token), as kube-apiserver's token
// subresource does: it validates and defaults req.Spec (expiration 1h by
// default, at least 10 minutes, at most the configured maximum; the API's
// audiences when none are named), reads the service account and the
// bound object as they are now, and fills req.Status with a signed token.
// Errors are Kubernetes API errors: 404 for a service account or bound
// object that does not exist, 409 for a bound object whose UID differs,
// 422 for an invalid spec. Nothing is stored.
func (t *Tokens) Request(ctx context.Context, namespace, name string, req *authenticationv1.TokenRequest) error {
	ks := t.keys.current()
	if ks.signer == nil {
		return apierrors.NewServiceUnavailable("no service account signing key is configured (--service-account-signing-key-file)")
	}
	if req.Name != "" && req.Name != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", req.Name, name))
	}
	if req.Namespace != "" && req.Namespace != namespace {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the URL (%s)", req.Namespace, namespace))
	}
	req.Name, req.Namespace = name, namespace
	if req.Spec.ExpirationSeconds == nil {
		d := int64(DefaultExpiration / time.Second)
		req.Spec.ExpirationSeconds = &d
	}
	if errs := validateSpec(req.Spec); len(errs) > 0 {
		return apierrors.NewInvalid(tokenRequestKind, name, errs)
	}
	if max := int64(t.cfg.MaxExpiration / time.Second); max > 0 && *req.Spec.ExpirationSeconds > max {
		*req.Spec.ExpirationSeconds = max
	}
	if len(req.Spec.Audiences) == 0 {
		req.Spec.Audiences = append([]string(nil), t.cfg.APIAudiences...)
	}

	sa := &corev1.ServiceAccount{}
	if err := t.get(ctx, "serviceaccounts", namespace, name, sa); err != nil {
		return err
	}
	k := kubernetesClaims{Namespace: namespace, ServiceAccount: ref{Name: name, UID: string(sa.UID)}}
	if b := req.Spec.BoundObjectRef; b != nil {
		if err := t.bind(ctx, namespace, b, &k); err != nil {
			return err
		}
	}

	now := t.cfg.Now()
	exp := now.Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second)
	claims := jwt.Claims{
		Issuer: t.cfg.Issuer, Subject: UserName(namespace, name), Audience: jwt.Audience(req.Spec.Audiences),
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(exp),
		ID: uuid.NewString(),
	}
	token, err := jwt.Signed(ks.signer).Claims(claims).Claims(privateClaims{Kubernetes: k}).Serialize()
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("serviceaccount: signing a token: %w", err))
	}
	req.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(exp.Truncate(time.Second))}
	req.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
	return nil
}

// validateSpec checks a TokenRequest's spec as kube-apiserver's
// validation does.
func validateSpec(spec authenticationv1.TokenRequestSpec) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "expirationSeconds")
	switch s := *spec.ExpirationSeconds; {
	case s < int64(MinExpiration/time.Second):
		errs = append(errs, field.Invalid(p, s, "may not specify a duration less than 10 minutes"))
	case s > maxExpirationSeconds:
		errs = append(errs, field.Invalid(p, s, "may not specify a duration larger than 2^32 seconds"))
	}
	if b := spec.BoundObjectRef; b != nil {
		bp := field.NewPath("spec", "boundObjectRef")
		if b.Name == "" {
			errs = append(errs, field.Required(bp.Child("name"), "the name of the bound object is required"))
		}
	}
	return errs
}

// bind checks the object a token is to be bound to (a Pod, Secret or Node
// of apiVersion v1) and adds it to the claims; a Pod's node is added too,
// as kube-apiserver adds it.
func (t *Tokens) bind(ctx context.Context, namespace string, b *authenticationv1.BoundObjectReference, k *kubernetesClaims) error {
	gv, err := schema.ParseGroupVersion(b.APIVersion)
	if err != nil || gv != corev1.SchemeGroupVersion {
		return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s, %s", b.APIVersion, b.Kind))
	}
	var obj metav1.Object
	switch b.Kind {
	case kindPod:
		pod := &corev1.Pod{}
		if err := t.get(ctx, "pods", namespace, b.Name, pod); err != nil {
			return err
		}
		obj, k.Pod = pod, &ref{Name: pod.Name, UID: string(pod.UID)}
		if n := pod.Spec.NodeName; n != "" {
			node := &corev1.Node{}
			if err := t.get(ctx, "nodes", "", n, node); err == nil {
				k.Node = &ref{Name: n, UID: string(node.UID)}
			} else if !apierrors.IsNotFound(err) {
				return err
			}
		}
	case kindSecret:
		secret := &corev1.Secret{}
		if err := t.get(ctx, "secrets", namespace, b.Name, secret); err != nil {
			return err
		}
		obj, k.Secret = secret, &ref{Name: secret.Name, UID: string(secret.UID)}
	case kindNode:
		node := &corev1.Node{}
		if err := t.get(ctx, "nodes", "", b.Name, node); err != nil {
			return err
		}
		obj, k.Node = node, &ref{Name: node.Name, UID: string(node.UID)}
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s, %s", b.APIVersion, b.Kind))
	}
	if b.UID != "" && b.UID != obj.GetUID() {
		return apierrors.NewConflict(schema.GroupResource{Group: gv.Group, Resource: b.Kind}, b.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", b.UID))
	}
	b.UID = obj.GetUID()
	return nil
}

// get reads the object resource namespace/name into into, linearizably;
// a missing one is kube-apiserver's 404.
func (t *Tokens) get(ctx context.Context, resource, namespace, name string, into runtime.Object) error {
	gr := schema.GroupResource{Resource: resource}
	res, ok := t.cfg.Registry.Lookup(corev1.SchemeGroupVersion.WithResource(resource))
	if !ok {
		return apierrors.NewNotFound(gr, name)
	}
	kv, _, err := t.cfg.Store.Get(ctx, res.Key(namespace, name), storage.ReadOptions{})
	if errors.Is(err, storage.ErrNotFound) {
		return apierrors.NewNotFound(gr, name)
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("serviceaccount: reading %s %s/%s: %w", resource, namespace, name, err))
	}
	if err := t.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, into); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}
