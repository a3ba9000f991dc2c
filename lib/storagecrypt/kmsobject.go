package storagecrypt

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/util/validation"
)

// encryptedObject is what a KMS v2 provider stores after its prefix:
// kube-apiserver's EncryptedObject message
// (k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2/api.proto),
// written and read here with protowire:
//
//	1 encryptedData           bytes
//	2 keyID                   string
//	3 encryptedDEKSource      bytes
//	4 annotations             map<string, bytes>
//	5 encryptedDEKSourceType  enum: 0 AES_GCM_KEY, 1 HKDF_SHA256_XNONCE_AES_GCM_SEED
type encryptedObject struct {
	encryptedData      []byte
	keyID              string
	encryptedDEKSource []byte
	annotations        map[string][]byte
	sourceType         dekSourceType
}

// dekSourceType is what encryptedDEKSource holds once the plugin
// decrypted it.
type dekSourceType int32

const (
	// sourceAESGCMKey: the AES-GCM data key itself (older writers).
	sourceAESGCMKey dekSourceType = 0
	// sourceHKDFSeed: a seed from which each value's key is derived.
	sourceHKDFSeed dekSourceType = 1
)

// Limits of a KMS v2 plugin's answers, as kube-apiserver checks them.
const (
	maxKeyIDBytes       = 1 << 10
	maxDEKSourceBytes   = 1 << 10
	maxAnnotationsBytes = 32 << 10
)

// appendTo appends the message's encoding to b; annotations are written in
// key order, so the encoding is deterministic.
func (o *encryptedObject) appendTo(b []byte) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, o.encryptedData)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, o.keyID)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, o.encryptedDEKSource)
	for _, k := range slices.Sorted(maps.Keys(o.annotations)) {
		v := o.annotations[k]
		entry := protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entry))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	if o.sourceType != 0 {
		b = protowire.AppendTag(b, 5, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(o.sourceType))
	}
	return b
}

// errMalformed is an EncryptedObject that does not parse.
var errMalformed = errors.New("malformed KMS v2 encrypted object")

// parseEncryptedObject reads an EncryptedObject; its byte fields refer
// into b. Unknown fields are skipped, as protobuf does.
func parseEncryptedObject(b []byte) (*encryptedObject, error) {
	o := &encryptedObject{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			o.encryptedData, n = protowire.ConsumeBytes(b)
		case num == 2 && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			o.keyID = string(v)
		case num == 3 && typ == protowire.BytesType:
			o.encryptedDEKSource, n = protowire.ConsumeBytes(b)
		case num == 4 && typ == protowire.BytesType:
			var entry []byte
			if entry, n = protowire.ConsumeBytes(b); n >= 0 {
				if err := o.addAnnotation(entry); err != nil {
					return nil, err
				}
			}
		case num == 5 && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			o.sourceType = dekSourceType(v)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
	}
	return o, nil
}

// addAnnotation reads one map entry.
func (o *encryptedObject) addAnnotation(entry []byte) error {
	var k string
	var v []byte
	for len(entry) > 0 {
		num, typ, n := protowire.ConsumeTag(entry)
		if n < 0 {
			return errMalformed
		}
		entry = entry[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			var s []byte
			s, n = protowire.ConsumeBytes(entry)
			k = string(s)
		case num == 2 && typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(entry)
		default:
			n = protowire.ConsumeFieldValue(num, typ, entry)
		}
		if n < 0 {
			return errMalformed
		}
		entry = entry[n:]
	}
	if o.annotations == nil {
		o.annotations = map[string][]byte{}
	}
	o.annotations[k] = v
	return nil
}

// validate checks the object as kube-apiserver does before trusting it.
func (o *encryptedObject) validate() error {
	if len(o.encryptedData) == 0 {
		return errors.New("encrypted data is empty")
	}
	if err := validateKeyID(o.keyID); err != nil {
		return err
	}
	if err := validateDEKSource(o.encryptedDEKSource); err != nil {
		return err
	}
	if o.sourceType != sourceAESGCMKey && o.sourceType != sourceHKDFSeed {
		return fmt.Errorf("unknown encrypted DEK source type %d", o.sourceType)
	}
	return validateAnnotations(o.annotations)
}

// validateKeyID checks a plugin's key id: not empty, at most 1 KiB.
func validateKeyID(id string) error {
	switch {
	case id == "":
		return errors.New("keyID is empty")
	case len(id) > maxKeyIDBytes:
		return fmt.Errorf("keyID is %d bytes, which exceeds the max size of %d", len(id), maxKeyIDBytes)
	}
	return nil
}

// validateDEKSource checks an encrypted data key: not empty, at most
// 1 KiB.
func validateDEKSource(b []byte) error {
	switch {
	case len(b) == 0:
		return errors.New("encrypted DEK source is empty")
	case len(b) > maxDEKSourceBytes:
		return fmt.Errorf("encrypted DEK source is %d bytes, which exceeds the max size of %d", len(b), maxDEKSourceBytes)
	}
	return nil
}

// validateAnnotations checks a plugin's annotations: keys are fully
// qualified domain names, keys and values at most 32 KiB in all.
func validateAnnotations(a map[string][]byte) error {
	size := 0
	for k, v := range a {
		if errs := validation.IsFullyQualifiedDomainName(nil, k); len(errs) > 0 {
			return fmt.Errorf("annotation key %q: %w", k, errs.ToAggregate())
		}
		size += len(k) + len(v)
	}
	if size > maxAnnotationsBytes {
		return fmt.Errorf("annotations are %d bytes, which exceeds the max size of %d", size, maxAnnotationsBytes)
	}
	return nil
}
