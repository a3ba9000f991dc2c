// Package continuetoken encodes the state of a chunked list in a continue
// token, in kube-apiserver's format (base64 of JSON): "rv" is the revision
// every chunk is read at, "start" the next key relative to the list's key
// prefix. The gateway and watchfanout share it, so either can continue
// the other's lists.
package continuetoken

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Inconsistent in a token continues at the latest revision rather than the
// first chunk's (kube-apiserver writes -1 for the same purpose): what a 410
// for an expired token offers.
const Inconsistent = -1

type token struct {
	APIVersion string `json:"v"`
	Revision   int64  `json:"rv"`
	Start      string `json:"start"`
}

// Encode returns the token that continues a list of prefix at revision rev
// from key nextKey.
func Encode(rev int64, nextKey, prefix string) (string, error) {
	if !strings.HasPrefix(nextKey, prefix) {
		return "", fmt.Errorf("continuetoken: key %q outside prefix %q", nextKey, prefix)
	}
	b, err := json.Marshal(token{APIVersion: "meta.k8s.io/v1", Revision: rev, Start: strings.TrimPrefix(nextKey, prefix)})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Decode returns a token's revision (Inconsistent or positive) and the
// absolute key to continue from. A malformed token, or one whose key would
// escape prefix, is a 400 BadRequest.
func Decode(tok, prefix string) (rev int64, start string, err error) {
	bad := func(why string) (int64, string, error) {
		return 0, "", apierrors.NewBadRequest("invalid continue token: " + why)
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return bad("not base64")
	}
	var t token
	if err := json.Unmarshal(b, &t); err != nil {
		return bad("not JSON")
	}
	if t.APIVersion != "meta.k8s.io/v1" {
		return bad("unknown version")
	}
	if t.Revision <= 0 && t.Revision != Inconsistent {
		return bad("no resource version")
	}
	if strings.Contains(t.Start, "/../") || strings.HasPrefix(t.Start, "../") || strings.HasPrefix(t.Start, "/") {
		return bad("start key escapes the collection")
	}
	return t.Revision, prefix + t.Start, nil
}
