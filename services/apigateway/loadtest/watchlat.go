package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/procstat"
)

// runWatchLatency runs watchLatency as the admin of the meridian whose
// data dir is dataDir.
func runWatchLatency(dataDir, api string, watchers, conns, rate int, d time.Duration, pid int) error {
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	return watchLatency(tlsConf, api, watchers, conns, rate, d, pid)
}

// watchLatency measures watch delivery through the gateway: watchers
// watches of one namespace (JSON, from its current resourceVersion), spread
// over conns HTTP/2 connections, while one client creates ConfigMaps of
// about 1 KiB there at rate per second for d. The latency of an event at a
// watcher is from the create's response to the event's arrival there (an
// event that arrives before the response counts as 0), over every create
// and every watcher. With pid > 0 it also reports the server process's CPU
// per delivered event (/proc/<pid>/stat, from the first create to the last
// delivery) and its RSS.
func watchLatency(tlsConf *tls.Config, api string, watchers, conns, rate int, d time.Duration, pid int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	base, rv, err := watchNamespace(admin, api, "watchlat")
	if err != nil {
		return err
	}

	n := rate * int(d/time.Second)
	respAt := make([]atomic.Int64, n) // unix ns of each create's response
	arrive := make([][]int64, watchers)
	clients := make([]*http.Client, conns)
	for i := range clients {
		clients[i] = &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	}
	var started, done sync.WaitGroup
	var got atomic.Int64
	errs := make(chan error, watchers)
	for w := range watchers {
		arrive[w] = make([]int64, n)
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"?watch=1&resourceVersion="+rv, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := clients[w%conns].Do(req)
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
			readEvents(resp.Body, func(seq int) {
				if seq >= 0 && seq < n && arrive[w][seq] == 0 {
					arrive[w][seq] = time.Now().UnixNano()
					got.Add(1)
				}
			})
		}()
	}
	started.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	time.Sleep(time.Second) // every watch registered in the tier

	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"wl-%d"},"data":{"v":"` + strings.Repeat("x", 1000) + `"}}`
	cpu0, rss0 := procStats(pid)
	t0 := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	var creates sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value // the first create's error, reported
	for seq := range n {
		<-tick.C
		creates.Add(1)
		go func() {
			defer creates.Done()
			if _, err := send(admin, http.MethodPost, base, "application/json", []byte(fmt.Sprintf(cm, seq)), http.StatusCreated); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			respAt[seq].Store(time.Now().UnixNano())
		}()
	}
	tick.Stop()
	creates.Wait()
	want := int64(n-int(failed.Load())) * int64(watchers)
	for deadline := time.Now().Add(30 * time.Second); got.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	cpu1, rss1 := procStats(pid)
	cancel()
	done.Wait()

	var lats []time.Duration
	missing := 0
	for w := range watchers {
		for seq := range n {
			r := respAt[seq].Load()
			if r == 0 {
				continue // the create failed
			}
			a := arrive[w][seq]
			if a == 0 {
				missing++
				continue
			}
			lats = append(lats, time.Duration(max(a-r, 0)))
		}
	}
	slices.Sort(lats)
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(p*float64(len(lats))))]
	}
	fmt.Printf("watch delivery: %d watchers over %d connections, %d creates/s for %v (%d creates, %d failed)\n", watchers, conns, rate, d, n, failed.Load())
	if e := firstErr.Load(); e != nil {
		fmt.Printf("  first failed create: %s\n", e)
	}
	fmt.Printf("  events delivered %d of %d (missing %d); latency from the create's response: p50 %v p90 %v p99 %v max %v\n",
		len(lats), want, missing, pct(0.50).Round(10*time.Microsecond), pct(0.90).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
	if pid > 0 && len(lats) > 0 {
		cpu := cpu1 - cpu0
		fmt.Printf("  server CPU %v over %v: %v per create, %v per delivered event; RSS %d → %d MiB\n",
			cpu.Round(time.Millisecond), elapsed.Round(time.Millisecond), (cpu / time.Duration(n)).Round(time.Microsecond),
			(cpu / time.Duration(len(lats))).Round(100*time.Nanosecond), rss0>>20, rss1>>20)
	}
	return nil
}

// readEvents calls fn with the sequence number of each ADDED event of a
// JSON watch stream (one event a line) whose object is named wl-<seq>,
// until the stream ends. It finds the name without decoding the object,
// so that the load client's own CPU stays small beside the server's.
func readEvents(r io.Reader, fn func(seq int)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line[:min(len(line), 32)], []byte(`"ADDED"`)) {
			continue
		}
		i := bytes.Index(line, []byte(`"name":"wl-`))
		if i < 0 {
			continue
		}
		rest := line[i+len(`"name":"wl-`):]
		j := bytes.IndexByte(rest, '"')
		if j < 0 {
			continue
		}
		if seq, err := strconv.Atoi(string(rest[:j])); err == nil {
			fn(seq)
		}
	}
}

// procStats returns the CPU time and the RSS of process pid (zeros when
// pid is 0).
func procStats(pid int) (time.Duration, int64) {
	if pid <= 0 {
		return 0, 0
	}
	cpu, err := processCPU(pid)
	if err != nil {
		return 0, 0
	}
	rss, _ := procstat.RSS(pid)
	return cpu, rss
}

// watchNamespace creates a namespace named prefix-<n> and returns the URL
// of its ConfigMaps and the resourceVersion of their (empty) list, from
// which watches of it start.
func watchNamespace(admin *http.Client, api, prefix string) (base, rv string, err error) {
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1e6)
	if _, err := send(admin, http.MethodPost, api+"/api/v1/namespaces", "application/json",
		[]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, ns)), http.StatusCreated); err != nil {
		return "", "", err
	}
	base = api + "/api/v1/namespaces/" + ns + "/configmaps"
	resp, err := admin.Get(base)
	if err != nil {
		return "", "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("list %s: %s %v", base, resp.Status, err)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", "", err
	}
	return base, list.Metadata.ResourceVersion, nil
}
