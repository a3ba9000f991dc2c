// Package storagecrypt is encryption at rest: it encrypts object values
// before they are written to the store and decrypts them when they are
// read, as kube-apiserver does with --encryption-provider-config. The
// gateway's storage layer, watchfanout's cache and the storage migration
// all read and write through one Transformer, so that no store file and
// no raft log entry holds a configured resource in plain text.
//
// # Configuration
//
// An apiserver.config.k8s.io/v1 EncryptionConfiguration (config.go) maps
// resources ("secrets", "leases.coordination.k8s.io", "*.", "*.*") to
// lists of providers: identity, aescbc, aesgcm, secretbox and kms (v2,
// over a Unix socket). The first provider of a resource's list encrypts
// every write (with its first key); every provider of the list decrypts
// what it wrote. A resource no list names is stored as it is, and reading
// an encrypted value of it is an error, not garbage.
//
// # Stored values
//
// Byte for byte kube-apiserver's, so that data is recognisable and moves
// between the two:
//
//	identity   the value itself (never starting with "k8s:enc:")
//	aescbc     "k8s:enc:aescbc:v1:" name ":" | IV (16) | AES-CBC(value, PKCS#7 padding)
//	aesgcm     "k8s:enc:aesgcm:v1:" name ":" | nonce (12) | AES-GCM(value, aad = key) | tag (16)
//	secretbox  "k8s:enc:secretbox:v1:" name ":" | nonce (24) | XSalsa20-Poly1305(value)
//	kms        "k8s:enc:kms:v2:" provider ":" | EncryptedObject (protobuf)
//
// name is the key's name, provider the KMS provider's; "aad = key" means
// the store key (/registry/secrets/<namespace>/<name>) is authenticated
// with the value, so a value copied under another key does not decrypt.
// A KMS v2 EncryptedObject carries the data key's seed as the plugin
// encrypted it, the plugin's key id and annotations, and the value
// encrypted with a key derived from the seed:
//
//	encryptedData = info (32) | nonce (12) | AES-256-GCM(value, aad = key) | tag (16)
//	data key      = HKDF-Expand(SHA-256, seed, info)
//
// # Rotation
//
// A value read with anything but the first provider's first key (or,
// for KMS, with a key id other than the plugin's current one) is stale:
// Decrypt reports it, and writing the object again, even unchanged,
// encrypts it with the current key. A storage migration does that for
// every object of the configured resources.
package storagecrypt
