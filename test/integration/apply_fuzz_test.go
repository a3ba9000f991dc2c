package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/pki"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// patchKinds are the patch media types the fuzz target chooses from.
var patchKinds = []string{
	"application/apply-patch+yaml",
	"application/merge-patch+json",
	"application/strategic-merge-patch+json",
	"application/json-patch+json",
}

var fieldValidations = []string{"", "Strict", "Warn", "Ignore"}

// Flags of a fuzz input.
const (
	fuzzManager = 1 << iota // send fieldManager "fuzz"
	fuzzForce               // send force=true
	fuzzDryRun              // dryRun=All
	fuzzFresh               // target a fresh name; "NAME" in the body becomes it
)

// FuzzPatchAndApply sends random patches and applied configurations through
// the gRPC ResourceService of a real control plane (raft store, admission,
// everything in-process) and checks that none is answered with a 500 (or
// any other server-fault code), and that a refused or dry-run request
// leaves the stored object exactly as it was. The seeds run in every
// `go test`; `go test -fuzz FuzzPatchAndApply ./test/integration` explores.
func FuzzPatchAndApply(f *testing.F) {
	client := fuzzClient(f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seed := &apiv1.PatchRequest{
		Ref:          &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "fz"},
		Body:         &httpbody.HttpBody{ContentType: patchKinds[0], Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fz\n  labels: {a: b}\ndata:\n  k: v\n")},
		FieldManager: "seed",
	}
	if _, err := client.Patch(ctx, seed); err != nil {
		f.Fatal(err)
	}

	apply := uint8(0)
	merge, smp, jsonPatch := uint8(1), uint8(2), uint8(3)
	for _, s := range []struct {
		kind  uint8
		flags uint8
		body  string
	}{
		{apply, fuzzManager, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fz\ndata:\n  k: w\n"},
		{apply, fuzzManager | fuzzForce, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fz\ndata:\n  k: w\n"},
		{apply, fuzzManager | fuzzFresh, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"NAME","finalizers":["a","a"],"ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"u"}]},"data":{"a":"b"}}`},
		{apply, fuzzManager | fuzzFresh | fuzzDryRun, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"NAME"}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","managedFields":[{"manager":"x"}]}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","resourceVersion":"1"}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","ownerReferences":[{"name":"o"}]}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","namespace":"kube-system"}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz","uid":"other","creationTimestamp":"x"}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz"},"data":{"k":1},"binaryData":{"b":"!!"}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fz"},"data":{"bad key":"v"}}`},
		{apply, fuzzManager, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"fz"}}`},
		{apply, fuzzManager, `{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"fz"}}`},
		{apply, fuzzManager, `{"apiVersion":1,"kind":[],"metadata":"x"}`},
		{apply, fuzzManager, `{"metadata":{"name":"fz","labels":{"a":null}}}`},
		{apply, fuzzManager, "a: &a [*a, *a]\n"},
		{apply, fuzzManager, "- 1\n"},
		{apply, fuzzManager, "null"},
		{apply, fuzzManager, "{"},
		{apply, fuzzManager, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fz}\ndata: {k: a, k: b}\n"},
		{apply, 0, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fz\n"},
		{merge, fuzzManager, `{"data":{"m":"1"}}`},
		{merge, fuzzForce, `{"data":{"m":"2"}}`},
		{merge, 0, `{"metadata":{"managedFields":[{}]}}`},
		{merge, 0, `{"metadata":{"managedFields":[{"manager":"x","operation":"Bogus","fieldsType":"FieldsV2"}]}}`},
		{merge, 0, `{"metadata":{"managedFields":"x"}}`},
		{smp, fuzzManager, `{"metadata":{"ownerReferences":[{"uid":"u","$patch":"delete"}]},"data":{"s":"1"}}`},
		{smp, 0, `{"$patch":"replace"}`},
		{jsonPatch, 0, `[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]`},
		{jsonPatch, 0, `[{"op":"add","path":"/metadata/managedFields/-","value":{"manager":"m","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}}]`},
		{jsonPatch, 0, `[{"op":"add","path":"/metadata/managedFields/0/fieldsV1","value":{"f:data":{"x":1}}}]`},
		{jsonPatch, 0, `[{"op":"remove","path":"/metadata/name"}]`},
	} {
		f.Add(s.kind, s.flags, []byte(s.body))
	}

	var fresh atomic.Int64
	f.Fuzz(func(t *testing.T, kind, flags uint8, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		name := "fz"
		if flags&fuzzFresh != 0 {
			name = fmt.Sprintf("fz-%d-%d", time.Now().UnixNano()%1e6, fresh.Add(1))
			body = bytes.ReplaceAll(body, []byte("NAME"), []byte(name))
		}
		ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: name}
		req := &apiv1.PatchRequest{
			Ref:             ref,
			Body:            &httpbody.HttpBody{ContentType: patchKinds[int(kind)%len(patchKinds)], Data: body},
			FieldValidation: fieldValidations[int(flags>>4)%len(fieldValidations)],
			Accept:          "application/json",
		}
		if flags&fuzzManager != 0 {
			req.FieldManager = "fuzz"
		}
		if flags&fuzzForce != 0 {
			force := true
			req.Force = &force
		}
		dryRun := flags&fuzzDryRun != 0
		if dryRun {
			req.DryRun = []string{"All"}
		}
		before, beforeErr := client.Get(ctx, &apiv1.GetRequest{Ref: ref, Accept: "application/json"})
		_, err := client.Patch(ctx, req)
		after, afterErr := client.Get(ctx, &apiv1.GetRequest{Ref: ref, Accept: "application/json"})
		if err != nil {
			switch status.Code(err) {
			case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unavailable:
				t.Fatalf("%s %q: server fault: %v", req.Body.ContentType, body, err)
			}
		}
		if err != nil || dryRun {
			if status.Code(beforeErr) != status.Code(afterErr) || !bytes.Equal(before.GetData(), after.GetData()) {
				t.Fatalf("%s %q (dryRun %v) failed with %v but changed the object:\n%s\n→\n%s", req.Body.ContentType, body, dryRun, err, before.GetData(), after.GetData())
			}
		}
	})
}

// fuzzClient starts a control plane for f and returns a client of its gRPC
// ResourceService, as the admin.
func fuzzClient(f *testing.F) apiv1.ResourceServiceClient {
	dir := f.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cp, err := allinone.Start(ctx, allinone.Config{DataDir: dir, Listen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = cp.Close() })
	return resourceClient(f, dir, cp.GRPCAddr.String())
}

// resourceClient returns a client of the gRPC ResourceService at addr of
// the control plane in dataDir, as the admin.
func resourceClient(tb testing.TB, dataDir, addr string) apiv1.ResourceServiceClient {
	tb.Helper()
	pool, err := pki.LoadPool(filepath.Join(dataDir, "pki", "api-ca.crt"))
	if err != nil {
		tb.Fatal(err)
	}
	admin, err := tls.LoadX509KeyPair(filepath.Join(dataDir, "pki", "admin.crt"), filepath.Join(dataDir, "pki", "admin.key"))
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(&admin, pool, "127.0.0.1"))))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return apiv1.NewResourceServiceClient(conn)
}
