package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/meridian-cp/meridian/lib/pki"
)

// runIdleWatches runs idleWatches as the admin of the meridian whose data
// dir is dataDir.
func runIdleWatches(dataDir, api string, watches, conns, pid int, pprof string) error {
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	return idleWatches(tlsConf, api, watches, conns, pid, pprof)
}

// idleSettle bounds the wait for the server's RSS to settle once every
// watch is open: it is settled when it moved less than 1 % over
// idleSettleStep, or after idleSettleMax.
const (
	idleSettleStep = 3 * time.Second
	idleSettleMax  = 60 * time.Second
)

// idleWatches measures what an idle watch costs the server: it opens
// watches JSON watches of an empty namespace (from its current
// resourceVersion, so no event ever comes) over conns HTTP/2 connections,
// waits for every response's headers and for the server's RSS to settle,
// and reports the RSS growth per watch (/proc/<pid>/status). With pprof
// (the server's --pprof address) it also reports the goroutines per watch,
// runs a garbage collection before each RSS reading, so that garbage of
// the opening does not count, and saves the server's heap profile with the
// watches open to idle-watches.heap.pprof.
func idleWatches(tlsConf *tls.Config, api string, watches, conns, pid int, pprof string) error {
	if pid <= 0 {
		return fmt.Errorf("--idle-watches needs --watch-pid")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	base, rv, err := watchNamespace(admin, api, "idlewatch")
	if err != nil {
		return err
	}

	g0 := goroutines(pprof)
	rss0 := settledRSS(pid, pprof)
	ms0 := memStats(pprof)
	clients := make([]*http.Client, conns)
	for i := range clients {
		clients[i] = &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	}
	t0 := time.Now()
	var opened atomic.Int64
	var firstErr error
	var errOnce sync.Once
	bodies := make([]io.ReadCloser, watches)
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range min(watches, 256) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= watches {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"?watch=1&resourceVersion="+rv, nil)
				req.Header.Set("Accept", "application/json")
				resp, err := clients[i%conns].Do(req)
				if err == nil && resp.StatusCode != http.StatusOK {
					resp.Body.Close()
					err = fmt.Errorf("watch: %s", resp.Status)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				bodies[i] = resp.Body
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	defer func() {
		cancel()
		for _, b := range bodies {
			if b != nil {
				b.Close()
			}
		}
	}()
	if firstErr != nil {
		return fmt.Errorf("after %d watches: %w", opened.Load(), firstErr)
	}
	openedIn := time.Since(t0)
	rss1 := settledRSS(pid, pprof)
	ms1 := memStats(pprof)
	g1 := goroutines(pprof)
	if pprof != "" {
		if err := saveHeapProfile(pprof, "idle-watches.heap.pprof"); err != nil {
			return err
		}
	}
	fmt.Printf("idle watches: %d over %d connections, opened in %v\n", watches, conns, openedIn.Round(time.Millisecond))
	fmt.Printf("  server RSS %d → %d MiB: %.2f KiB per watch\n", rss0>>20, rss1>>20, float64(rss1-rss0)/1024/float64(watches))
	if g0 > 0 && g1 > 0 {
		fmt.Printf("  server goroutines %d → %d: %.2f per watch\n", g0, g1, float64(g1-g0)/float64(watches))
	}
	if ms0 != nil && ms1 != nil {
		per := func(k string) float64 { return float64(ms1[k]-ms0[k]) / 1024 / float64(watches) }
		fmt.Printf("  per watch (KiB): heap live %.2f, heap in use %.2f, stacks %.2f, spans+GC+other %.2f\n",
			per("HeapAlloc"), per("HeapInuse"), per("Stack"), per("MSpan")+per("GCSys")+per("OtherSys")+per("BuckHashSys"))
	}
	return nil
}

// memStats returns the server's runtime.MemStats fields, as its heap
// profile's debug form lists them ("# Name = value"; for Stack and MSpan
// "# Name = inuse / sys", of which the in-use figure is kept), or nil
// without pprof.
func memStats(pprof string) map[string]int64 {
	if pprof == "" {
		return nil
	}
	resp, err := http.Get(pprof + "/debug/pprof/heap?debug=1")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var name string
		var v int64
		if _, err := fmt.Sscanf(sc.Text(), "# %s = %d", &name, &v); err == nil {
			m[name] = v
		}
	}
	return m
}

// settledRSS returns the RSS of process pid once it has settled (see
// idleSettle); with pprof, after a garbage collection.
func settledRSS(pid int, pprof string) int64 {
	read := func() int64 {
		if pprof != "" {
			// /debug/pprof/heap?gc=1 runs a collection before its profile.
			if resp, err := http.Get(pprof + "/debug/pprof/heap?gc=1"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		_, rss := procStats(pid)
		return rss
	}
	prev := read()
	for deadline := time.Now().Add(idleSettleMax); time.Now().Before(deadline); {
		time.Sleep(idleSettleStep)
		cur := read()
		if d := cur - prev; d < prev/100 && -d < prev/100 {
			return cur
		}
		prev = cur
	}
	return prev
}

// saveHeapProfile writes the server's heap profile, taken while the
// watches are open, to file.
func saveHeapProfile(pprof, file string) error {
	resp, err := http.Get(pprof + "/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}

// goroutines returns the server's goroutine count from its pprof address,
// or 0.
func goroutines(pprof string) int {
	if pprof == "" {
		return 0
	}
	resp, err := http.Get(pprof + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "goroutine profile: total %d", &n); err != nil {
		return 0
	}
	return n
}
