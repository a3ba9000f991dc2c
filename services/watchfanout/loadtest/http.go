package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meridian-cp/meridian/lib/pki"
	"golang.org/x/net/http2"
)

// allInOneTLS returns the all-in-one's client configurations: the admin's
// certificate and the API CA for the REST API, and the gateway's
// certificate and the internal CA for the store (the identity that reads
// and writes keys).
func allInOneTLS(dataDir string) (api, store *tls.Config, err error) {
	pdir := filepath.Join(dataDir, "pki")
	api, err = pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return nil, nil, err
	}
	store, err = pki.LoadClientTLS(filepath.Join(pdir, "apigateway-client.crt"), filepath.Join(pdir, "apigateway-client.key"), filepath.Join(pdir, "internal-ca.crt"), "", nil)
	if err != nil {
		return nil, nil, err
	}
	return api, store, nil
}

// apiClient is an HTTP/2 client over one connection (client-go keeps one
// per host; a connection per watcher would measure TLS handshakes, not
// the fan-out).
func apiClient(conf *tls.Config) *http.Client {
	return &http.Client{Transport: &http2.Transport{TLSClientConfig: conf}}
}

// httpWatch opens a watch of ConfigMaps in ns after rev through the REST
// API and returns its body once the response headers arrived.
func httpWatch(ctx context.Context, c *http.Client, api, ns string, rev int64, protobuf bool) (io.ReadCloser, error) {
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/configmaps?watch=1&resourceVersion=%d&timeoutSeconds=3600", api, ns, rev)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if protobuf {
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		return nil, fmt.Errorf("watch: %s: %s", resp.Status, b)
	}
	return resp.Body, nil
}

// readHTTPWatch hands each event of a watch body to consume with its
// resourceVersion: JSON events are lines; protobuf events are
// length-prefixed frames.
func readHTTPWatch(body io.Reader, protobuf bool, consume func([]byte, int64, time.Time)) {
	r := bufio.NewReaderSize(body, 64<<10)
	if protobuf {
		var n [4]byte
		for {
			if _, err := io.ReadFull(r, n[:]); err != nil {
				return
			}
			frame := make([]byte, binary.BigEndian.Uint32(n[:]))
			if _, err := io.ReadFull(r, frame); err != nil {
				return
			}
			consume(frame, -1, time.Now())
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	key := []byte(`"resourceVersion":"`)
	for sc.Scan() {
		line := sc.Bytes()
		rev := int64(-1)
		if i := bytes.Index(line, key); i >= 0 {
			rest := line[i+len(key):]
			if j := bytes.IndexByte(rest, '"'); j > 0 {
				rev, _ = strconv.ParseInt(string(rest[:j]), 10, 64)
			}
		}
		consume(line, rev, time.Now())
	}
}
