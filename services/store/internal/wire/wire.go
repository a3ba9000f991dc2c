// Package wire holds the conventions shared by the store's gRPC server and
// its Go client (package client) beyond store.proto: error reasons and
// metadata keys. It has no dependencies, so the client stays small.
package wire

const (
	// ErrorDomain is the domain of the google.rpc.ErrorInfo details the
	// store attaches to errors.
	ErrorDomain = "store.meridian.dev"
	// ReasonNotProposed marks an UNAVAILABLE error of a request that
	// provably never reached the raft log (no leader, not the leader before
	// proposing, proposal queue full, leader unreachable before sending):
	// retrying it, even a write, cannot apply it twice.
	ReasonNotProposed = "NOT_PROPOSED"
	// ForwardedKey is the metadata key set on requests one member forwards
	// to the leader; a member that is not the leader refuses such a request
	// (not proposed) instead of forwarding it again.
	ForwardedKey = "meridian-store-forwarded"
	// AddressOnlyKey on a MemberAdd makes it update the client address of
	// an existing member only (NOT_FOUND otherwise): members register their
	// own address this way and can never re-add themselves once removed.
	AddressOnlyKey = "meridian-store-address-only"
)
