// Package identity carries the authenticated caller of a request.
//
// The caller is established once, at the gateway, and carried to the other
// services in gRPC metadata over mTLS. A downstream service believes that
// metadata only when the mTLS peer presenting it is trusted to assert users
// (see TrustFunc); from any other peer the metadata is ignored, so a client
// that reaches a service directly cannot impersonate anyone.
//
// Which peers may call a service's methods at all is a Policy: each
// internal identity has a certificate organization (GatewayOrganization,
// WatchFanoutOrganization, StorePeerOrganization, OperatorOrganization),
// and each server lets each method be called only by those it names.
package identity

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
)

// Metadata keys.
//
// # Encoding
//
// gRPC restricts metadata: keys may hold only [0-9a-z-_.], and values of
// non-binary keys only printable ASCII. User names, groups and extra values
// are UTF-8 strings, and extra attribute names (such as
// "authentication.kubernetes.io/pod-name") contain '/' and upper case
// letters, so both are encoded:
//
//   - values are percent-encoded: '%' and every byte outside printable ASCII
//     (0x20-0x7e) become %XX (upper-case hex), as grpc-message is;
//   - extra attribute names in keys are percent-encoded with '_' as the
//     escape character, since '%' is not a legal key character: bytes in
//     [0-9a-z-.] pass through and every other byte (upper case letters and
//     '_' included) becomes _xx (lower-case hex). So "example.com/Team"
//     travels as "x-meridian-extra-example.com_2f_54eam".
const (
	// MetadataUser carries User.Name.
	MetadataUser = "x-meridian-user"
	// MetadataUID carries User.UID.
	MetadataUID = "x-meridian-uid"
	// MetadataGroup carries one value per group.
	MetadataGroup = "x-meridian-group"
	// MetadataExtraPrefix prefixes one key per extra attribute; the rest of
	// the key is the encoded attribute name, and each attribute value is one
	// metadata value.
	MetadataExtraPrefix = "x-meridian-extra-"
)

// User is the authenticated caller of a request, with the fields of
// Kubernetes' user.Info.
type User struct {
	// Name is the user name, e.g. "alice" or "system:serviceaccount:ns:sa".
	Name string
	// UID identifies the user across renames; may be empty.
	UID string
	// Groups are the groups the user belongs to.
	Groups []string
	// Extra holds further attributes set by the authenticator.
	Extra map[string][]string
}

// Clone returns a deep copy of u.
func (u User) Clone() User {
	c := User{Name: u.Name, UID: u.UID, Groups: slices.Clone(u.Groups)}
	if u.Extra != nil {
		c.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			c.Extra[k] = slices.Clone(v)
		}
	}
	return c
}

type userKey struct{}

// WithUser returns a copy of ctx carrying u as an in-process value.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user carried by ctx, if any.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}

// AppendToOutgoing returns a copy of ctx whose outgoing gRPC metadata
// carries u. Any user metadata already in the outgoing context is replaced.
// A user without a name is not sent (an empty name is not a user).
func AppendToOutgoing(ctx context.Context, u User) context.Context {
	// FromOutgoingContext returns a copy, the caller's to change.
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		md = metadata.MD{}
	}
	for k := range md {
		if isIdentityKey(k) {
			delete(md, k)
		}
	}
	if u.Name == "" {
		return metadata.NewOutgoingContext(ctx, md)
	}
	md.Set(MetadataUser, encodeValue(u.Name))
	if u.UID != "" {
		md.Set(MetadataUID, encodeValue(u.UID))
	}
	if len(u.Groups) > 0 {
		md.Set(MetadataGroup, encodeValues(u.Groups)...)
	}
	for k, v := range u.Extra {
		if len(v) == 0 || k == "" {
			continue
		}
		md.Set(MetadataExtraPrefix+encodeKey(k), encodeValues(v)...)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// FromIncomingMetadata parses a user from md. It makes no trust decision;
// callers must only believe the result when the peer is trusted (the
// interceptors in this package do that). It reports false when md names no
// user. Malformed encodings are decoded leniently (an invalid escape is
// kept literally) rather than rejected: the peer is trusted or the result
// is not used at all.
func FromIncomingMetadata(md metadata.MD) (User, bool) {
	names := md.Get(MetadataUser)
	if len(names) == 0 || names[0] == "" {
		return User{}, false
	}
	u := User{Name: decodeValue(names[0])}
	if uids := md.Get(MetadataUID); len(uids) > 0 {
		u.UID = decodeValue(uids[0])
	}
	if groups := md.Get(MetadataGroup); len(groups) > 0 {
		u.Groups = make([]string, len(groups))
		for i, g := range groups {
			u.Groups[i] = decodeValue(g)
		}
	}
	for k, v := range md {
		k = strings.ToLower(k)
		if !strings.HasPrefix(k, MetadataExtraPrefix) || len(v) == 0 {
			continue
		}
		name := decodeKey(strings.TrimPrefix(k, MetadataExtraPrefix))
		if name == "" {
			continue
		}
		if u.Extra == nil {
			u.Extra = make(map[string][]string)
		}
		for _, x := range v {
			u.Extra[name] = append(u.Extra[name], decodeValue(x))
		}
	}
	return u, true
}

func isIdentityKey(k string) bool {
	return k == MetadataUser || k == MetadataUID || k == MetadataGroup || strings.HasPrefix(k, MetadataExtraPrefix)
}

const hexDigits = "0123456789abcdef"

// encodeValue percent-encodes '%' and bytes outside printable ASCII.
func encodeValue(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || c < 0x20 || c > 0x7e {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const upper = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c < 0x20 || c > 0x7e {
			b.WriteByte('%')
			b.WriteByte(upper[c>>4])
			b.WriteByte(upper[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func encodeValues(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = encodeValue(v)
	}
	return out
}

// decodeValue reverses encodeValue; an invalid escape is kept literally.
func decodeValue(s string) string {
	return unescape(s, '%')
}

// encodeKey encodes an extra attribute name into legal metadata key
// characters, with '_' as the escape character.
func encodeKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// decodeKey reverses encodeKey; an invalid escape is kept literally.
func decodeKey(s string) string {
	return unescape(s, '_')
}

func unescape(s string, esc byte) string {
	if strings.IndexByte(s, esc) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == esc && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
