package grpcapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recordingService is a ResourceService whose Create records who called
// it and how large a body reached it.
type recordingService struct {
	apiv1.UnimplementedResourceServiceServer
	mu      sync.Mutex
	creates []created
}

type created struct {
	user     identity.User
	bodySize int
}

func (s *recordingService) Create(ctx context.Context, req *apiv1.CreateRequest) (*httpbody.HttpBody, error) {
	u, _ := identity.UserFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creates = append(s.creates, created{user: u, bodySize: len(req.GetBody().GetData())})
	return &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{}`)}, nil
}

// Get answers with the name asked for, the caller's name and whether the
// call has a deadline.
func (s *recordingService) Get(ctx context.Context, req *apiv1.GetRequest) (*httpbody.HttpBody, error) {
	u, _ := identity.UserFrom(ctx)
	_, deadline := ctx.Deadline()
	return &httpbody.HttpBody{ContentType: "text/plain", Data: fmt.Appendf(nil, "%s for %s deadline=%t", req.GetRef().GetName(), u.Name, deadline)}, nil
}

// List streams two messages, then ends.
func (s *recordingService) List(req *apiv1.ListRequest, ss grpc.ServerStreamingServer[httpbody.HttpBody]) error {
	u, _ := identity.UserFrom(ss.Context())
	for _, part := range []string{"list of " + req.GetRef().GetResource(), " for " + u.Name} {
		if err := ss.Send(&httpbody.HttpBody{ContentType: "text/plain", Data: []byte(part)}); err != nil {
			return err
		}
	}
	return nil
}

// Watch streams one event, then waits for the client to go.
func (s *recordingService) Watch(req *apiv1.WatchRequest, ss grpc.ServerStreamingServer[httpbody.HttpBody]) error {
	u, _ := identity.UserFrom(ss.Context())
	if err := ss.Send(&httpbody.HttpBody{ContentType: "text/plain", Data: []byte("ADDED for " + u.Name)}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return ss.Context().Err()
}

func (s *recordingService) calls() []created {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

const tokenFile = "alice-token,alice,uid-alice,\"dev\"\nadmin-token,admin,uid-admin,\"system:masters\"\n"

// testPolicy lets alice, and the group ops (whom admin impersonates), read
// and create the config maps of "default"; admin, in system:masters, may
// do anything.
func testPolicy() *authz.RBAC {
	return authz.NewStatic(
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "configmaps"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch", "create"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}, {Kind: "Group", APIGroup: rbacv1.GroupName, Name: "ops"}}},
	)
}

// serve starts the front door on a loopback port, over plaintext (tokens
// authenticate), and returns its address.
func serve(t *testing.T, svc apiv1.ResourceServiceServer) string {
	return serveWith(t, svc, nil)
}

// serveWith is serve with flow control (fc, nil: none).
func serveWith(t *testing.T, svc apiv1.ResourceServiceServer, fc *flowcontrolclient.Client) string {
	t.Helper()
	return serveConfig(t, Config{Authorizer: testPolicy(), Resources: svc, FlowControl: fc})
}

// serveConfig starts a front door of cfg, its Authenticator the tokens of
// tokenFile, on a loopback port over plaintext, stopped when t ends, and
// returns its address.
func serveConfig(t *testing.T, cfg Config) string {
	t.Helper()
	tokens, err := authn.ParseTokenFile(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Authenticator = authn.New(nil, tokens)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func client(t *testing.T, addr string) apiv1.ResourceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return apiv1.NewResourceServiceClient(conn)
}

// rawConn is a hand-driven HTTP/2 connection to the server: it can send a
// call's headers and part of its message, which no gRPC client does.
type rawConn struct {
	t      *testing.T
	conn   net.Conn
	framer *http2.Framer
	// enc encodes the header blocks of the connection's calls, in order:
	// its dynamic table is the server decoder's.
	enc   *hpack.Encoder
	block bytes.Buffer
	// settings are the server's initial SETTINGS.
	settings map[http2.SettingID]uint32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn = waitLimitConn{Conn: conn, limit: 30 * time.Second}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	framer := http2.NewFramer(conn, conn)
	framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := framer.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, conn: conn, framer: framer}
	rc.enc = hpack.NewEncoder(&rc.block)
	for rc.settings == nil {
		f, err := framer.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			rc.settings = map[http2.SettingID]uint32{}
			_ = sf.ForeachSetting(func(s http2.Setting) error { rc.settings[s.ID] = s.Val; return nil })
			if err := framer.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return rc
}

// waitLimitConn is a connection on which a Read or a Write that waits
// longer than limit fails: a server that answers nothing fails the test
// instead of hanging it, however long the test's calls take in all.
type waitLimitConn struct {
	net.Conn
	limit time.Duration
}

func (c waitLimitConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.limit))
	return c.Conn.Read(p)
}

func (c waitLimitConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.limit))
	return c.Conn.Write(p)
}

// startCreate sends the headers of a Create call on stream id and the
// first bytes of a request message that declares itself declared bytes
// long; the rest is never sent.
func (rc *rawConn) startCreate(id uint32, declared uint32, md map[string]string) {
	rc.t.Helper()
	rc.writeHeaders(id, apiv1.ResourceService_Create_FullMethodName, md, false)
	msg := make([]byte, 5+1024)
	binary.BigEndian.PutUint32(msg[1:5], declared)
	if err := rc.framer.WriteData(id, false, msg); err != nil {
		rc.t.Fatal(err)
	}
}

// writeHeaders sends the HEADERS of a call of method on stream id, with
// the metadata md; endStream ends the stream with them (a call without a
// message).
func (rc *rawConn) writeHeaders(id uint32, method string, md map[string]string, endStream bool) {
	rc.t.Helper()
	rc.block.Reset()
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method}, {Name: ":authority", Value: "test"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		fields = append(fields, hpack.HeaderField{Name: k, Value: md[k]})
	}
	for _, f := range fields {
		if err := rc.enc.WriteField(f); err != nil {
			rc.t.Fatal(err)
		}
	}
	if err := rc.framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block.Bytes(), EndHeaders: true, EndStream: endStream}); err != nil {
		rc.t.Fatal(err)
	}
}

// status reads frames until stream id ends and returns its grpc-status.
func (rc *rawConn) status(id uint32) string {
	rc.t.Helper()
	return rc.statuses([]uint32{id})[id]
}

// statuses reads frames until every stream of ids has ended and returns
// the HTTP status and grpc-status of the HEADERS that ended each, as
// "200 grpc-status=16": a trailers-only response has both.
func (rc *rawConn) statuses(ids []uint32) map[uint32]string {
	rc.t.Helper()
	ended := make(map[uint32]string, len(ids))
	for len(ended) < len(ids) {
		f, err := rc.framer.ReadFrame()
		if err != nil {
			rc.t.Fatalf("%d of %d streams got no answer while their message was incomplete: %v", len(ids)-len(ended), len(ids), err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if slices.Contains(ids, f.StreamID) && f.StreamEnded() {
				ended[f.StreamID] = f.PseudoValue("status") + " grpc-status=" + headerValue(f, "grpc-status")
			}
		case *http2.RSTStreamFrame:
			// A stream still being sent is reset (NO_ERROR) after its
			// answer.
			if _, done := ended[f.StreamID]; slices.Contains(ids, f.StreamID) && !done {
				rc.t.Fatalf("stream %d reset (%v) without a status", f.StreamID, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			rc.t.Fatalf("the server closed the connection: %v %s", f.ErrCode, f.DebugData())
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = rc.framer.WriteSettingsAck()
			}
		}
	}
	return ended
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// TestAuthenticatesBeforeReadingTheMessage sends the headers of Create
// calls and 1 KiB of a message that declares itself 62 MB long, and never
// the rest. A server that read the message before authenticating would wait
// for it; this one answers each call while the message is still
// incomplete: Unauthenticated without credentials, and ResourceExhausted
// (the size limit, checked on the declared length) with them.
func TestAuthenticatesBeforeReadingTheMessage(t *testing.T) {
	svc := &recordingService{}
	rc := dialRaw(t, serve(t, svc))
	const declared = 62 << 20

	rc.startCreate(1, declared, nil)
	if got := rc.status(1); got != "200 grpc-status=16" {
		t.Errorf("anonymous 62 MB create: %s, want grpc-status=16 (Unauthenticated) before the message arrived", got)
	}
	rc.startCreate(3, declared, map[string]string{"authorization": "Bearer bad-token"})
	if got := rc.status(3); got != "200 grpc-status=16" {
		t.Errorf("62 MB create with a bad token: %s, want grpc-status=16", got)
	}
	rc.startCreate(5, declared, map[string]string{"authorization": "Bearer alice-token"})
	// An authenticated call has its headers (Audit-Id) sent before its
	// status: the status ends the stream in trailers of their own.
	if got := rc.status(5); got != " grpc-status=8" {
		t.Errorf("authenticated 62 MB create: %s, want grpc-status=8 (ResourceExhausted)", got)
	}
	if calls := svc.calls(); len(calls) != 0 {
		t.Errorf("the service was called: %+v", calls)
	}
}

// TestMessageSizeLimit: a request message may be as large as the REST
// surface's body limit, no larger; an anonymous caller is refused as
// unauthenticated whatever it sends.
func TestMessageSizeLimit(t *testing.T) {
	svc := &recordingService{}
	c := client(t, serve(t, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice-token")
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}
	create := func(ctx context.Context, size int) error {
		_, err := c.Create(ctx, &apiv1.CreateRequest{Ref: ref, Body: &httpbody.HttpBody{ContentType: "application/json", Data: make([]byte, size)}})
		return err
	}

	if err := create(alice, resources.MaxRequestBytes-1024); err != nil {
		t.Fatalf("create just under the limit: %v", err)
	}
	if err := create(alice, 4<<20); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("authenticated 4 MiB create: %v, want ResourceExhausted", err)
	}
	if err := create(ctx, 4<<20); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous 4 MiB create: %v, want Unauthenticated", err)
	}
	calls := svc.calls()
	if len(calls) != 1 || calls[0].bodySize != resources.MaxRequestBytes-1024 || calls[0].user.Name != "alice" {
		t.Errorf("the service saw %+v, want one create by alice", calls)
	}
}

// TestAdvertisesStreamLimit: the server tells every client how many calls
// one connection may have open.
func TestAdvertisesStreamLimit(t *testing.T) {
	rc := dialRaw(t, serve(t, &recordingService{}))
	if got, ok := rc.settings[http2.SettingMaxConcurrentStreams]; !ok || got != DefaultMaxConcurrentStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want %d", got, ok, DefaultMaxConcurrentStreams)
	}
}

// TestImpersonation: Impersonate-* metadata is refused to callers outside
// system:masters and changes the caller of system:masters members.
func TestImpersonation(t *testing.T) {
	svc := &recordingService{}
	c := client(t, serve(t, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}
	create := func(kv ...string) error {
		_, err := c.Create(metadata.AppendToOutgoingContext(ctx, kv...), &apiv1.CreateRequest{Ref: ref, Body: &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{}`)}})
		return err
	}

	err := create("authorization", "Bearer alice-token", "impersonate-user", "bob")
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied || st.Message() != `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope` {
		t.Errorf("alice impersonating bob: %v", err)
	}
	if err := create("authorization", "Bearer admin-token", "impersonate-group", "ops"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a group without a user: %v, want InvalidArgument", err)
	}
	if calls := svc.calls(); len(calls) != 0 {
		t.Fatalf("refused impersonations reached the service: %+v", calls)
	}

	if err := create("authorization", "Bearer admin-token", "impersonate-user", "bob", "impersonate-group", "ops",
		"impersonate-uid", "uid-bob", "impersonate-extra-scopes", "view"); err != nil {
		t.Fatalf("admin impersonating bob: %v", err)
	}
	calls := svc.calls()
	want := identity.User{Name: "bob", UID: "uid-bob", Groups: []string{"ops", "system:authenticated"}, Extra: map[string][]string{"scopes": {"view"}}}
	if len(calls) != 1 || !sameUser(calls[0].user, want) {
		t.Errorf("the service saw %+v, want %+v", calls, want)
	}
}

