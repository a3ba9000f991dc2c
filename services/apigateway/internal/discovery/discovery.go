// Package discovery serves the API discovery documents kubectl and
// client-go read before anything else: /api, /apis, /api/v1,
// /apis/{group}, /apis/{group}/{version}, and /version.
package discovery

import (
	"net"
	"net/http"
	"strings"

	"github.com/meridian-cp/meridian/lib/buildinfo"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// Version is what /version reports: the Kubernetes API version whose
// types meridian serves, and in gitCommit the meridian build (its
// version and commit, as the linker stamped them in lib/buildinfo).
var Version = version.Info{
	Major: "1", Minor: "37", GitVersion: "v1.37.2-meridian",
	GitCommit: gitCommit(), GitTreeState: "clean", BuildDate: "", GoVersion: "", Compiler: "gc", Platform: "linux/amd64",
}

// gitCommit is /version's gitCommit: "<version>" or "<version>+<commit>"
// when both were stamped; empty for an unstamped (development) build.
func gitCommit() string {
	switch {
	case buildinfo.Version == "dev":
		return buildinfo.Commit
	case buildinfo.Commit == "":
		return buildinfo.Version
	default:
		return buildinfo.Version + "+" + buildinfo.Commit
	}
}

// Documents computes discovery documents from a registry.
type Documents struct {
	reg *registry.Registry
}

// New returns the discovery documents of reg.
func New(reg *registry.Registry) *Documents { return &Documents{reg: reg} }

// Lookup returns the discovery document for path, or ok=false when path is
// not a discovery path (or names a group or version not served).
func (d *Documents) Lookup(path string, r *http.Request) (runtime.Object, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/api" || path == "/api/":
		return &metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{
				ClientCIDR: "0.0.0.0/0", ServerAddress: serverAddress(r),
			}},
		}, true
	case path == "/apis" || path == "/apis/":
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
		for _, g := range d.groups() {
			list.Groups = append(list.Groups, g)
		}
		return list, true
	case len(parts) == 2 && parts[0] == "api":
		return d.resourceList(schema.GroupVersion{Version: parts[1]})
	case len(parts) == 2 && parts[0] == "apis":
		for _, g := range d.groups() {
			if g.Name == parts[1] {
				g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
				return &g, true
			}
		}
	case len(parts) == 3 && parts[0] == "apis":
		return d.resourceList(schema.GroupVersion{Group: parts[1], Version: parts[2]})
	}
	return nil, false
}

func (d *Documents) resourceList(gv schema.GroupVersion) (runtime.Object, bool) {
	resources := d.reg.Resources(gv)
	own := servedIn(gv)
	if len(resources) == 0 && len(own) == 0 {
		return nil, false
	}
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, r := range resources {
		list.APIResources = append(list.APIResources, r.APIResource())
		for _, sub := range r.Subresources {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.GVR.Resource + "/" + sub, Namespaced: r.Namespaced, Kind: r.Kind, Verbs: []string{"get", "patch", "update"},
			})
		}
	}
	list.APIResources = append(list.APIResources, own...)
	return list, true
}

// groups lists the named (non-core) groups.
func (d *Documents) groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	index := map[string]int{}
	for _, gv := range d.groupVersions() {
		if gv.Group == "" {
			continue
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		i, ok := index[gv.Group]
		if !ok {
			index[gv.Group] = len(out)
			out = append(out, metav1.APIGroup{Name: gv.Group, PreferredVersion: v})
			i = len(out) - 1
		}
		out[i].Versions = append(out[i].Versions, v)
	}
	return out
}

func serverAddress(r *http.Request) string {
	if r == nil || r.Host == "" {
		return ""
	}
	if _, _, err := net.SplitHostPort(r.Host); err == nil {
		return r.Host
	}
	return net.JoinHostPort(r.Host, "443")
}
