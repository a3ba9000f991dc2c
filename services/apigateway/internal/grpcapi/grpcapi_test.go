package grpcapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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

func (s *recordingService) calls() []created {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

const tokenFile = "alice-token,alice,uid-alice,\"dev\"\nadmin-token,admin,uid-admin,\"system:masters\"\n"

// serve starts the front door on a loopback port, over plaintext (tokens
// authenticate), and returns its address.
func serve(t *testing.T, svc apiv1.ResourceServiceServer) string {
	t.Helper()
	tokens, err := authn.ParseTokenFile(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Authenticator: authn.New(nil, tokens), Resources: svc})
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
	// A server that answers nothing fails the test instead of hanging it.
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	framer := http2.NewFramer(conn, conn)
	framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := framer.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	rc := &rawConn{t: t, conn: conn, framer: framer}
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

// startCreate sends the headers of a Create call on stream id and the
// first bytes of a request message that declares itself declared bytes
// long; the rest is never sent.
func (rc *rawConn) startCreate(id uint32, declared uint32, md map[string]string) {
	rc.t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: apiv1.ResourceService_Create_FullMethodName}, {Name: ":authority", Value: "test"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}
	for k, v := range md {
		fields = append(fields, hpack.HeaderField{Name: k, Value: v})
	}
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			rc.t.Fatal(err)
		}
	}
	if err := rc.framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
	msg := make([]byte, 5+1024)
	binary.BigEndian.PutUint32(msg[1:5], declared)
	if err := rc.framer.WriteData(id, false, msg); err != nil {
		rc.t.Fatal(err)
	}
}

// status reads frames until stream id ends and returns its grpc-status.
func (rc *rawConn) status(id uint32) string {
	rc.t.Helper()
	for {
		f, err := rc.framer.ReadFrame()
		if err != nil {
			rc.t.Fatalf("stream %d got no answer while its message was incomplete: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id && f.StreamEnded() {
				return f.PseudoValue("status") + " grpc-status=" + headerValue(f, "grpc-status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				rc.t.Fatalf("stream %d reset (%v) without a status", id, f.ErrCode)
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = rc.framer.WriteSettingsAck()
			}
		}
	}
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
	if got := rc.status(5); got != "200 grpc-status=8" {
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
