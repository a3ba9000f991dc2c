package rbac

import (
	"github.com/meridian-cp/meridian/lib/identity"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Attributes are what an authorization decision is made on, the fields
// of k8s.io/apiserver's authorizer.Attributes as a value: who asks, the
// verb, and either the resource (group, resource, subresource, namespace,
// name) or the non-resource path.
type Attributes struct {
	// User is who asks.
	User identity.User
	// Verb is the Kubernetes verb (get, list, watch, create, update,
	// patch, delete, deletecollection, impersonate, bind, escalate, ...)
	// of a resource request, the lower-case HTTP method of a non-resource
	// request.
	Verb string
	// ResourceRequest distinguishes resource requests from non-resource
	// ones (discovery, health, /version, /metrics).
	ResourceRequest bool
	// APIGroup, APIVersion, Resource, Subresource, Namespace and Name
	// describe a resource request.
	APIGroup, APIVersion, Resource, Subresource, Namespace, Name string
	// Path is the path of a non-resource request.
	Path string
}

// Record returns a as k8s.io/apiserver's attributes.
func (a Attributes) Record() authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: UserInfo(a.User), Verb: a.Verb, ResourceRequest: a.ResourceRequest,
		APIGroup: a.APIGroup, APIVersion: a.APIVersion, Resource: a.Resource, Subresource: a.Subresource,
		Namespace: a.Namespace, Name: a.Name, Path: a.Path,
	}
}

// FromRecord reads k8s.io/apiserver's attributes.
func FromRecord(a authorizer.Attributes) Attributes {
	var u identity.User
	if info := a.GetUser(); info != nil {
		u = identity.User{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}
	}
	return Attributes{
		User: u, Verb: a.GetVerb(), ResourceRequest: a.IsResourceRequest(),
		APIGroup: a.GetAPIGroup(), APIVersion: a.GetAPIVersion(), Resource: a.GetResource(), Subresource: a.GetSubresource(),
		Namespace: a.GetNamespace(), Name: a.GetName(), Path: a.GetPath(),
	}
}

// UserInfo returns u as k8s.io/apiserver's user.Info.
func UserInfo(u identity.User) user.Info {
	return &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
}
