package storagemigrate_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/storagemigrate"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// establishedCRD is an established CRD of group example.com serving
// v1 (stored) and v2.
func establishedCRD(plural, kind string) *apiextensionsv1.CustomResourceDefinition {
	names := apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: kind, Kind: kind, ListKind: kind + "List"}
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTrue()}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: names, Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schema},
				{Name: "v2", Served: true, Schema: schema},
			},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			AcceptedNames: names,
			Conditions:    []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}},
		},
	}
}

func ptrTrue() *bool { t := true; return &t }

// TestMigrateCustomResources encrypts the objects of a CRD that were
// stored in clear before the configuration named it: the targets of an
// empty --resources are the configured built-in resources and the CRD's
// resource (once, though it serves two versions), not another CRD's;
// after the migration each object is encrypted with the current key and
// decrypts to the bytes it had, and the other CRD's objects are as they
// were.
func TestMigrateCustomResources(t *testing.T) {
	kv := storev1.NewKVServiceClient(startStore(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cdc, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Standard()...)
	cfg, err := storagecrypt.ParseConfig([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n" +
		"resources: [{resources: [secrets, widgets.example.com], providers: [{aescbc: {keys: [" + key1 + "]}}, {identity: {}}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	crypt, err := storagecrypt.New(ctx, cfg, storagecrypt.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, value []byte) {
		t.Helper()
		if _, err := kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: value}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key string) []byte {
		t.Helper()
		r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(key)})
		if err != nil || len(r.GetKvs()) != 1 {
			t.Fatalf("%s: %v %v", key, err, r)
		}
		return r.GetKvs()[0].GetValue()
	}
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{establishedCRD("widgets", "Widget"), establishedCRD("gadgets", "Gadget")} {
		b, err := cdc.EncodeStorage(crd)
		if err != nil {
			t.Fatal(err)
		}
		put("/registry/apiextensions.k8s.io/customresourcedefinitions/"+crd.Name, b)
	}
	const (
		widgetA = "/registry/example.com/widgets/a/one"
		widgetB = "/registry/example.com/widgets/b/two"
		gadget  = "/registry/example.com/gadgets/a/one"
	)
	stored := map[string][]byte{
		widgetA: []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"one","namespace":"a","uid":"u1"},"spec":{"size":3}}`),
		widgetB: []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"two","namespace":"b","uid":"u2"},"spec":{"size":4}}`),
		gadget:  []byte(`{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"one","namespace":"a","uid":"u3"}}`),
	}
	for key, v := range stored {
		put(key, v)
	}

	targets, err := storagemigrate.Targets(ctx, kv, crypt, reg, cdc, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range targets {
		names = append(names, res.GVR.GroupResource().String())
	}
	if len(names) != 2 || names[0] != "secrets" || names[1] != "widgets.example.com" {
		t.Fatalf("targets: %v; want [secrets widgets.example.com]", names)
	}
	if named, err := storagemigrate.Targets(ctx, kv, crypt, reg, cdc, "widgets.example.com"); err != nil || len(named) != 1 || named[0].GVR.Resource != "widgets" {
		t.Fatalf("--resources widgets.example.com: %v, %v", named, err)
	}

	results, err := storagemigrate.Run(ctx, storagemigrate.Config{KV: kv, Transformer: crypt, Resources: targets, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || len(results) != 2 || results[1] != (storagemigrate.Result{Resource: "widgets.example.com", Objects: 2, Stale: 2, Rewritten: 2}) {
		t.Fatalf("migration: %+v, %v", results, err)
	}
	for _, key := range []string{widgetA, widgetB} {
		got := get(key)
		if !bytes.HasPrefix(got, []byte("k8s:enc:aescbc:v1:key1:")) {
			t.Errorf("%s after the migration is not encrypted with key1: %.40q", key, got)
			continue
		}
		plain, stale, err := crypt.Decrypt(ctx, key, got)
		if err != nil || stale || !bytes.Equal(plain, stored[key]) {
			t.Errorf("%s after the migration: %q (stale %t, %v); want %q", key, plain, stale, err, stored[key])
		}
	}
	if got := get(gadget); !bytes.Equal(got, stored[gadget]) {
		t.Errorf("the gadget, of no configured resource, was rewritten: %q", got)
	}
}
