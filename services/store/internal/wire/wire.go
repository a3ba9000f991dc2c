// Package wire holds the conventions shared by the store's gRPC server and
// its Go client (package client) beyond store.proto: error reasons,
// metadata keys, and which transactions only read. It depends on nothing
// but the generated API, so the client stays small.
package wire

import storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"

// TxnWrites reports whether either branch of req puts or deletes. A
// transaction that does not is served like a linearizable Range (no raft
// entry), and, like a Range, is always safe to retry.
func TxnWrites(req *storev1.TxnRequest) bool {
	for _, ops := range [][]*storev1.RequestOp{req.GetSuccess(), req.GetFailure()} {
		for _, op := range ops {
			if op.GetRequestPut() != nil || op.GetRequestDeleteRange() != nil {
				return true
			}
		}
	}
	return false
}

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
