package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// logLines returns every line of the files in dir named like the log
// (audit.log and its rotated audit-<time>.log), checking each is an
// Event.
func logLines(t *testing.T, dir string) (files int, lines map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines = map[string]bool{}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files++
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev struct{ AuditID string }
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.AuditID == "" {
				t.Fatalf("%s: a line is not an event: %q", e.Name(), sc.Text())
			}
			lines[ev.AuditID] = true
		}
		f.Close()
	}
	return files, lines
}

// event1K is an event line of about 1 KiB.
func event1K(i int) []byte {
	return []byte(fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"id-%d","pad":%q}`+"\n", i, strings.Repeat("x", 1000)))
}

// TestLogRotation writes 2.5 MB of events to a log rotated at 1 MB: the
// events are split across the log and its backups, none lost or cut;
// with --audit-log-maxbackup 1, one backup stays.
func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	s, err := NewLogSink(LogOptions{Path: filepath.Join(dir, "audit.log"), MaxSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500
	for i := range n {
		s.Write(event1K(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, lines := logLines(t, dir)
	if files != 3 || len(lines) != n {
		t.Errorf("2500 events of 1 KiB, rotated at 1 MB: %d files, %d events; want 3 files and every event", files, len(lines))
	}
	info, err := os.Stat(filepath.Join(dir, "audit.log"))
	if err != nil || info.Size() > 1<<20 || info.Mode().Perm() != 0o600 {
		t.Errorf("the current log: %v, %d bytes, mode %v", err, info.Size(), info.Mode())
	}

	dir = t.TempDir()
	s, err = NewLogSink(LogOptions{Path: filepath.Join(dir, "audit.log"), MaxSize: 1, MaxBackups: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		s.Write(event1K(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// lumberjack removes old backups in the background after a rotation;
	// the deadline only bounds a hang.
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--audit-log-maxbackup 1: %d files remain", len(entries))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLogWithoutRotation appends to the file, which an earlier run's
// events stay in.
func TestLogWithoutRotation(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "audit.log")
	for run := range 2 {
		s, err := NewLogSink(LogOptions{Path: p})
		if err != nil {
			t.Fatal(err)
		}
		s.Write(event1K(run))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	files, lines := logLines(t, filepath.Dir(p))
	if files != 1 || !lines["id-0"] || !lines["id-1"] {
		t.Errorf("%d files, events %v", files, lines)
	}
	if _, err := NewLogSink(LogOptions{Path: filepath.Join(p, "not-a-dir", "audit.log")}); err == nil {
		t.Error("a log under a file opened")
	}
}
