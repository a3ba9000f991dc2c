package resources

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// continueToken is the state of a chunked list, in the format
// kube-apiserver uses (base64 of JSON), so clients that inspect it are not
// surprised: "rv" is the revision every chunk is read at, "start" the next
// key relative to the list's prefix.
type continueToken struct {
	APIVersion string `json:"v"`
	Revision   int64  `json:"rv"`
	Start      string `json:"start"`
}

// inconsistentRevision in a continue token continues at the latest
// revision (kube-apiserver writes -1 for the same purpose).
const inconsistentRevision = -1

type decodedContinue struct {
	Revision int64
	StartKey string
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

func decodeContinue(tok, prefix string) (decodedContinue, error) {
	bad := func(why string) (decodedContinue, error) {
		return decodedContinue{}, apierrors.NewBadRequest("invalid continue token: " + why)
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
	if t.Revision <= 0 && t.Revision != inconsistentRevision {
		return bad("no resource version")
	}
	if strings.Contains(t.Start, "/../") || strings.HasPrefix(t.Start, "../") || strings.HasPrefix(t.Start, "/") {
		return bad("start key escapes the collection")
	}
	return decodedContinue{Revision: t.Revision, StartKey: prefix + t.Start}, nil
}
