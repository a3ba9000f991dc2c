// Package mvcc is meridian's multi-version key-value state: every write
// creates a new version of a key at a new revision, old versions stay
// readable until they are compacted, and the ordered history doubles as the
// watch event log.
//
// # Keyspace
//
// All state lives in a pebble DB under the prefix "s/" (KeyspaceStart to
// KeyspaceEnd), next to raft's stable store (package raftstable, prefix "r/"):
//
//	record keyspace, one entry per version, in revision order:
//	  "s/e/" | main rev (8B BE) | sub rev (4B BE)          → record
//
//	key index, one entry per version, by user key then newest first:
//	  "s/k/" | escaped user key | 0x00 0x01 | ^main (8B BE) → sub (4B BE) | flags (1B)
//
//	meta, one key:
//	  "s/m"                                                 → 0x01 | rev (8B) | compacted (8B) | applied index (8B)
//
// A record is:
//
//	+------+-------+-------------+--------------+------------+-----------+-----+-------+
//	| 0x01 | flags | create svar | version svar | lease svar | klen uvar | key | value |
//	+------+-------+-------------+--------------+------------+-----------+-----+-------+
//
// flags bit 0 marks a tombstone (a delete). A record's mod_revision is its
// main revision. The sub revision orders the writes of one transaction.
//
// The user key escaping replaces 0x00 by 0x00 0xff and terminates the key
// with 0x00 0x01, which preserves the lexicographic order of user keys and
// makes no escaped key a prefix of another. The revision is stored inverted
// (^main), so for a key K and a revision R, SeekGE("s/k/"|esc(K)|^R) lands on
// the newest version of K at or below R.
//
// # Revisions and durability
//
// The meta key is written in the same pebble batch as the state it
// describes (WriteBatch.Commit), so the current revision, the compacted
// revision and the raft applied index always agree with the data after a
// crash: an entry at or below the stored applied index is never applied
// again, and one above it always is.
//
// # Publication order (readers never lock)
//
// Readers take a pebble snapshot and read Rev/CompactRev atomics. Rev is
// published after the batch that created it commits, so a reader that loads
// Rev before taking its snapshot sees every version at or below it.
// CompactRev is published before the batch that deletes compacted versions
// commits, so a reader that loads CompactRev after taking its snapshot never
// reads a revision whose versions its snapshot may miss.
//
// # Transactions
//
// Txn follows store.proto (etcd v3 semantics) with one documented
// difference: a compare on a missing key compares as a key with zero
// revisions, version and lease and an EMPTY VALUE, including TARGET_VALUE
// (etcd fails value compares on missing keys). A key may be written at most
// once per transaction (ErrDuplicateKey), so a key has at most one version
// per main revision.
package mvcc
