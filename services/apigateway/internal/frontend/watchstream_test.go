package frontend

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
)

// scriptedWatches is a ResourceService whose watches play the script
// their label selector names, as the ResourceService's watches do: an
// empty first message with the stream's media type, then frames, ended
// quietly or by an error.
type scriptedWatches struct {
	recordingService
}

const (
	jsonStream     = "application/json"
	protobufStream = "application/vnd.kubernetes.protobuf;stream=watch"
	// initialEvents is two ADDED events and the bookmark that ends initial
	// events, sent in one message as the gateway sends them.
	initialEvents = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"demo","resourceVersion":"3"}}}` + "\n" +
		`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","namespace":"demo","resourceVersion":"4"}}}` + "\n" +
		`{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"4","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n"
	bookmark = `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9"}}}` + "\n"
)

// protobufFrames are two length-prefixed frames holding the bytes a JSON
// stream never does (NUL, newline, 0xff).
var protobufFrames = []byte{0, 0, 0, 4, 'k', '8', 's', 0, 0, 0, 0, 3, '\n', 0xff, 0}

func (s *scriptedWatches) Watch(req *apiv1.WatchRequest, stream apiv1.ResourceService_WatchServer) error {
	send := func(ct string, data []byte) error {
		return stream.Send(&httpbody.HttpBody{ContentType: ct, Data: data})
	}
	switch req.GetLabelSelector() {
	case "script=json":
		if err := grpc.SetHeader(stream.Context(), metadata.Pairs("warning", `299 - "deprecated"`, "x-dropped", "no")); err != nil {
			return err
		}
		for _, data := range [][]byte{nil, []byte(initialEvents), []byte(bookmark)} {
			if err := send(jsonStream, data); err != nil {
				return err
			}
		}
		return nil
	case "script=protobuf":
		for _, data := range [][]byte{nil, protobufFrames[:8], protobufFrames[8:]} {
			if err := send(protobufStream, data); err != nil {
				return err
			}
		}
		return nil
	case "script=expired":
		return apistatus.ToGRPC(apierrors.NewResourceExpired("too old resource version: 2 (40)"))
	case "script=throttled":
		return apistatus.ToGRPC(apierrors.NewTooManyRequests("try again later", 7))
	case "script=cut":
		if err := send(jsonStream, nil); err != nil {
			return err
		}
		if err := send(jsonStream, []byte(bookmark)); err != nil {
			return err
		}
		return apistatus.ToGRPC(apierrors.NewInternalError(io.ErrUnexpectedEOF))
	case "script=invalid":
		return apistatus.ToGRPC(apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "", nil))
	}
	return apistatus.ToGRPC(apierrors.NewBadRequest("no script " + req.GetLabelSelector()))
}

// watchResponse is what a client sees of a watch: the parts of the
// response the ResourceService decides.
type watchResponse struct {
	code                          int
	contentType, warning, dropped string
	retryAfter                    string
	body                          string
}

func getWatch(t *testing.T, srv *httptest.Server, script string) watchResponse {
	t.Helper()
	var header map[string]string
	if strings.Contains(script, "protobuf") {
		header = map[string]string{"Accept": "application/vnd.kubernetes.protobuf;stream=watch"}
	}
	r := doGet(t, srv, "/api/v1/namespaces/demo/configmaps?watch=1&labelSelector="+script, header)
	return watchResponse{
		code: r.code, contentType: r.header.Get("Content-Type"), warning: r.header.Get("Warning"),
		dropped: r.header.Get("X-Dropped"), retryAfter: r.header.Get("Retry-After"), body: r.body,
	}
}

// TestLocalWatchMatchesGateway: a watch served on the request's goroutine
// (LocalResources) reaches the client byte for byte as through
// grpc-gateway, over a gRPC connection or in process: status code, media
// type, the headers the service set (those passed on), every frame in
// order (JSON with initial events and bookmarks, protobuf's binary
// framing), a refusal as its Status with its code and Retry-After, and an
// error after the first message appended as a Status.
func TestLocalWatchMatchesGateway(t *testing.T) {
	svc := &scriptedWatches{}
	serve := func(tune func(*Config)) *httptest.Server {
		srv := httptest.NewServer(newTestHandler(t, svc, nil, tune))
		t.Cleanup(srv.Close)
		return srv
	}
	direct := serve(func(c *Config) { c.LocalResources = svc })
	inProcess := serve(func(c *Config) { c.Resources = localClient{srv: svc} })
	overGRPC := serve(func(*Config) {})

	want := map[string]watchResponse{
		"script=json":      {code: 200, contentType: jsonStream, warning: `299 - "deprecated"`, body: initialEvents + bookmark},
		"script=protobuf":  {code: 200, contentType: protobufStream, body: string(protobufFrames)},
		"script=expired":   {code: 410, contentType: jsonStream},
		"script=throttled": {code: 429, contentType: jsonStream, retryAfter: "7"},
		"script=cut":       {code: 200, contentType: jsonStream},
		"script=invalid":   {code: 422, contentType: jsonStream},
	}
	for script, w := range want {
		t.Run(script, func(t *testing.T) {
			got := getWatch(t, direct, script)
			if got.code != w.code || got.contentType != w.contentType || got.warning != w.warning || got.dropped != "" || got.retryAfter != w.retryAfter {
				t.Errorf("served directly: %d %q warning %q x-dropped %q retry-after %q, want %d %q warning %q retry-after %q",
					got.code, got.contentType, got.warning, got.dropped, got.retryAfter, w.code, w.contentType, w.warning, w.retryAfter)
			}
			if w.body != "" && got.body != w.body {
				t.Errorf("served directly: body %q, want %q", got.body, w.body)
			}
			if w.code != 200 && !strings.Contains(got.body, `"kind":"Status"`) {
				t.Errorf("served directly: body %q, want a Status", got.body)
			}
			if script == "script=cut" && (!strings.HasPrefix(got.body, bookmark) || !strings.Contains(got.body[len(bookmark):], `"code":500`)) {
				t.Errorf("served directly: body %q, want the bookmark, then a Status of code 500", got.body)
			}
			for name, srv := range map[string]*httptest.Server{"grpc-gateway in process": inProcess, "grpc-gateway over gRPC": overGRPC} {
				if other := getWatch(t, srv, script); other != got {
					t.Errorf("served directly:\n%+v\nthrough %s:\n%+v", got, name, other)
				}
			}
		})
	}
}
