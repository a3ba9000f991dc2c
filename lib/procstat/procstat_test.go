package procstat

import (
	"os"
	"testing"
)

// TestSelf: this process has used some CPU and holds some memory.
func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	_ = x
	cpu, err := CPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Errorf("CPU = %v, %v; want > 0", cpu, err)
	}
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("RSS = %d, %v; want at least 1 MiB", rss, err)
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil || m.RSS != m.Anon+m.File+m.Shmem || m.Anon <= 0 || m.File <= 0 {
		t.Errorf("ReadMemory = %+v, %v; want VmRSS = RssAnon + RssFile + RssShmem, anonymous and file-backed memory", m, err)
	}
	if _, err := CPU(-1); err == nil {
		t.Error("CPU of pid -1: no error")
	}
}
