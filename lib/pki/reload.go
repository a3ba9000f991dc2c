package pki

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultReloadInterval is how often, at most, a KeyPairReloader whose
// options leave Interval zero looks at its files.
const DefaultReloadInterval = 5 * time.Second

// ReloadOptions configure a KeyPairReloader. The zero value is usable.
type ReloadOptions struct {
	// Logger logs each reload and each failed one; nil means
	// slog.Default(). Nothing read from the files is logged but the
	// certificate's subject, serial number and expiry.
	Logger *slog.Logger
	// Interval is the least time between two looks at the files; 0 means
	// DefaultReloadInterval (5s).
	Interval time.Duration
	// Now returns the current time; nil means time.Now. Tests replace it
	// to step past Interval without waiting.
	Now func() time.Time
}

// KeyPairReloader serves a certificate and its key kept in two PEM files,
// and reads them again when either file changes, so that a service picks
// up a rotated certificate on its next handshake without a restart.
//
// Looking is lazy: a handshake (GetCertificate, GetClientCertificate) at
// least Interval after the last look stats both files, and reads them when
// either's inode, size or modification time differs from what it last
// read. A pair that cannot be read, does not parse or whose key does not
// match the certificate is logged once and skipped: the pair read before
// keeps being served until the files change again. Write the new files by
// rename (as `meridian pki issue` does) so that no handshake reads half a
// file; a handshake between the key's rename and the certificate's sees a
// mismatched pair, logs it, and the next look after the second rename
// loads both.
//
// A KeyPairReloader is safe for concurrent use; handshakes wait on each
// other only while one of them reads the files.
type KeyPairReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	interval          time.Duration
	now               func() time.Time

	// mu guards the pair served and what the last look saw.
	mu struct {
		sync.Mutex
		cert *tls.Certificate
		// certStat and keyStat describe the files as last read, whether
		// or not that read gave a usable pair; nil after a failed stat.
		certStat, keyStat os.FileInfo
		checked           time.Time
	}
}

// NewKeyPairReloader reads the pair in certFile and keyFile and returns a
// reloader serving it. It fails when the pair cannot be loaded now: a
// service must not start without a certificate.
func NewKeyPairReloader(certFile, keyFile string, opts ReloadOptions) (*KeyPairReloader, error) {
	r := &KeyPairReloader{certFile: certFile, keyFile: keyFile, log: opts.Logger, interval: opts.Interval, now: opts.Now}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.interval <= 0 {
		r.interval = DefaultReloadInterval
	}
	if r.now == nil {
		r.now = time.Now
	}
	cs, ks, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: load key pair %s: %w", certFile, err)
	}
	r.mu.cert, r.mu.certStat, r.mu.keyStat, r.mu.checked = &cert, cs, ks, r.now()
	return r, nil
}

// Certificate returns the pair to serve now, first reading the files
// again when they changed and Interval has passed since the last look.
func (r *KeyPairReloader) Certificate() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.mu.checked) >= r.interval {
		r.mu.checked = now
		r.reloadLocked()
	}
	return r.mu.cert
}

// GetCertificate is the tls.Config.GetCertificate of a server serving
// the pair.
func (r *KeyPairReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// GetClientCertificate is the tls.Config.GetClientCertificate of a client
// presenting the pair.
func (r *KeyPairReloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// reloadLocked reads the files when they changed since the last look.
func (r *KeyPairReloader) reloadLocked() {
	cs, ks, err := r.stat()
	if err != nil {
		if r.mu.certStat != nil {
			r.log.Error("pki: cannot look at the certificate files; serving the certificate read before",
				"cert_file", r.certFile, "key_file", r.keyFile, "error", err)
		}
		r.mu.certStat, r.mu.keyStat = nil, nil
		return
	}
	if sameFile(cs, r.mu.certStat) && sameFile(ks, r.mu.keyStat) {
		return
	}
	r.mu.certStat, r.mu.keyStat = cs, ks
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// tls's errors name what is wrong (no PEM data, a key that does
		// not match), never the bytes read.
		r.log.Error("pki: the changed certificate files hold no usable pair; serving the certificate read before",
			"cert_file", r.certFile, "key_file", r.keyFile, "error", err)
		return
	}
	r.mu.cert = &cert
	r.log.Info("pki: certificate reloaded", "cert_file", r.certFile,
		"subject", cert.Leaf.Subject.String(), "serial", cert.Leaf.SerialNumber.Text(16), "not_after", cert.Leaf.NotAfter)
}

func (r *KeyPairReloader) stat() (cert, key os.FileInfo, err error) {
	st, err := StatFiles(r.certFile, r.keyFile)
	if err != nil {
		return nil, nil, err
	}
	return st[0], st[1], nil
}

// StatFiles describes files as SameFiles compares them: a reloader keeps
// what it saw when it last read them, and reads them again when
// SameFiles reports a change. Every file must exist.
func StatFiles(paths ...string) ([]os.FileInfo, error) {
	st := make([]os.FileInfo, len(paths))
	var errs []error
	for i, p := range paths {
		fi, err := os.Stat(p)
		errs = append(errs, err)
		st[i] = fi
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return st, nil
}

// SameFiles reports whether a and b (from StatFiles) describe the same,
// unchanged files: same inodes, sizes and modification times. Files
// replaced by rename, as `meridian pki` writes them, are never the same.
func SameFiles(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameFile(a[i], b[i]) {
			return false
		}
	}
	return true
}

// sameFile reports whether a and b describe the same, unchanged file.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