func sameUser(a, b identity.User) bool {
	if a.Name != b.Name || a.UID != b.UID || !slices.Equal(a.Groups, b.Groups) || len(a.Extra) != len(b.Extra) {
		return false
	}
	for k, v := range a.Extra {
		if !slices.Equal(v, b.Extra[k]) {
			return false
		}
	}
	return true
}

// TestCalls: an authenticated caller's unary and server-streaming calls
// reach the service as that caller, with the deadline it sent; an
// anonymous caller's are refused with Unauthenticated and the Kubernetes
// Status (401 Unauthorized) in the details; health checks are open to
// anyone.
func TestCalls(t *testing.T) {
	addr := serve(t, &recordingService{})
	c := client(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice-token")
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}

	got, err := c.Get(alice, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "cm"}})
	if err != nil || string(got.GetData()) != "cm for alice deadline=true" {
		t.Errorf("alice's get: %q, %v", got.GetData(), err)
	}
	list, err := c.List(alice, &apiv1.ListRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	var listed string
	for {
		m, err := list.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("alice's list: %v (after %q)", err, listed)
		}
		listed += string(m.GetData())
	}
	if listed != "list of configmaps for alice" {
		t.Errorf("alice's list: %q", listed)
	}
	wctx, wcancel := context.WithCancel(alice)
	w, err := c.Watch(wctx, &apiv1.WatchRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || string(m.GetData()) != "ADDED for alice" {
		t.Errorf("alice's watch: %q, %v", m.GetData(), err)
	}
	wcancel()
	if _, err := w.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("alice's watch after she left: %v, want Canceled", err)
	}

	anonymous := map[string]func() error{
		"get": func() error { _, err := c.Get(ctx, &apiv1.GetRequest{Ref: ref}); return err },
		"list": func() error {
			l, err := c.List(ctx, &apiv1.ListRequest{Ref: ref})
			if err == nil {
				_, err = l.Recv()
			}
			return err
		},
		"watch": func() error {
			w, err := c.Watch(ctx, &apiv1.WatchRequest{Ref: ref})
			if err == nil {
				_, err = w.Recv()
			}
			return err
		},
	}
	for name, call := range anonymous {
		st := status.Convert(call())
		if st.Code() != codes.Unauthenticated || st.Message() != "Unauthorized" || !hasStatus(st, 401, "Unauthorized") {
			t.Errorf("anonymous %s: %v %v, want Unauthenticated with a 401 Unauthorized Status", name, st, st.Details())
		}
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: apiv1.ResourceService_ServiceDesc.ServiceName}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("anonymous health check: %v %v", resp, err)
	}
}

// hasStatus reports whether st carries the Kubernetes Status of code and
// reason.
func hasStatus(st *status.Status, code int32, reason string) bool {
	s, ok := apistatus.Detail(st)
	return ok && s.GetCode() == code && s.GetReason() == reason
}
