package audit

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"gopkg.in/natefinch/lumberjack.v2"
)

// LogOptions are kube-apiserver's --audit-log-* settings.
type LogOptions struct {
	// Path is the log file; "-" is standard output.
	Path string
	// MaxAge is the days to keep rotated files; MaxBackups the rotated
	// files to keep; MaxSize the megabytes at which the file is rotated.
	// All zero: the file is never rotated (kube-apiserver's default); 0
	// for MaxAge or MaxBackups alone: no limit.
	MaxAge, MaxBackups, MaxSize int
}

// LogSink writes events to a file as JSON lines, rotating it as
// configured (with lumberjack, as kube-apiserver does). Writes are
// synchronous: an event is in the file (the page cache) before the
// request goes on.
type LogSink struct {
	mu     sync.Mutex
	w      io.Writer
	closer io.Closer
	failed func(plugin string, n int, err error)
}

// NewLogSink opens the log of o, creating the file (mode 0600) and its
// directory if needed.
func NewLogSink(o LogOptions) (*LogSink, error) {
	if o.Path == "-" {
		return &LogSink{w: os.Stdout}, nil
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: log: %w", err)
	}
	// Fail now, not on the first event, when the file cannot be written.
	f, err := os.OpenFile(o.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: log: %w", err)
	}
	if o.MaxAge == 0 && o.MaxBackups == 0 && o.MaxSize == 0 {
		return &LogSink{w: f, closer: f}, nil
	}
	_ = f.Close()
	l := &lumberjack.Logger{Filename: o.Path, MaxAge: o.MaxAge, MaxBackups: o.MaxBackups, MaxSize: o.MaxSize}
	return &LogSink{w: l, closer: l}, nil
}

func (s *LogSink) reportFailures(failed func(string, int, error)) { s.failed = failed }

// Write appends one event line.
func (s *LogSink) Write(event []byte) {
	s.mu.Lock()
	_, err := s.w.Write(event)
	s.mu.Unlock()
	if err != nil && s.failed != nil {
		s.failed("log", 1, err)
	}
}

// Close closes the file.
func (s *LogSink) Close() error {
	if s.closer == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closer.Close()
}
