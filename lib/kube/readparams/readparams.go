// Package readparams turns the resourceVersion, resourceVersionMatch,
// continue and limit parameters of a get, list or watch into the read they
// ask for (a Read or a WatchStart), or into the 400 BadRequest
// kube-apiserver answers for them. It follows the resourceVersion tables of
// the API concepts ("Semantics for get and list", "Semantics for watch").
// The gateway and watchfanout both parse requests with it, so a request gets
// the same answer from either.
//
// Errors are *apierrors.StatusError values with reason BadRequest.
package readparams

import (
	"fmt"
	"strconv"

	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Semantic is which state a read returns, in the terms of the API
// concepts' tables.
type Semantic int

const (
	// MostRecent (resourceVersion unset) is the current state, read
	// consistently.
	MostRecent Semantic = iota + 1
	// Any (resourceVersion "0") is whatever state the server holds, however
	// old.
	Any
	// NotOlderThan is a state at Read.Revision or later.
	NotOlderThan
	// Exact is the state at Read.Revision exactly; for a watch without
	// initial events, the changes after Read.Revision.
	Exact
	// Continue is the next chunk of a list: the state at the continue
	// token's Read.Revision, from key Read.Start.
	Continue
	// ContinueInconsistent is the next chunk of a list from key Read.Start
	// at the current revision: the token a 410 for an expired continue
	// token carries (continuetoken.Inconsistent).
	ContinueInconsistent
)

var semanticNames = map[Semantic]string{
	MostRecent:           "MostRecent",
	Any:                  "Any",
	NotOlderThan:         "NotOlderThan",
	Exact:                "Exact",
	Continue:             "Continue",
	ContinueInconsistent: "ContinueInconsistent",
}

// String returns the semantic's name.
func (s Semantic) String() string {
	if n, ok := semanticNames[s]; ok {
		return n
	}
	return "Semantic(" + strconv.Itoa(int(s)) + ")"
}

// Read is a get or a list, resolved.
type Read struct {
	// Semantic is which state to read.
	Semantic Semantic
	// Revision is the revision of NotOlderThan, Exact and Continue; 0
	// otherwise.
	Revision int64
	// Start is the absolute key Continue and ContinueInconsistent read
	// from; "" otherwise.
	Start string
	// Limit is the most items a list returns; 0 returns all.
	Limit int64
}

// Get resolves the resourceVersion of a get: unset is MostRecent, "0" Any,
// N NotOlderThan N.
func Get(resourceVersion string) (Read, error) {
	sem, rev, err := parseResourceVersion(resourceVersion)
	return Read{Semantic: sem, Revision: rev}, err
}

// ListQuery holds a list's read parameters as the query gave them.
type ListQuery struct {
	// ResourceVersion is the resourceVersion parameter.
	ResourceVersion string
	// ResourceVersionMatch is the resourceVersionMatch parameter.
	ResourceVersionMatch string
	// Continue is the continue token.
	Continue string
	// Limit is the limit parameter; 0 when absent.
	Limit int64
}

// List resolves a list's parameters. prefix is the key prefix the list
// reads, which a continue token's start key is relative to.
//
// Without a continue token:
//
//	match \ resourceVersion   unset        "0"    N
//	unset                     MostRecent   Any    NotOlderThan N (Exact N with a limit)
//	NotOlderThan              400          Any    NotOlderThan N
//	Exact                     400          400    Exact N
//
// With one, resourceVersion must be unset or "0" and match unset; the read
// is Continue at the token's revision, or ContinueInconsistent. A negative
// limit fails before anything else is looked at.
func List(q ListQuery, prefix string) (Read, error) {
	if q.Limit < 0 {
		return Read{}, apierrors.NewBadRequest("limit must not be negative")
	}
	if q.Continue != "" {
		return continued(q, prefix)
	}
	match := q.ResourceVersionMatch
	switch match {
	case "", string(metav1.ResourceVersionMatchNotOlderThan), string(metav1.ResourceVersionMatchExact):
	default:
		return Read{}, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch: unsupported value %q: supported values are %q and %q",
			match, metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact))
	}
	if q.ResourceVersion == "" && match != "" {
		return Read{}, apierrors.NewBadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided")
	}
	sem, rev, err := parseResourceVersion(q.ResourceVersion)
	if err != nil {
		return Read{}, err
	}
	switch {
	case match == string(metav1.ResourceVersionMatchExact):
		if sem == Any {
			return Read{}, apierrors.NewBadRequest(`resourceVersionMatch "Exact" is forbidden for resourceVersion "0"`)
		}
		sem = Exact
	case match == "" && sem == NotOlderThan && q.Limit > 0:
		// A first chunk at N without a match is read at exactly N: the
		// table's legacy row, which paginating clients of old servers
		// rely on.
		sem = Exact
	}
	return Read{Semantic: sem, Revision: rev, Limit: q.Limit}, nil
}

