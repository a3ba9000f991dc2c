package discovery

import (
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// servedResource is an endpoint the gateway serves itself, outside the
// registry's stored kinds, and lists in discovery as kube-apiserver does:
// the create-only reviews, and the serviceaccounts/token subresource
// (TokenRequest). A Name with a "/" is a subresource.
type servedResource struct {
	gv  schema.GroupVersion
	res metav1.APIResource
}

var create = []string{"create"}

// served are the gateway's own endpoints, by group version.
var served = []servedResource{
	{corev1.SchemeGroupVersion, metav1.APIResource{Name: "serviceaccounts/token", Namespaced: true,
		Group: authenticationv1.GroupName, Version: "v1", Kind: "TokenRequest", Verbs: create}},
	{authenticationv1.SchemeGroupVersion, metav1.APIResource{Name: "selfsubjectreviews", Kind: "SelfSubjectReview", Verbs: create}},
	{authenticationv1.SchemeGroupVersion, metav1.APIResource{Name: "tokenreviews", Kind: "TokenReview", Verbs: create}},
	{authorizationv1.SchemeGroupVersion, metav1.APIResource{Name: "localsubjectaccessreviews", Namespaced: true, Kind: "LocalSubjectAccessReview", Verbs: create}},
	{authorizationv1.SchemeGroupVersion, metav1.APIResource{Name: "selfsubjectaccessreviews", Kind: "SelfSubjectAccessReview", Verbs: create}},
	{authorizationv1.SchemeGroupVersion, metav1.APIResource{Name: "selfsubjectrulesreviews", Kind: "SelfSubjectRulesReview", Verbs: create}},
	{authorizationv1.SchemeGroupVersion, metav1.APIResource{Name: "subjectaccessreviews", Kind: "SubjectAccessReview", Verbs: create}},
}

// groupVersions are the registry's group versions and those of the
// gateway's own endpoints, each once, the registry's first.
func (d *Documents) groupVersions() []schema.GroupVersion {
	gvs := d.reg.GroupVersions()
	for _, s := range served {
		if !slices.Contains(gvs, s.gv) {
			gvs = append(gvs, s.gv)
		}
	}
	return gvs
}

// servedIn returns the gateway's own endpoints of gv.
func servedIn(gv schema.GroupVersion) []metav1.APIResource {
	var out []metav1.APIResource
	for _, s := range served {
		if s.gv == gv {
			out = append(out, s.res)
		}
	}
	return out
}

// addServed adds the gateway's own endpoints of gv to an aggregated
// version: resources as resources, subresources to their resource.
func addServed(v *apidiscoveryv2.APIVersionDiscovery, gv schema.GroupVersion) {
	for _, r := range servedIn(gv) {
		parent, sub, isSub := strings.Cut(r.Name, "/")
		kind := &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
		if kind.Version == "" {
			kind.Group, kind.Version = gv.Group, gv.Version
		}
		if !isSub {
			scope := apidiscoveryv2.ScopeCluster
			if r.Namespaced {
				scope = apidiscoveryv2.ScopeNamespace
			}
			v.Resources = append(v.Resources, apidiscoveryv2.APIResourceDiscovery{Resource: r.Name, ResponseKind: kind, Scope: scope, Verbs: r.Verbs})
			continue
		}
		for i := range v.Resources {
			if v.Resources[i].Resource == parent {
				v.Resources[i].Subresources = append(v.Resources[i].Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: sub, ResponseKind: kind, Verbs: r.Verbs})
			}
		}
	}
}
