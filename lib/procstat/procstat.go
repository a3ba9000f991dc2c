// Package procstat reads a process's CPU time and resident memory from
// Linux's /proc, for load tests that report a server's cost per request.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ).
const clockTicks = 100

// CPU returns the user + system CPU time process pid has used.
func CPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): state is field 3, utime 14 and stime 15.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad CPU times", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// RSS returns the resident set size of process pid, in bytes (VmRSS of
// /proc/<pid>/status).
func RSS(pid int) (int64, error) {
	m, err := ReadMemory(pid)
	return m.RSS, err
}

// Memory is a process's resident memory by kind, in bytes.
type Memory struct {
	// RSS is the whole resident set (VmRSS): Anon + File + Shmem.
	RSS int64
	// Anon is the resident anonymous memory (RssAnon): heaps, stacks and
	// written private pages.
	Anon int64
	// File is the resident file-backed memory (RssFile), chiefly the
	// executable's mapped text and read-only data: clean pages of the
	// page cache, which the kernel may drop and read again.
	File int64
	// Shmem is the resident shared memory (RssShmem), including files of
	// tmpfs mapped by the process.
	Shmem int64
}

// ReadMemory returns process pid's resident memory by kind, from
// /proc/<pid>/status.
func ReadMemory(pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	fields := []struct {
		name string
		v    *int64
	}{{"VmRSS:", &m.RSS}, {"RssAnon:", &m.Anon}, {"RssFile:", &m.File}, {"RssShmem:", &m.Shmem}}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		for _, f := range fields {
			v, ok := strings.CutPrefix(line, f.name)
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return Memory{}, fmt.Errorf("/proc/%d/status: %s %w", pid, f.name, err)
			}
			*f.v = kb << 10
			found++
		}
	}
	if found != len(fields) {
		return Memory{}, fmt.Errorf("/proc/%d/status: %d of VmRSS, RssAnon, RssFile and RssShmem", pid, found)
	}
	return m, nil
}
