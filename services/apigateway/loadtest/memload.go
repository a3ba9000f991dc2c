package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/procstat"
)

// runMemory runs memoryAfterLoad on each target of spec (name=api-addr@pid,
// sharing dataDir's certificates), one after the other, as the admin.
// pprofSpec (name=host:port,...) names the targets whose heap profile is
// saved at the end of the idle wait.
func runMemory(dataDir, spec, pprofSpec string, n int, d, idle time.Duration, watchers, conns int) error {
	targets, err := parseCPUTargets(spec)
	if err != nil {
		return err
	}
	pprofAddrs := map[string]string{}
	if pprofSpec != "" {
		for _, s := range strings.Split(pprofSpec, ",") {
			name, addr, ok := strings.Cut(s, "=")
			if !ok {
				return fmt.Errorf("--memory-pprof: %q is not name=host:port", s)
			}
			pprofAddrs[name] = addr
		}
	}
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	fmt.Printf("%-10s %12s %12s %12s %12s\n", "target", "RSS start", "RSS peak", "RSS at end", "RSS idle")
	for _, t := range targets {
		r, err := memoryAfterLoad(tlsConf, "https://"+t.addr, t.pid, n, d, idle, watchers, conns)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if addr, ok := pprofAddrs[t.name]; ok {
			if err := saveHeapProfile("http://"+addr, t.name+"-idle.pb.gz"); err != nil {
				return fmt.Errorf("%s: heap profile: %w", t.name, err)
			}
		}
		fmt.Printf("%-10s %9.1f MB %9.1f MB %9.1f MB %9.1f MB\n", t.name, mb(r.start.RSS), mb(r.peak), mb(r.end), mb(r.idle.RSS))
		for _, s := range r.idleSteps {
			fmt.Printf("%-10s   idle %-6s %9.1f MB\n", t.name, s.after, mb(s.rss))
		}
		fmt.Printf("%-10s   idle CPU %v over %v (%.2f ms/s)\n", t.name, r.idleCPU, idle, float64(r.idleCPU)/float64(time.Millisecond)/idle.Seconds())
		for _, m := range []struct {
			when string
			procstat.Memory
		}{{"start", r.start}, {"idle", r.idle}} {
			fmt.Printf("%-10s   %-5s anonymous %.1f MB, file-backed %.1f MB, shared %.1f MB\n", t.name, m.when, mb(m.Anon), mb(m.File), mb(m.Shmem))
		}
	}
	return nil
}

// memResult is the server's RSS around memoryAfterLoad's loads: at their
// start, the highest sampled during them, when they ended (every client
// connection closed) and after the idle wait, with samples along it. At
// the start and after the idle wait it is split by kind: the anonymous
// memory against the executable's file-backed pages.
type memResult struct {
	start, idle procstat.Memory
	peak, end   int64
	idleSteps   []idleStep
	// idleCPU is the server CPU (user and system) over the idle wait.
	idleCPU time.Duration
}

