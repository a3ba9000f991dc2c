package identity_test

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/meridian-cp/meridian/lib/identity"
)

func TestContextValue(t *testing.T) {
	ctx := context.Background()
	if _, ok := identity.UserFrom(ctx); ok {
		t.Fatal("empty context carries a user")
	}
	u := identity.User{Name: "alice", Groups: []string{"dev"}}
	got, ok := identity.UserFrom(identity.WithUser(ctx, u))
	if !ok || !reflect.DeepEqual(got, u) {
		t.Fatalf("UserFrom = %+v, %v; want %+v", got, ok, u)
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	cases := []identity.User{
		{Name: "alice"},
		{Name: "bob", UID: "1234", Groups: []string{"system:authenticated", "dev"}},
		{
			Name:   "jürgen 100% ✓",
			UID:    "uid with spaces",
			Groups: []string{"grüppe", "a%2Fb", ""},
			Extra: map[string][]string{
				"authentication.kubernetes.io/pod-name": {"web-0"},
				"Scopes_With.UPPER/and%":                {"a", "b", "ünïcode"},
			},
		},
	}
	for _, u := range cases {
		ctx := identity.AppendToOutgoing(context.Background(), u)
		md, _ := metadata.FromOutgoingContext(ctx)
		for k, vs := range md {
			for i := 0; i < len(k); i++ {
				c := k[i]
				if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
					t.Errorf("key %q has illegal character %q", k, c)
				}
			}
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Errorf("value %q of %s is not printable ASCII", v, k)
					}
				}
			}
		}
		got, ok := identity.FromIncomingMetadata(md)
		if !ok || !reflect.DeepEqual(got, u) {
			t.Errorf("round trip of %+v = %+v, %v", u, got, ok)
		}
	}
}

func TestAppendToOutgoingReplaces(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "other", "kept")
	ctx = identity.AppendToOutgoing(ctx, identity.User{Name: "a", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"x": {"1"}}})
	ctx = identity.AppendToOutgoing(ctx, identity.User{Name: "b"})
	md, _ := metadata.FromOutgoingContext(ctx)
	got, ok := identity.FromIncomingMetadata(md)
	if !ok || !reflect.DeepEqual(got, identity.User{Name: "b"}) {
		t.Fatalf("got %+v, %v; want only user b", got, ok)
	}
	if v := md.Get("other"); len(v) != 1 || v[0] != "kept" {
		t.Fatalf("unrelated metadata lost: %v", md)
	}
}

func TestFromIncomingMetadataNoUser(t *testing.T) {
	if _, ok := identity.FromIncomingMetadata(metadata.Pairs(identity.MetadataGroup, "system:masters")); ok {
		t.Fatal("groups without a user name parsed as a user")
	}
	if _, ok := identity.FromIncomingMetadata(nil); ok {
		t.Fatal("nil metadata parsed as a user")
	}
}
