package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/procstat"
	"golang.org/x/net/http2"
)

// stormTimeout bounds one storm: a list still running then is cut and
// counted as failed.
const stormTimeout = 5 * time.Minute

// runStorm runs a relist storm against the gateway of spec
// (api-addr@pid): clients concurrent raw JSON GETs of the collection of n
// ConfigMaps (seeded in namespace loadtest) as the data dir's admin,
// whose requests flow control exempts, over conns HTTP/2 connections,
// each body read to the end and discarded. It reports the storm's
// duration, how many lists succeeded, were refused with 429 (and whether
// with Retry-After) or failed otherwise, and the server's peak RSS growth,
// sampled from /proc every 100 ms, over its RSS before the storm.
func runStorm(tlsConf *tls.Config, spec string, n, clients, conns int) error {
	addr, pidText, ok := strings.Cut(spec, "@")
	var pid int
	if _, err := fmt.Sscan(pidText, &pid); !ok || err != nil {
		return fmt.Errorf("--storm-target %q: want api-addr@pid", spec)
	}
	api := "https://" + addr
	const ns = "loadtest"
	if conns < 1 {
		conns = 1
	}
	// One transport per connection: an http2.Transport keeps one
	// connection per host while its streams fit.
	hcs := make([]*http.Client, conns)
	for i := range hcs {
		hcs[i] = &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	}
	if err := seed(context.Background(), hcs[0], api, nil, ns, n); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	url := api + "/api/v1/namespaces/" + ns + "/configmaps"
	// Open every connection (and fill the caches) before the storm.
	for _, c := range hcs {
		if _, err := get(c, url+"?limit=1", "application/json"); err != nil {
			return err
		}
	}
	base, err := procstat.RSS(pid)
	if err != nil {
		return err
	}
	peak := samplePeakRSS(pid, base)
	ctx, cancel := context.WithTimeout(context.Background(), stormTimeout)
	defer cancel()
	var ok200, tooMany, retryAfter, failed atomic.Int64
	var firstErr atomic.Value
	var bytes atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func(c *http.Client) {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			defer resp.Body.Close()
			nb, err := io.Copy(io.Discard, resp.Body)
			bytes.Add(nb)
			switch {
			case err != nil:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			case resp.StatusCode == http.StatusOK:
				ok200.Add(1)
			case resp.StatusCode == http.StatusTooManyRequests:
				tooMany.Add(1)
				if resp.Header.Get("Retry-After") != "" {
					retryAfter.Add(1)
				}
			default:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, resp.Status)
			}
		}(hcs[i%conns])
	}
	wg.Wait()
	took := time.Since(start)
	peakRSS := peak()
	fmt.Printf("storm: %d lists of %d objects over %d connections: %s; 200: %d, 429: %d (with Retry-After: %d), failed: %d; %d MiB read\n",
		clients, n, conns, took.Round(10*time.Millisecond), ok200.Load(), tooMany.Load(), retryAfter.Load(), failed.Load(), bytes.Load()>>20)
	if e := firstErr.Load(); e != nil {
		fmt.Printf("storm: first failure: %s\n", e)
	}
	fmt.Printf("storm: server RSS before %d MiB, peak %d MiB, peak growth %d MiB\n", base>>20, peakRSS>>20, (peakRSS-base)>>20)
	return nil
}
