// Package requestinfo works out what a Kubernetes API request addresses —
// verb, group, version, resource, namespace, name, subresource — from its
// method, path and query, with the same grammar kube-apiserver uses:
//
//	/api/v1/namespaces                                    core, cluster-scoped collection
//	/api/v1/namespaces/{name}[/status|/finalize]          a namespace (and its subresources)
//	/api/v1/namespaces/{ns}/{resource}[/{name}[/{sub}]]   namespaced
//	/apis/{group}/{version}/{resource}[/{name}[/{sub}]]   cluster-scoped or all namespaces
//	/api/v1/watch/...                                     deprecated watch paths
//
// A GET on a collection is "list", or "watch" with ?watch=1|true; a DELETE on
// a collection is "deletecollection".
package requestinfo

import (
	"net/http"
	"net/url"
	"strings"
)

// Info is what a request addresses.
type Info struct {
	// IsResourceRequest is false for /version, /healthz, discovery and other
	// non-resource paths.
	IsResourceRequest bool
	// Path is the request path.
	Path string
	// Verb is get, list, watch, create, update, patch, delete or
	// deletecollection for resource requests; the lower-case HTTP method
	// otherwise.
	Verb string
	// APIPrefix is "api" or "apis".
	APIPrefix string
	// APIGroup is the group; empty for core.
	APIGroup string
	// APIVersion is the version.
	APIVersion string
	// Namespace is the namespace, when the path names one.
	Namespace string
	// Resource is the plural resource name.
	Resource string
	// Subresource is e.g. "status".
	Subresource string
	// Name is the object name.
	Name string
	// Parts are the path segments after the version (or after the group
	// for discovery paths).
	Parts []string
}

// namespaceSubresources are the subresources of namespaces, which the path
// grammar would otherwise read as a resource inside the namespace.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// New resolves a request. It never fails: a path that is not a resource
// path yields IsResourceRequest=false.
func New(method string, u *url.URL) Info {
	info := Info{Path: u.Path, Verb: strings.ToLower(method)}
	parts := splitPath(u.Path)
	if len(parts) < 2 || (parts[0] != "api" && parts[0] != "apis") {
		return info
	}
	info.APIPrefix = parts[0]
	parts = parts[1:]
	if info.APIPrefix == "apis" {
		info.APIGroup = parts[0]
		parts = parts[1:]
		if len(parts) == 0 {
			info.Parts = []string{}
			return info // /apis/{group}: discovery
		}
	}
	info.APIVersion = parts[0]
	parts = parts[1:]
	if len(parts) == 0 {
		return info // /api/v1 or /apis/{g}/{v}: discovery
	}
	info.IsResourceRequest = true

	switch method {
	case http.MethodPost:
		info.Verb = "create"
	case http.MethodGet, http.MethodHead:
		info.Verb = "get"
	case http.MethodPut:
		info.Verb = "update"
	case http.MethodPatch:
		info.Verb = "patch"
	case http.MethodDelete:
		info.Verb = "delete"
	default:
		info.Verb = ""
	}
	if parts[0] == "watch" { // deprecated /watch/ paths
		info.Verb = "watch"
		parts = parts[1:]
		if len(parts) == 0 {
			info.IsResourceRequest = false
			return info
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		info.Namespace = parts[1]
		if len(parts) > 2 && !namespaceSubresources[parts[2]] {
			parts = parts[2:]
		}
	}
	info.Parts = parts
	switch {
	case len(parts) >= 3:
		info.Subresource = parts[2]
		fallthrough
	case len(parts) == 2:
		info.Name = parts[1]
		fallthrough
	case len(parts) == 1:
		info.Resource = parts[0]
	}
	if info.Resource == "namespaces" && info.Name != "" {
		// /api/v1/namespaces/{name}: the namespace is the object itself.
		info.Namespace = ""
	}
	if info.Name == "" {
		switch info.Verb {
		case "get":
			info.Verb = "list"
			if isTrue(u.Query().Get("watch")) {
				info.Verb = "watch"
			}
		case "delete":
			info.Verb = "deletecollection"
		}
	} else if info.Verb == "get" && isTrue(u.Query().Get("watch")) {
		info.Verb = "watch"
	}
	return info
}

func isTrue(v string) bool { return v == "1" || strings.EqualFold(v, "true") }

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
