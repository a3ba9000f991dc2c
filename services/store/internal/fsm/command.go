package fsm

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Command encoding (the Data of a raft LogCommand entry):
//
//	+-----------+------+------------------------------------------+
//	| 0x01 (v1) | kind | proto bytes (TxnRequest | CompactRequest |  |
//	|           |      |   MemberAddRequest)                       |
//	+-----------+------+------------------------------------------+
//
// A member command (KindMember) records a member's client address in the
// membership keyspace (mvcc "s/n/"); only its id and client_address are
// used, and an empty client_address removes the record.
const commandV1 = 1

// Kind is the kind of a command.
type Kind byte

// Command kinds.
const (
	KindTxn     Kind = 1
	KindCompact Kind = 2
	KindMember  Kind = 3
	// KindLeaseGrant and KindLeaseRevoke carry a LeaseGrantRequest (id
	// chosen by the leader, never 0) and a LeaseRevokeRequest.
	KindLeaseGrant  Kind = 4
	KindLeaseRevoke Kind = 5
)

// ErrBadCommand is returned (as an entry's response) for an entry that does
// not decode. It is deterministic: every replica rejects the same entry.
var ErrBadCommand = errors.New("fsm: undecodable command")

type command struct {
	kind    Kind
	txn     *storev1.TxnRequest
	compact *storev1.CompactRequest
	member  *storev1.MemberAddRequest
	grant   *storev1.LeaseGrantRequest
	revoke  *storev1.LeaseRevokeRequest
}

// EncodeLeaseGrant encodes a lease grant.
func EncodeLeaseGrant(req *storev1.LeaseGrantRequest) ([]byte, error) {
	return encode(KindLeaseGrant, req)
}

// EncodeLeaseRevoke encodes a lease revocation.
func EncodeLeaseRevoke(id int64) ([]byte, error) {
	return encode(KindLeaseRevoke, &storev1.LeaseRevokeRequest{Id: id})
}

// EncodeTxn encodes a transaction command.
func EncodeTxn(req *storev1.TxnRequest) ([]byte, error) { return encode(KindTxn, req) }

// EncodeCompact encodes a compaction command.
func EncodeCompact(req *storev1.CompactRequest) ([]byte, error) { return encode(KindCompact, req) }

// EncodeMember encodes a member command: id's client address (empty
// removes it).
func EncodeMember(id, clientAddr string) ([]byte, error) {
	return encode(KindMember, &storev1.MemberAddRequest{Id: id, ClientAddress: clientAddr})
}

func encode(k Kind, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend([]byte{commandV1, byte(k)}, m)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode command: %w", err)
	}
	return b, nil
}

func decode(data []byte) (command, error) {
	if len(data) < 2 || data[0] != commandV1 {
		return command{}, fmt.Errorf("%w: bad header", ErrBadCommand)
	}
	c := command{kind: Kind(data[1])}
	var m proto.Message
	switch c.kind {
	case KindTxn:
		c.txn = &storev1.TxnRequest{}
		m = c.txn
	case KindCompact:
		c.compact = &storev1.CompactRequest{}
		m = c.compact
	case KindMember:
		c.member = &storev1.MemberAddRequest{}
		m = c.member
	case KindLeaseGrant:
		c.grant = &storev1.LeaseGrantRequest{}
		m = c.grant
	case KindLeaseRevoke:
		c.revoke = &storev1.LeaseRevokeRequest{}
		m = c.revoke
	default:
		return command{}, fmt.Errorf("%w: kind %d", ErrBadCommand, c.kind)
	}
	if err := proto.Unmarshal(data[2:], m); err != nil {
		return command{}, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	return c, nil
}
