package authz

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Attributes are what an authorization decision is made on
// (lib/kube/rbac).
type Attributes = rbac.Attributes

// FromRequest returns the attributes of a REST request as kube-apiserver
// derives them: a namespace's own requests (/api/v1/namespaces/{name} and
// its subresources) are in that namespace, and a list or watch whose field
// selector names one object (metadata.name=x, as `kubectl get cm x -w`
// sends) is about that object, so that rules with resourceNames apply.
//
// rawQuery is the request's query, parsed only for a list or watch of a
// collection.
func FromRequest(u identity.User, info requestinfo.Info, rawQuery string) Attributes {
	a := Attributes{User: u, Verb: info.Verb, Path: info.Path}
	if !info.IsResourceRequest {
		return a
	}
	a.ResourceRequest = true
	a.APIGroup, a.APIVersion, a.Resource, a.Subresource = info.APIGroup, info.APIVersion, info.Resource, info.Subresource
	a.Namespace, a.Name = info.Namespace, info.Name
	inNamespaceItself(&a)
	if a.Name == "" && rawQuery != "" && (a.Verb == "list" || a.Verb == "watch") {
		query, _ := url.ParseQuery(rawQuery)
		a.Name = selectedName(query.Get("fieldSelector"))
	}
	return a
}

// selectedName is the object a field selector names with
// metadata.name=x (or ==), or "".
func selectedName(fieldSelector string) string {
	if fieldSelector == "" {
		return ""
	}
	sel, err := fields.ParseSelector(fieldSelector)
	if err != nil {
		return ""
	}
	if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(path.IsValidPathSegmentName(name)) == 0 {
		return name
	}
	return ""
}

// ForResource returns the attributes of a request on a resource made
// other than through REST (the gRPC API): verb on group/resource
// [/subresource] named name in namespace. fieldSelector is the list or watch's field selector, whose
// metadata.name=x makes the request one about x, as FromRequest's.
func ForResource(u identity.User, verb, group, version, resource, subresource, namespace, name, fieldSelector string) Attributes {
	a := Attributes{User: u, Verb: verb, ResourceRequest: true, APIGroup: group, APIVersion: version,
		Resource: resource, Subresource: subresource, Namespace: namespace, Name: name}
	inNamespaceItself(&a)
	if a.Name == "" && (verb == "list" || verb == "watch") {
		a.Name = selectedName(fieldSelector)
	}
	return a
}

// inNamespaceItself puts a request on a namespace object in that
// namespace, as kube-apiserver's request info does: a Role granting "get
// namespaces" in namespace x lets its subjects read namespace x.
func inNamespaceItself(a *Attributes) {
	if a.APIGroup == "" && a.Resource == "namespaces" && a.Name != "" {
		a.Namespace = a.Name
	}
}

// Forbidden is kube-apiserver's 403 for a request its authorizer did not
// allow, word for word:
//
//	configmaps is forbidden: User "x" cannot list resource "configmaps" in API group "" in the namespace "y"
//	namespaces "y" is forbidden: User "x" cannot delete resource "namespaces" in API group "" in the namespace "y"
//	clusterroles.rbac.authorization.k8s.io is forbidden: User "x" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope
//	forbidden: User "x" cannot get path "/metrics"
//
// reason, when not empty, follows after ": " (resolution errors, such as a
// binding whose role does not exist). As kube-apiserver does, &, < and >
// of the description are escaped, so that no name a client chose can put
// markup in the message.
func Forbidden(a Attributes, reason string) *apierrors.StatusError {
	msg := sanitizer.Replace(forbiddenMessage(a))
	if reason != "" {
		msg += ": " + reason
	}
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	return apierrors.NewForbidden(gr, a.Name, forbiddenReason(msg))
}

var sanitizer = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;")

// forbiddenReason is an error whose message is exactly its text (a
// fmt.Errorf would read % in names as verbs).
type forbiddenReason string

func (r forbiddenReason) Error() string { return string(r) }

func forbiddenMessage(a Attributes) string {
	if !a.ResourceRequest {
		return fmt.Sprintf("User %q cannot %s path %q", a.User.Name, a.Verb, a.Path)
	}
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	if a.Namespace != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", a.User.Name, a.Verb, resource, a.APIGroup, a.Namespace)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", a.User.Name, a.Verb, resource, a.APIGroup)
}
