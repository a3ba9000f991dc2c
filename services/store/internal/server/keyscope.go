package server

import (
	"bytes"
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/identity"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// leaseKeyPrefix holds the store keys of coordination.k8s.io Leases.
const leaseKeyPrefix = "/registry/coordination.k8s.io/leases/"

// txnKeyScopes limits the keys a Txn may touch for callers that write
// little, by organization. Access lets the flow-control service call Txn
// because its replicas elect a leader through a Lease; its certificate,
// which every flow-control pod holds, must not be a way to write objects,
// so its transactions may touch Lease keys only. Organizations not listed
// are limited by Access alone.
func txnKeyScopes() map[string]string {
	return map[string]string{identity.FlowControlOrganization: leaseKeyPrefix}
}

// checkTxnKeyScope refuses, with PermissionDenied, a Txn whose caller's
// every organization is scoped (txnKeyScopes) when one of its compares or
// operations reaches a key outside all of the caller's scopes. A caller
// with any unscoped organization (a gateway, a store member forwarding a
// write), or without a verified certificate (a plaintext development
// store, which Access does not guard either), is not limited here.
func checkTxnKeyScope(ctx context.Context, req *storev1.TxnRequest) error {
	cert, ok := identity.VerifiedPeer(ctx)
	if !ok {
		return nil
	}
	scopes := txnKeyScopes()
	var prefixes []string
	for _, org := range cert.Subject.Organization {
		p, scoped := scopes[org]
		if !scoped {
			return nil
		}
		prefixes = append(prefixes, p)
	}
	if len(prefixes) == 0 {
		return nil
	}
	within := func(key, end []byte) bool {
		for _, p := range prefixes {
			if !bytes.HasPrefix(key, []byte(p)) {
				continue
			}
			// A single key, or a range ending inside the prefix or at
			// its end (the key after every key with the prefix).
			if len(end) == 0 || bytes.HasPrefix(end, []byte(p)) || bytes.Equal(end, client.PrefixEnd(p)) {
				return true
			}
		}
		return false
	}
	refuse := func(key []byte) error {
		return status.Error(codes.PermissionDenied, fmt.Sprintf(
			"store: a client certificate with organizations %q may not touch key %q in a Txn", cert.Subject.Organization, key))
	}
	for _, c := range req.GetCompare() {
		if !within(c.GetKey(), c.GetRangeEnd()) {
			return refuse(c.GetKey())
		}
	}
	for _, ops := range [][]*storev1.RequestOp{req.GetSuccess(), req.GetFailure()} {
		for _, op := range ops {
			var key, end []byte
			switch r := op.GetRequest().(type) {
			case *storev1.RequestOp_RequestRange:
				key, end = r.RequestRange.GetKey(), r.RequestRange.GetRangeEnd()
			case *storev1.RequestOp_RequestPut:
				key = r.RequestPut.GetKey()
			case *storev1.RequestOp_RequestDeleteRange:
				key, end = r.RequestDeleteRange.GetKey(), r.RequestDeleteRange.GetRangeEnd()
			}
			if !within(key, end) {
				return refuse(key)
			}
		}
	}
	return nil
}
