package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
)

// frame is one JSON watch event as it is on the wire.
type frame struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// meta returns the namespace, name and resourceVersion of the frame's
// object.
func (f frame) meta(t testing.TB) (ns, name, rv string) {
	t.Helper()
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(f.Object, &obj); err != nil {
		t.Fatalf("%s event: %v in %s", f.Type, err, f.Object)
	}
	return obj.Metadata.Namespace, obj.Metadata.Name, obj.Metadata.ResourceVersion
}

// readFrames decodes the JSON watch events of r onto the returned channel,
// closed when r ends or fails, or ctx is done; r is closed then.
func readFrames(ctx context.Context, r io.ReadCloser) <-chan frame {
	ch := make(chan frame, 1024)
	stop := context.AfterFunc(ctx, func() { r.Close() })
	go func() {
		defer close(ch)
		defer stop()
		defer r.Close()
		dec := json.NewDecoder(r)
		for {
			var f frame
			if err := dec.Decode(&f); err != nil {
				return
			}
			select {
			case ch <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// nextFrame returns the next event of ch, failing when the watch ends or
// none comes within 20s.
func nextFrame(t testing.TB, ch <-chan frame) frame {
	t.Helper()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return f
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20s")
	}
	return frame{}
}

// httpWatch opens a watch over HTTP, as the admin, in JSON: path is the
// collection's path with its query.
func (e *env) httpWatch(ctx context.Context, t testing.TB, path string) <-chan frame {
	t.Helper()
	rt, err := rest.TransportFor(e.config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.config.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s %s", path, resp.Status, body)
	}
	return readFrames(ctx, resp.Body)
}

// grpcAPI returns a client of the control plane's gRPC ResourceService
// (the env needs GRPCListen), as the admin.
func (e *env) grpcAPI() apiv1.ResourceServiceClient {
	e.t.Helper()
	return resourceClient(e.t, e.dataDir, e.cp.GRPCAddr.String())
}

// grpcWatch opens a watch through the gRPC API; its request asks for JSON.
func grpcWatch(ctx context.Context, api apiv1.ResourceServiceClient, req *apiv1.WatchRequest) (<-chan frame, error) {
	req.Accept = "application/json"
	ws, err := api.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		for {
			msg, err := ws.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(msg.GetData()); err != nil {
				return
			}
		}
	}()
	return readFrames(ctx, pr), nil
}

// TestNamespacedWatchReplaysItsNamespaceOnly: a watch of one namespace
// from a resourceVersion in the history replays that namespace's changes
// and never another's, for ConfigMaps and Secrets, over HTTP and the gRPC
// API, served by watchfanout and by the store (watchfanout disabled, as
// when it is down): no other namespace's objects, Secrets' data included,
// reach a namespaced watch.
func TestNamespacedWatchReplaysItsNamespaceOnly(t *testing.T) {
	eachWatchServer(t, func(t *testing.T, _ int, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		api := e.grpcAPI()
		for _, resource := range []string{"configmaps", "secrets"} {
			// a in default, then one elsewhere, then b in default: a
			// watch of default from before a replays a and b, nothing
			// between them.
			create := func(ns, name string) string {
				t.Helper()
				var rv string
				var err error
				if resource == "configmaps" {
					var cm *corev1.ConfigMap
					cm, err = e.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": ns}}, metav1.CreateOptions{})
					if err == nil {
						rv = cm.ResourceVersion
					}
				} else {
					var s *corev1.Secret
					s, err = e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"password": []byte(ns)}}, metav1.CreateOptions{})
					if err == nil {
						rv = s.ResourceVersion
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				return rv
			}
			a := create("default", "a")
			create("elsewhere", "leak")
			create("default", "b")
			n, _ := strconv.ParseInt(a, 10, 64)
			from := strconv.FormatInt(n-1, 10)
			expect := func(t *testing.T, ch <-chan frame) {
				t.Helper()
				for _, name := range []string{"a", "b"} {
					f := nextFrame(t, ch)
					if ns, got, rv := f.meta(t); f.Type != "ADDED" || ns != "default" || got != name {
						t.Fatalf("got %s %s/%s (rv %s), want ADDED default/%s", f.Type, ns, got, rv, name)
					}
				}
			}
			t.Run(resource+" over HTTP", func(t *testing.T) {
				wctx, stop := context.WithCancel(ctx)
				defer stop()
				expect(t, e.httpWatch(wctx, t, fmt.Sprintf("/api/v1/namespaces/default/%s?watch=1&resourceVersion=%s", resource, from)))
			})
			t.Run(resource+" over the gRPC API", func(t *testing.T) {
				wctx, stop := context.WithCancel(ctx)
				defer stop()
				ch, err := grpcWatch(wctx, api, &apiv1.WatchRequest{
					Ref:             &apiv1.ResourceRef{Version: "v1", Resource: resource, Namespace: "default"},
					ResourceVersion: from,
				})
				if err != nil {
					t.Fatal(err)
				}
				expect(t, ch)
			})
		}
	})
}
