package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// continueToken is the state of a chunked list in the format the gateway
// uses for lists it serves from the store (kube-apiserver's: base64 of
// JSON): "rv" is the revision every chunk reads, "start" the next key
// relative to the list's prefix. Either tier can continue the other's
// tokens. (The encoding belongs in lib/kube; it is duplicated here until
// it moves.)
type continueToken struct {
	APIVersion string `json:"v"`
	Revision   int64  `json:"rv"`
	Start      string `json:"start"`
}

func encodeContinue(rev int64, nextKey, prefix string) (string, error) {
	if !strings.HasPrefix(nextKey, prefix) {
		return "", fmt.Errorf("continue key %q outside prefix %q", nextKey, prefix)
	}
	b, err := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", Revision: rev, Start: strings.TrimPrefix(nextKey, prefix)})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeContinue returns the revision and the absolute start key.
func decodeContinue(tok, prefix string) (int64, string, error) {
	bad := func(why string) (int64, string, error) {
		return 0, "", apierrors.NewBadRequest("invalid continue token: " + why)
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return bad("not base64")
	}
	var t continueToken
	if err := json.Unmarshal(b, &t); err != nil {
		return bad("not JSON")
	}
	if t.APIVersion != "meta.k8s.io/v1" {
		return bad("unknown version")
	}
	if t.Revision <= 0 {
		return bad("no resource version")
	}
	if strings.Contains(t.Start, "/../") || strings.HasPrefix(t.Start, "../") || strings.HasPrefix(t.Start, "/") {
		return bad("start key escapes the collection")
	}
	return t.Revision, prefix + t.Start, nil
}