type idleStep struct {
	after time.Duration
	rss   int64
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// memoryAfterLoad runs the loads of issue 24 against the gateway api and
// reports the RSS of the server process pid (/proc/<pid>/status, VmRSS,
// sampled every 100 ms): n ConfigMaps of about 1 KiB created in a
// namespace of their own (32 clients; kept when they exist), consistent
// GETs of one of them (8 clients, d), LISTs of all n (8 clients, d each:
// JSON whole, JSON in chunks of 500, JSON with resourceVersion=0,
// protobuf whole), and watchers watches of the namespace over conns
// HTTP/2 connections, held for d while 50 ConfigMaps are updated. Then
// every client connection is closed and the process left idle for idle,
// whose server CPU (/proc/<pid>/stat) it reports too.
func memoryAfterLoad(tlsConf *tls.Config, api string, pid, n int, d, idle time.Duration, watchers, conns int) (memResult, error) {
	var r memResult
	var err error
	if r.start, err = procstat.ReadMemory(pid); err != nil {
		return r, err
	}
	peak := samplePeakRSS(pid, r.start.RSS)
	loadErr := memLoads(tlsConf, api, n, d, watchers, conns)
	peakRSS := peak()
	if loadErr != nil {
		return r, loadErr
	}
	r.peak = peakRSS
	if r.end, err = procstat.RSS(pid); err != nil {
		return r, err
	}
	began := time.Now()
	cpu0, err := processCPU(pid)
	if err != nil {
		return r, err
	}
	for _, at := range []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second, 120 * time.Second} {
		if at > idle {
			break
		}
		time.Sleep(time.Until(began.Add(at)))
		v, err := procstat.RSS(pid)
		if err != nil {
			return r, err
		}
		r.idleSteps = append(r.idleSteps, idleStep{after: at, rss: v})
	}
	time.Sleep(time.Until(began.Add(idle)))
	if r.idle, err = procstat.ReadMemory(pid); err != nil {
		return r, err
	}
	cpu1, err := processCPU(pid)
	r.idleCPU = cpu1 - cpu0
	return r, err
}

// memLoads runs memoryAfterLoad's loads on clients of its own, whose
// connections are closed when it returns.
func memLoads(tlsConf *tls.Config, api string, n int, d time.Duration, watchers, conns int) error {
	tr := &http2.Transport{TLSClientConfig: tlsConf}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	const ns = "loadtest-memory"
	if err := seed(context.Background(), c, api, nil, ns, n); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	base := api + "/api/v1/namespaces/" + ns + "/configmaps"
	loads := []struct {
		name string
		op   func() (int, error)
	}{
		{"GET", func() (int, error) { return get(c, base+"/cm-00000", "application/json") }},
		{"LIST json", func() (int, error) { return get(c, base, "application/json") }},
		{"LIST json chunked", func() (int, error) { return chunked(c, base, "application/json") }},
		{"LIST json rv=0", func() (int, error) { return get(c, base+"?resourceVersion=0", "application/json") }},
		{"LIST protobuf", func() (int, error) { return get(c, base, "application/vnd.kubernetes.protobuf") }},
	}
	for _, l := range loads {
		if r := measure(d, 8, l.op); r.err != nil {
			return fmt.Errorf("%s: %w", l.name, r.err)
		}
	}
	return memWatches(tlsConf, c, base, d, watchers, conns)
}

// memWatches holds watchers JSON watches of base over conns connections
// of their own for d while c updates 50 of its objects, reading every
// event, and closes them all.
func memWatches(tlsConf *tls.Config, c *http.Client, base string, d time.Duration, watchers, conns int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trs := make([]*http2.Transport, conns)
	for i := range trs {
		trs[i] = &http2.Transport{TLSClientConfig: tlsConf}
		defer trs[i].CloseIdleConnections()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var started sync.WaitGroup
	errs := make(chan error, watchers)
	for i := range watchers {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"?watch=1&resourceVersion=0", nil)
			resp, err := (&http.Client{Transport: trs[i%conns]}).Do(req)
			started.Done()
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("watch: %s", resp.Status)
				return
			}
			s := bufio.NewScanner(resp.Body)
			s.Buffer(nil, 1<<20)
			for s.Scan() {
			}
		}()
	}
	started.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	value := strings.Repeat("y", 1000)
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%05d"},"data":{"v":"%s-%d"}}`, i%50, value, i)
		if _, err := send(c, http.MethodPut, fmt.Sprintf("%s/cm-%05d", base, i%50), "application/json", []byte(body), http.StatusOK); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// samplePeakRSS samples the RSS of process pid every 100 ms, from now
// until the returned function is called, which returns the highest RSS
// seen (at least start).
func samplePeakRSS(pid int, start int64) (stop func() int64) {
	var peak atomic.Int64
	peak.Store(start)
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if v, err := procstat.RSS(pid); err == nil && v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	return func() int64 {
		close(done)
		<-sampled
		return peak.Load()
	}
}
