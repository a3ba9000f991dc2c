package main

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/net/http2"

	"github.com/meridian-cp/meridian/lib/pki"
)

// runPathCPU measures the server CPU time per GET of each of paths
// (comma-separated non-resource paths: health, discovery, /version) on
// the targets of spec (name=api-addr@pid,...), as the user of token, or
// without credentials when token is empty (system:anonymous, as a
// kubelet's probe may be), at each concurrency of levels (compareCPU).
func runPathCPU(dataDir, token, spec, paths string, d time.Duration, levels string, rounds int) error {
	targets, err := parseCPUTargets(spec)
	if err != nil {
		return err
	}
	pdir := filepath.Join(dataDir, "pki")
	var tlsConf *tls.Config
	if token == "" {
		pool, err := pki.LoadPool(filepath.Join(pdir, "api-ca.crt"))
		if err != nil {
			return err
		}
		tlsConf = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	} else if tlsConf, err = pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil); err != nil {
		return err
	}
	var rt http.RoundTripper = &http2.Transport{TLSClientConfig: tlsConf}
	if token != "" {
		rt = bearer{token: token, next: rt}
	}
	c := &http.Client{Transport: rt}
	measured := strings.Split(paths, ",")
	for _, cc := range concurrencies(levels) {
		if err := compareCPU(targets, measured, func(t *cpuTarget, path string) func() (int, error) {
			url := "https://" + t.addr + path
			return func() (int, error) { return get(c, url, "application/json") }
		}, d, cc, rounds); err != nil {
			return err
		}
	}
	return nil
}