// continued resolves a list with a continue token. resourceVersion "0"
// is tolerated with a token, as kube-apiserver does.
func continued(q ListQuery, prefix string) (Read, error) {
	if rv := q.ResourceVersion; rv != "" && rv != "0" {
		return Read{}, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
	}
	if q.ResourceVersionMatch != "" {
		return Read{}, apierrors.NewBadRequest("specifying resourceVersionMatch is not allowed when using continue")
	}
	rev, start, err := continuetoken.Decode(q.Continue, prefix)
	if err != nil {
		return Read{}, err
	}
	if rev == continuetoken.Inconsistent {
		return Read{Semantic: ContinueInconsistent, Start: start, Limit: q.Limit}, nil
	}
	return Read{Semantic: Continue, Revision: rev, Start: start, Limit: q.Limit}, nil
}

// WatchQuery holds a watch's read parameters as the query gave them.
type WatchQuery struct {
	// ResourceVersion is the resourceVersion parameter.
	ResourceVersion string
	// ResourceVersionMatch is the resourceVersionMatch parameter.
	ResourceVersionMatch string
	// SendInitialEvents is the sendInitialEvents parameter; nil when
	// absent.
	SendInitialEvents *bool
	// AllowWatchBookmarks is the allowWatchBookmarks parameter.
	AllowWatchBookmarks bool
}

// WatchStart is where a watch starts, resolved.
type WatchStart struct {
	// Read is the state the watch starts from: MostRecent, Any,
	// NotOlderThan (with initial events) or Exact (the changes after
	// Revision). Start and Limit are unused.
	Read
	// Initial sends the state as ADDED events before the changes.
	Initial bool
	// EndBookmark ends the initial events with a bookmark annotated
	// k8s.io/initial-events-end (sendInitialEvents=true).
	EndBookmark bool
}

// Watch resolves a watch's parameters:
//
//	sendInitialEvents unset:  unset → the MostRecent state, then changes
//	                          "0"   → Any state, then changes
//	                          N     → the changes after N (Exact)
//	sendInitialEvents=true:   the state NotOlderThan N (unset: MostRecent,
//	                          "0": Any), the initial-events-end bookmark,
//	                          then changes
//	sendInitialEvents=false:  no state; the changes after N (unset: after
//	                          the MostRecent revision, "0": after Any)
//
// resourceVersionMatch must be NotOlderThan when sendInitialEvents is
// given, and unset otherwise; sendInitialEvents=true needs
// allowWatchBookmarks=true.
func Watch(q WatchQuery) (WatchStart, error) {
	sem, rev, err := parseResourceVersion(q.ResourceVersion)
	if err != nil {
		return WatchStart{}, err
	}
	switch match := q.ResourceVersionMatch; match {
	case "":
	case string(metav1.ResourceVersionMatchNotOlderThan):
		if q.SendInitialEvents == nil {
			return WatchStart{}, apierrors.NewBadRequest("resourceVersionMatch NotOlderThan is only supported for watch with sendInitialEvents set")
		}
	default:
		return WatchStart{}, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch %q is not supported for watch", match))
	}
	if q.SendInitialEvents == nil {
		if sem == NotOlderThan {
			return WatchStart{Read: Read{Semantic: Exact, Revision: rev}}, nil
		}
		return WatchStart{Read: Read{Semantic: sem}, Initial: true}, nil
	}
	if q.ResourceVersionMatch != string(metav1.ResourceVersionMatchNotOlderThan) {
		return WatchStart{}, apierrors.NewBadRequest("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
	}
	if !*q.SendInitialEvents {
		if sem == NotOlderThan {
			sem = Exact
		}
		return WatchStart{Read: Read{Semantic: sem, Revision: rev}}, nil
	}
	if !q.AllowWatchBookmarks {
		return WatchStart{}, apierrors.NewBadRequest("sendInitialEvents requires allowWatchBookmarks=true")
	}
	return WatchStart{Read: Read{Semantic: sem, Revision: rev}, Initial: true, EndBookmark: true}, nil
}

// parseResourceVersion reads a resourceVersion: unset is MostRecent, "0"
// Any, a positive integer N NotOlderThan N.
func parseResourceVersion(rv string) (Semantic, int64, error) {
	if rv == "" {
		return MostRecent, 0, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: it must be an integer", rv))
	}
	if n == 0 {
		return Any, 0, nil
	}
	return NotOlderThan, n, nil
}
