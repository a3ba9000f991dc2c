package storagemigrate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Targets returns the resources to migrate: those named in list
// (comma-separated group/resource names, "secrets",
// "widgets.example.com"), or, when list is empty, every resource crypt
// configures, the built-in ones in reg's order and then the custom
// resources of the CRDs stored in kv. reg must serve
// CustomResourceDefinitions; its custom resources become those of the
// stored CRDs (registry.Registry.SetCustom).
func Targets(ctx context.Context, kv storev1.KVServiceClient, crypt *storagecrypt.Transformer, reg *registry.Registry, cdc *codec.Codec, list string) ([]*registry.Resource, error) {
	custom, err := CustomResources(ctx, kv, crypt, reg, cdc)
	if err != nil {
		return nil, err
	}
	var all []*registry.Resource
	for _, crd := range custom {
		all = append(all, crd...)
	}
	reg.SetCustom(all)
	if list == "" {
		out := append([]*registry.Resource(nil), crypt.Resources()...)
		for _, crd := range custom {
			// Every version of a CRD shares its store keys: the first
			// (the storage version when it is served) stands for all.
			if crypt.Encrypts(crd[0]) {
				out = append(out, crd[0])
			}
		}
		if len(out) == 0 {
			return nil, errors.New("the encryption configuration names no resource meridian serves")
		}
		return out, nil
	}
	var out []*registry.Resource
	for _, name := range strings.Split(list, ",") {
		gr := schema.ParseGroupResource(strings.TrimSpace(name))
		res := find(reg, gr)
		if res == nil {
			return nil, fmt.Errorf("--resources: %q is not a resource meridian serves", name)
		}
		out = append(out, res)
	}
	return out, nil
}

// CustomResources reads the CustomResourceDefinitions stored in kv
// (decrypted by tr, decoded by cdc) and returns the served resources of
// each established one, CRD by CRD in store key (name) order, each
// CRD's storage version first (registry.CustomResources). reg tells
// where CRDs are stored. A CRD that does not decrypt or decode is an
// error: its objects would be left stale without a word.
func CustomResources(ctx context.Context, kv storev1.KVServiceClient, tr Transformer, reg *registry.Registry, cdc *codec.Codec) ([][]*registry.Resource, error) {
	crds, ok := reg.Lookup(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	if !ok {
		return nil, errors.New("storagemigrate: the registry serves no CustomResourceDefinitions")
	}
	var out [][]*registry.Resource
	err := scan(ctx, kv, crds.KeyPrefix(""), defaultPageSize, func(kvs []*storev1.KeyValue) error {
		for _, kv := range kvs {
			key := string(kv.GetKey())
			plain, _, err := tr.Decrypt(ctx, key, kv.GetValue())
			if err != nil {
				return fmt.Errorf("storagemigrate: read the CRD %s: %w", key, err)
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := cdc.DecodeStorage(plain, kv.GetModRevision(), crd); err != nil {
				return fmt.Errorf("storagemigrate: read the CRD %s: %w", key, err)
			}
			if res := registry.CustomResources(crd); len(res) > 0 {
				out = append(out, res)
			}
		}
		return nil
	})
	return out, err
}

// find is the served resource of gr (any version).
func find(reg *registry.Registry, gr schema.GroupResource) *registry.Resource {
	for _, gv := range reg.GroupVersions() {
		if gv.Group != gr.Group {
			continue
		}
		for _, res := range reg.Resources(gv) {
			if res.GVR.Resource == gr.Resource {
				return res
			}
		}
	}
	return nil
}
