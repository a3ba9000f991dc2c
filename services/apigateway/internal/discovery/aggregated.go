package discovery

import (
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AggregatedMediaType is the Content-Type of aggregated discovery
// documents.
const AggregatedMediaType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// Aggregated returns the aggregated discovery document of /api (core:
// true; one item, the unnamed core group) or /apis (every named group): all
// groups, versions and resources in one response.
func (d *Documents) Aggregated(core bool) *apidiscoveryv2.APIGroupDiscoveryList {
	list := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	index := map[string]int{}
	for _, gv := range d.groupVersions() {
		if (gv.Group == "") != core {
			continue
		}
		i, ok := index[gv.Group]
		if !ok {
			list.Items = append(list.Items, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: gv.Group}})
			i = len(list.Items) - 1
			index[gv.Group] = i
		}
		v := apidiscoveryv2.APIVersionDiscovery{Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		for _, r := range d.reg.Resources(gv) {
			v.Resources = append(v.Resources, resourceDiscovery(r))
		}
		addServed(&v, gv)
		list.Items[i].Versions = append(list.Items[i].Versions, v)
	}
	return list
}

func resourceDiscovery(r *registry.Resource) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if r.Namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	gvk := r.GVK()
	out := apidiscoveryv2.APIResourceDiscovery{
		Resource:         r.GVR.Resource,
		ResponseKind:     &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Scope:            scope,
		SingularResource: r.SingularName,
		Verbs:            r.Verbs,
		ShortNames:       r.ShortNames,
		Categories:       r.Categories,
	}
	for _, sub := range r.Subresources {
		out.Subresources = append(out.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  sub,
			ResponseKind: &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
			Verbs:        []string{"get", "patch", "update"},
		})
	}
	return out
}
