package server

import (
	"github.com/meridian-cp/meridian/lib/identity"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Access returns the store's gRPC access policy: which callers, by the
// organization (O=) of their verified client certificate, may call which
// method. The store serves three kinds of caller, and each gets only what
// it uses:
//
//   - data: the gateways read, write, watch and hold leases (Range, Txn,
//     WatchService, LeaseService); the watch fan-out tier, the
//     flow-control service and the admission service only read and
//     watch (Range, Watch).
//   - operators: membership changes, leadership transfer, compaction,
//     snapshots and status; they read and write no keys, so an operator's
//     certificate is no way around the API's authentication.
//   - store members: what one member sends another — a write, a lease
//     call, a compaction or a membership change forwarded to the leader,
//     a read index for a follower's linearizable read, and a new member's
//     request to join (MemberAdd).
//
// MemberList is open to all four: the store client finds the leader with
// it. Health checks are open to every caller (identity.Policy).
func Access() identity.Policy {
	var (
		gw   = identity.GatewayOrganization
		wf   = identity.WatchFanoutOrganization
		fc   = identity.FlowControlOrganization
		ad   = identity.AdmissionOrganization
		op   = identity.OperatorOrganization
		peer = identity.StorePeerOrganization
	)
	return identity.Policy{
		storev1.KVService_Range_FullMethodName:   {gw, wf, fc, ad},
		storev1.KVService_Txn_FullMethodName:     {gw, peer},
		storev1.KVService_Compact_FullMethodName: {op, peer},

		storev1.WatchService_Watch_FullMethodName: {gw, wf, fc, ad},

		identity.Service(storev1.LeaseService_ServiceDesc.ServiceName): {gw, peer},

		storev1.ClusterService_MemberList_FullMethodName:         {gw, wf, fc, ad, op, peer},
		storev1.ClusterService_MemberAdd_FullMethodName:          {op, peer},
		storev1.ClusterService_MemberRemove_FullMethodName:       {op, peer},
		storev1.ClusterService_MemberPromote_FullMethodName:      {op, peer},
		storev1.ClusterService_TransferLeadership_FullMethodName: {op, peer},
		storev1.ClusterService_ReadIndex_FullMethodName:          {peer},

		storev1.MaintenanceService_Status_FullMethodName:   {op},
		storev1.MaintenanceService_Snapshot_FullMethodName: {op},
	}
}
