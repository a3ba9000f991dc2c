package app

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/meridian-cp/meridian/services/store/internal/disk"
)

// fakeDisk is a vfs.FS over the real filesystem that models a disk with a
// byte budget, for disk-full tests:
//
//   - Each file has an allocated size; Write, WriteAt and Preallocate that
//     extend it charge the growth to the budget and fail with ENOSPC (an
//     *os.PathError, as the kernel's) when the budget does not cover it.
//     Rewrites within the allocated size (a recycled WAL) are free.
//     Remove gives a file's allocation back, so deleting the ballast frees
//     space, as on a real disk.
//   - GetDiskUsage reports the budget plus statfsExtra: a positive extra
//     models an optimistic statfs (another process writing, thin
//     provisioning), so that writes are admitted and then hit ENOSPC.
//   - failAll makes every write, create and sync fail with ENOSPC whatever
//     the budget: a disk on which nothing can be freed (and, for Sync, the
//     delayed-allocation case where ENOSPC surfaces at fsync).
type fakeDisk struct {
	vfs.FS
	failAll atomic.Bool

	mu          sync.Mutex
	avail       int64
	statfsExtra int64
	alloc       map[string]int64 // allocated bytes per file
}

var _ vfs.FS = (*fakeDisk)(nil)

func newFakeDisk(avail int64) *fakeDisk {
	return &fakeDisk{FS: vfs.Default, avail: avail, alloc: map[string]int64{}}
}

// set sets the budget and the statfs surplus, and returns once admissions
// decide on a reading taken after the change (they share one for up to
// disk.DefaultMaxStaleness).
func (d *fakeDisk) set(avail, statfsExtra int64) {
	d.mu.Lock()
	d.avail, d.statfsExtra = avail, statfsExtra
	d.mu.Unlock()
	time.Sleep(2 * disk.DefaultMaxStaleness)
}

func enospc(op, name string) error { return &os.PathError{Op: op, Path: name, Err: syscall.ENOSPC} }

// allocatedLocked returns name's allocation, the file's size for a file
// the fake has not seen.
func (d *fakeDisk) allocatedLocked(name string) int64 {
	if a, ok := d.alloc[name]; ok {
		return a
	}
	if st, err := d.FS.Stat(name); err == nil {
		return st.Size()
	}
	return 0
}

// grow extends name's allocation to end, or fails with ENOSPC.
func (d *fakeDisk) grow(op, name string, end int64) error {
	if d.failAll.Load() {
		return enospc(op, name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.allocatedLocked(name)
	if end <= a {
		d.alloc[name] = a
		return nil
	}
	if end-a > d.avail {
		return enospc(op, name)
	}
	d.avail -= end - a
	d.alloc[name] = end
	return nil
}

// release gives name's allocation back.
func (d *fakeDisk) release(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.avail += d.allocatedLocked(name)
	delete(d.alloc, name)
}

func (d *fakeDisk) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &fakeFile{File: f, d: d, name: name}, nil
}

func (d *fakeDisk) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if d.failAll.Load() {
		return nil, enospc("open", name)
	}
	d.release(name) // truncated
	f, err := d.FS.Create(name, c)
	if err == nil {
		d.mu.Lock()
		d.alloc[name] = 0
		d.mu.Unlock()
	}
	return d.wrap(name, f, err)
}

func (d *fakeDisk) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := d.FS.OpenReadWrite(name, c, opts...)
	return d.wrap(name, f, err)
}

func (d *fakeDisk) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if d.failAll.Load() {
		return nil, enospc("open", newname)
	}
	d.rename(oldname, newname)
	f, err := d.FS.ReuseForWrite(oldname, newname, c)
	return d.wrap(newname, f, err)
}

func (d *fakeDisk) Rename(oldname, newname string) error {
	d.rename(oldname, newname)
	return d.FS.Rename(oldname, newname)
}

func (d *fakeDisk) rename(oldname, newname string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.alloc[newname] = d.allocatedLocked(oldname)
	delete(d.alloc, oldname)
}

func (d *fakeDisk) Remove(name string) error {
	if _, err := d.FS.Stat(name); err == nil {
		d.release(name)
	}
	return d.FS.Remove(name)
}

func (d *fakeDisk) GetDiskUsage(string) (vfs.DiskUsage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	avail := uint64(max(d.avail, 0) + d.statfsExtra)
	return vfs.DiskUsage{AvailBytes: avail, TotalBytes: avail + 1<<30, UsedBytes: 1 << 30}, nil
}

func (d *fakeDisk) Unwrap() vfs.FS { return d.FS }

// fakeFile charges the growth of its file to its disk.
type fakeFile struct {
	vfs.File
	d    *fakeDisk
	name string
	off  int64 // of sequential writes
}

func (f *fakeFile) Write(p []byte) (int, error) {
	if err := f.d.grow("write", f.name, f.off+int64(len(p))); err != nil {
		return 0, err
	}
	n, err := f.File.Write(p)
	f.off += int64(n)
	return n, err
}

func (f *fakeFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.d.grow("write", f.name, off+int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *fakeFile) Preallocate(off, n int64) error {
	if err := f.d.grow("fallocate", f.name, off+n); err != nil {
		return err
	}
	return f.File.Preallocate(off, n)
}

func (f *fakeFile) Sync() error {
	if f.d.failAll.Load() {
		return enospc("sync", f.name)
	}
	return f.File.Sync()
}

func (f *fakeFile) SyncData() error {
	if f.d.failAll.Load() {
		return enospc("sync", f.name)
	}
	return f.File.SyncData()
}

func (f *fakeFile) SyncTo(length int64) (bool, error) {
	if f.d.failAll.Load() {
		return false, enospc("sync", f.name)
	}
	return f.File.SyncTo(length)
}
