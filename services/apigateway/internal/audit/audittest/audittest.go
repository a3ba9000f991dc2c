// Package audittest gives the gateway's tests an audit.Auditor that
// writes its events to a log file, and a reader of that file, so that a
// test asserts the events as a log backend's reader sees them. Its
// helpers fail the test on an error.
package audittest

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// LogFile returns an Auditor with the audit policy document policy that
// logs to a file in a temporary directory of t, closed when t ends, and
// events, which reads every event the file holds.
func LogFile(t testing.TB, policy string) (a *audit.Auditor, events func() []auditv1.Event) {
	t.Helper()
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pf, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	a, err := audit.New(audit.Options{PolicyFile: pf, Log: audit.LogOptions{Path: logPath}}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, func() []auditv1.Event {
		t.Helper()
		f, err := os.Open(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var evs []auditv1.Event
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			var ev auditv1.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("%v: %s", err, sc.Text())
			}
			evs = append(evs, ev)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return evs
	}
}
