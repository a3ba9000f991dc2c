package app

import (
	"fmt"
	"log/slog"
)

// pebbleLogger sends pebble's logs to slog: Infof at debug level (pebble is
// chatty about flushes and compactions), Errorf at error level. Fatalf
// logs and panics: pebble calls it when it cannot go on — corruption, and
// any failed write or fsync of its WAL or MANIFEST (a commit error,
// ENOSPC included; see package internal/disk). Fatalf must not return:
// pebble's DB.Apply would then report the failed commit as a success.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic("pebble: " + msg)
}
