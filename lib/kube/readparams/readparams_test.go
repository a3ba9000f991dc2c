package readparams

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// result is what a case expects: a read or a watch start, or the message
// of a 400 BadRequest.
type result struct {
	read  Read
	watch WatchStart
	err   string
}

func read(sem Semantic, rev int64) result { return result{read: Read{Semantic: sem, Revision: rev}} }

func cont(sem Semantic, rev int64, start string) result {
	return result{read: Read{Semantic: sem, Revision: rev, Start: start}}
}

func watch(sem Semantic, rev int64, initial, endBookmark bool) result {
	return result{watch: WatchStart{Read: Read{Semantic: sem, Revision: rev}, Initial: initial, EndBookmark: endBookmark}}
}

func fails(msg string) result { return result{err: msg} }

// The 400 messages, as kube-apiserver words them (clients and tests match
// them byte for byte).
var (
	errLimit          = fails("limit must not be negative")
	errMatchNoRV      = fails("resourceVersionMatch is forbidden unless resourceVersion is provided")
	errMatchBad       = fails(`resourceVersionMatch: unsupported value "Sometimes": supported values are "NotOlderThan" and "Exact"`)
	errExact0         = fails(`resourceVersionMatch "Exact" is forbidden for resourceVersion "0"`)
	errContRV         = fails("specifying resource version is not allowed when using continue")
	errContMatch      = fails("specifying resourceVersionMatch is not allowed when using continue")
	errToken          = fails("invalid continue token: not base64")
	errWatchMatchNoIE = fails("resourceVersionMatch NotOlderThan is only supported for watch with sendInitialEvents set")
	errWatchExact     = fails(`resourceVersionMatch "Exact" is not supported for watch`)
	errWatchBad       = fails(`resourceVersionMatch "Sometimes" is not supported for watch`)
	errIENoMatch      = fails("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
	errIENoBookmarks  = fails("sendInitialEvents requires allowWatchBookmarks=true")
)

func errRV(rv string) result {
	return fails(fmt.Sprintf("invalid resourceVersion %q: it must be an integer", rv))
}

const prefix = "/registry/configmaps/ns/"

// check compares a Read or a WatchStart (got) and its error with want.
func check[T comparable](t *testing.T, name string, got T, err error, want result, wantValue T) {
	t.Helper()
	if want.err != "" {
		var st apierrors.APIStatus
		if !errors.As(err, &st) {
			t.Errorf("%s: got %+v, %v; want 400 %q", name, got, err, want.err)
			return
		}
		s := st.Status()
		if s.Code != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest || s.Message != want.err {
			t.Errorf("%s: got %d %s %q; want 400 BadRequest %q", name, s.Code, s.Reason, s.Message, want.err)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v; want %+v", name, err, wantValue)
		return
	}
	if got != wantValue {
		t.Errorf("%s: got %+v; want %+v", name, got, wantValue)
	}
}

func token(t *testing.T, rev int64, key, prefix string) string {
	t.Helper()
	tok, err := continuetoken.Encode(rev, key, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestMatrix runs every combination of resourceVersion (unset, "0", N,
// garbage, negative), resourceVersionMatch (unset, NotOlderThan, Exact,
// garbage), continue (absent, valid, inconsistent, malformed, issued for
// another prefix) and limit (absent, positive, negative) for a list; the
// resourceVersions for a get; and resourceVersion × resourceVersionMatch ×
// sendInitialEvents (unset, true, false) × allowWatchBookmarks for a watch.
func TestMatrix(t *testing.T) {
	const (
		nto   = "NotOlderThan"
		exact = "Exact"
		junk  = "Sometimes"
	)
	continues := []struct{ name, token string }{
		{"absent", ""},
		{"valid", token(t, 7, prefix+"b", prefix)},
		{"inconsistent", token(t, continuetoken.Inconsistent, prefix+"b", prefix)},
		{"malformed", "!!"},
		// A token carries its start key relative to the list's prefix:
		// one issued for another collection continues this one from the
		// same relative key.
		{"another prefix", token(t, 9, "/registry/secrets/ns/x", "/registry/secrets/ns/")},
	}
	// The continue results when the token is accepted: one per column of
	// continues above.
	tokenReads := [5]result{{}, cont(Continue, 7, prefix+"b"), cont(ContinueInconsistent, 0, prefix+"b"), errToken, cont(Continue, 9, prefix+"x")}
	withToken := func(absent result) [5]result {
		return [5]result{absent, tokenReads[1], tokenReads[2], tokenReads[3], tokenReads[4]}
	}
	allOf := func(absent, withAny result) [5]result {
		return [5]result{absent, withAny, withAny, withAny, withAny}
	}

	t.Run("list", func(t *testing.T) {
		// One row per resourceVersion × match; one column per continue.
		// Limit absent or positive does not change the read (it is
		// carried in Read.Limit), except N without a match, which the
		// spec's table reads as Exact with a limit; a negative limit
		// fails first.
		rows := []struct {
			rv, match string
			want      [5]result
		}{
			{"", "", withToken(read(MostRecent, 0))},
			{"", nto, allOf(errMatchNoRV, errContMatch)},
			{"", exact, allOf(errMatchNoRV, errContMatch)},
			{"", junk, allOf(errMatchBad, errContMatch)},
			{"0", "", withToken(read(Any, 0))},
			{"0", nto, allOf(read(Any, 0), errContMatch)},
			{"0", exact, allOf(errExact0, errContMatch)},
			{"0", junk, allOf(errMatchBad, errContMatch)},
			{"5", "", allOf(read(NotOlderThan, 5), errContRV)},
			{"5", nto, allOf(read(NotOlderThan, 5), errContRV)},
			{"5", exact, allOf(read(Exact, 5), errContRV)},
			{"5", junk, allOf(errMatchBad, errContRV)},
			{"x", "", allOf(errRV("x"), errContRV)},
			{"x", nto, allOf(errRV("x"), errContRV)},
			{"x", exact, allOf(errRV("x"), errContRV)},
			{"x", junk, allOf(errMatchBad, errContRV)},
			{"-1", "", allOf(errRV("-1"), errContRV)},
			{"-1", nto, allOf(errRV("-1"), errContRV)},
			{"-1", exact, allOf(errRV("-1"), errContRV)},
			{"-1", junk, allOf(errMatchBad, errContRV)},
		}
		for _, row := range rows {
			for i, c := range continues {
				for _, limit := range []int64{0, 3, -1} {
					name := fmt.Sprintf("rv=%q match=%q continue=%s limit=%d", row.rv, row.match, c.name, limit)
					want := row.want[i]
					switch {
					case limit < 0:
						want = errLimit
					case limit > 0 && row.rv == "5" && row.match == "" && c.token == "":
						want = read(Exact, 5)
					}
					wantRead := want.read
					wantRead.Limit = limit
					got, err := List(ListQuery{ResourceVersion: row.rv, ResourceVersionMatch: row.match, Continue: c.token, Limit: limit}, prefix)
					check(t, name, got, err, want, wantRead)
				}
			}
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, c := range []struct {
			rv   string
			want result
		}{
			{"", read(MostRecent, 0)},
			{"0", read(Any, 0)},
			{"5", read(NotOlderThan, 5)},
			{"x", errRV("x")},
			{"-1", errRV("-1")},
		} {
			got, err := Get(c.rv)
			check(t, fmt.Sprintf("rv=%q", c.rv), got, err, c.want, c.want.read)
		}
	})

	t.Run("watch", func(t *testing.T) {
		yes, no := true, false
		// Columns: sendInitialEvents unset, true with bookmarks, true
		// without bookmarks, false. allowWatchBookmarks changes nothing
		// else: the other columns are run with it both ways.
		type cols [4]result
		rows := []struct {
			rv, match string
			want      cols
		}{
			{"", "", cols{watch(MostRecent, 0, true, false), errIENoMatch, errIENoMatch, errIENoMatch}},
			{"", nto, cols{errWatchMatchNoIE, watch(MostRecent, 0, true, true), errIENoBookmarks, watch(MostRecent, 0, false, false)}},
			{"", exact, cols{errWatchExact, errWatchExact, errWatchExact, errWatchExact}},
			{"", junk, cols{errWatchBad, errWatchBad, errWatchBad, errWatchBad}},
			{"0", "", cols{watch(Any, 0, true, false), errIENoMatch, errIENoMatch, errIENoMatch}},
			{"0", nto, cols{errWatchMatchNoIE, watch(Any, 0, true, true), errIENoBookmarks, watch(Any, 0, false, false)}},
			{"0", exact, cols{errWatchExact, errWatchExact, errWatchExact, errWatchExact}},
			{"0", junk, cols{errWatchBad, errWatchBad, errWatchBad, errWatchBad}},
			{"5", "", cols{watch(Exact, 5, false, false), errIENoMatch, errIENoMatch, errIENoMatch}},
			{"5", nto, cols{errWatchMatchNoIE, watch(NotOlderThan, 5, true, true), errIENoBookmarks, watch(Exact, 5, false, false)}},
			{"5", exact, cols{errWatchExact, errWatchExact, errWatchExact, errWatchExact}},
			{"5", junk, cols{errWatchBad, errWatchBad, errWatchBad, errWatchBad}},
			{"x", "", cols{errRV("x"), errRV("x"), errRV("x"), errRV("x")}},
			{"x", nto, cols{errRV("x"), errRV("x"), errRV("x"), errRV("x")}},
			{"x", exact, cols{errRV("x"), errRV("x"), errRV("x"), errRV("x")}},
			{"x", junk, cols{errRV("x"), errRV("x"), errRV("x"), errRV("x")}},
			{"-1", "", cols{errRV("-1"), errRV("-1"), errRV("-1"), errRV("-1")}},
			{"-1", nto, cols{errRV("-1"), errRV("-1"), errRV("-1"), errRV("-1")}},
			{"-1", exact, cols{errRV("-1"), errRV("-1"), errRV("-1"), errRV("-1")}},
			{"-1", junk, cols{errRV("-1"), errRV("-1"), errRV("-1"), errRV("-1")}},
		}
		queries := []struct {
			name      string
			initial   *bool
			bookmarks []bool
		}{
			{"sendInitialEvents unset", nil, []bool{false, true}},
			{"sendInitialEvents=true", &yes, []bool{true}},
			{"sendInitialEvents=true", &yes, []bool{false}},
			{"sendInitialEvents=false", &no, []bool{false, true}},
		}
		for _, row := range rows {
			for i, q := range queries {
				for _, bookmarks := range q.bookmarks {
					name := fmt.Sprintf("rv=%q match=%q %s allowWatchBookmarks=%v", row.rv, row.match, q.name, bookmarks)
					got, err := Watch(WatchQuery{ResourceVersion: row.rv, ResourceVersionMatch: row.match, SendInitialEvents: q.initial, AllowWatchBookmarks: bookmarks})
					check(t, name, got, err, row.want[i], row.want[i].watch)
				}
			}
		}
	})
}

func TestSemanticString(t *testing.T) {
	if got := Exact.String(); got != "Exact" {
		t.Errorf("Exact.String() = %q", got)
	}
	if got := Semantic(0).String(); got != "Semantic(0)" {
		t.Errorf("Semantic(0).String() = %q", got)
	}
}
