package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The model of TestConsistentGetsAreLinearizable: one register per
// ConfigMap holding its data value ("" = the ConfigMap does not exist).

type cmOpKind int

const (
	cmGet    cmOpKind = iota
	cmCreate          // 201 when absent, 409 when present
	cmUpdate          // unconditional: 200 when present, 404 when absent
	cmDelete          // 200 when present, 404 when absent
)

type cmInput struct {
	kind  cmOpKind
	name  string
	value string // create, update
}

type cmOutput struct {
	value   string // get: the data read ("" for 404)
	applied bool   // create, update, delete: 2xx (else 409 or 404)
	unknown bool   // the request failed otherwise: it may or may not have applied
}

var configMapModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range history {
			n := op.Input.(cmInput).name
			if _, ok := byName[n]; !ok {
				names = append(names, n)
			}
			byName[n] = append(byName[n], op)
		}
		var out [][]porcupine.Operation
		for _, n := range names {
			out = append(out, byName[n])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(cmInput), output.(cmOutput)
		if in.kind == cmGet {
			return out.value == s, s
		}
		var applies bool // whether the write applies to state s
		next := in.value
		switch in.kind {
		case cmCreate:
			applies = s == ""
		case cmUpdate:
			applies = s != ""
		case cmDelete:
			applies, next = s != "", ""
		}
		switch {
		case out.unknown && applies:
			return true, next
		case out.unknown:
			return true, s
		case out.applied != applies:
			return false, s
		case applies:
			return true, next
		}
		return true, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(cmInput), output.(cmOutput)
		verb := [...]string{"get", "create", "update", "delete"}[in.kind]
		if in.kind == cmGet {
			return fmt.Sprintf("get(%s) -> %q", in.name, out.value)
		}
		return fmt.Sprintf("%s(%s, %q) applied=%t unknown=%t", verb, in.name, in.value, out.applied, out.unknown)
	},
}

// TestConsistentGetsAreLinearizable drives the API (client-go over HTTPS,
// JSON and protobuf) with concurrent creates, unconditional updates and
// deletes of a few ConfigMaps and consistent GETs of them (1.5 s, and at
// least 160 GETs however slow the machine; no
// resourceVersion; concurrent ones share the reads of the store's
// revision), and checks the history with porcupine: every GET returns the
// state of some instant between its request and its response. The
// all-in-one serves consistent GETs from watchfanout's cache once it has
// reached the store's current revision: the gateway's
// apiserver_watch_cache_consistent_read_total must count every GET as
// served there.
func TestConsistentGetsAreLinearizable(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	fromCache0 := consistentReadsFromCache(ctx, t, e)
	clients := []kubernetes.Interface{clientWith(t, e.config, "application/json"), clientWith(t, e.config, "application/vnd.kubernetes.protobuf")}
	names := []string{"lin-0", "lin-1", "lin-2"}

	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in cmInput, call func() cmOutput) {
		start := time.Now().UnixNano()
		out := call()
		end := time.Now().UnixNano()
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: start, Output: out, Return: end})
		mu.Unlock()
	}
	// outcome maps a write's error: nil applied, want (409 or 404) did
	// not, anything else is unknown.
	outcome := func(err error, notApplied func(error) bool) cmOutput {
		switch {
		case err == nil:
			return cmOutput{applied: true}
		case notApplied(err):
			return cmOutput{}
		}
		return cmOutput{unknown: true}
	}
	cm := func(name, value string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
	}

	// Readers read for traffic and at least minGets times each; writers
	// write until the readers are done.
	const writers, readers, minGets = 3, 8, 20
	traffic := 1500 * time.Millisecond
	end := time.Now().Add(traffic)
	readersDone := make(chan struct{})
	var wg, readersWG sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)].CoreV1().ConfigMaps("default")
			for i := 0; ; i++ {
				select {
				case <-readersDone:
					return
				default:
				}
				name, value := names[(w+i)%len(names)], fmt.Sprintf("w%d-%d", w, i)
				switch i % 4 {
				case 0:
					record(w, cmInput{kind: cmCreate, name: name, value: value}, func() cmOutput {
						_, err := c.Create(ctx, cm(name, value), metav1.CreateOptions{})
						return outcome(err, apierrors.IsAlreadyExists)
					})
				case 1, 2:
					record(w, cmInput{kind: cmUpdate, name: name, value: value}, func() cmOutput {
						_, err := c.Update(ctx, cm(name, value), metav1.UpdateOptions{})
						return outcome(err, apierrors.IsNotFound)
					})
				case 3:
					record(w, cmInput{kind: cmDelete, name: name}, func() cmOutput {
						err := c.Delete(ctx, name, metav1.DeleteOptions{})
						return outcome(err, apierrors.IsNotFound)
					})
				}
			}
		}()
	}
	var gets, failed sync.Map
	for r := range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			c := clients[r%len(clients)].CoreV1().ConfigMaps("default")
			for i := 0; i < minGets || time.Now().Before(end); i++ {
				name := names[(r+i)%len(names)]
				var err error
				record(writers+r, cmInput{kind: cmGet, name: name}, func() cmOutput {
					var got *corev1.ConfigMap
					got, err = c.Get(ctx, name, metav1.GetOptions{})
					if err == nil {
						return cmOutput{value: got.Data["v"]}
					}
					return cmOutput{}
				})
				gets.Store(r*1_000_000+i, true)
				if err != nil && !apierrors.IsNotFound(err) {
					failed.Store(r*1_000_000+i, err)
				}
			}
		}()
	}
	readersWG.Wait()
	close(readersDone)
	wg.Wait()

	// A GET that failed otherwise than 404 says nothing about the state;
	// it is a test failure (no fault is injected here).
	failed.Range(func(_, err any) bool {
		t.Errorf("GET: %v", err)
		return false
	})
	n := 0
	gets.Range(func(_, _ any) bool { n++; return true })
	if got := consistentReadsFromCache(ctx, t, e) - fromCache0; got < float64(n) {
		t.Errorf("watchfanout served %v consistent reads of config maps, want every one of the %d GETs", got, n)
	}
	res, info := porcupine.CheckOperationsVerbose(configMapModel, history, 30*time.Second)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations (%d GETs) linearizable", len(history), n)
	case porcupine.Unknown:
		t.Fatalf("porcupine did not decide on %d operations in 30s", len(history))
	default:
		f := filepath.Join(t.TempDir(), "history.html")
		if out, err := os.Create(f); err == nil {
			_ = porcupine.Visualize(configMapModel, info, out)
			out.Close()
		}
		t.Fatalf("%d operations (%d GETs) are not linearizable", len(history), n)
	}
}

// consistentReadsFromCache is the gateway's count of consistent reads of
// config maps served by watchfanout, from the all-in-one's /metrics.
func consistentReadsFromCache(ctx context.Context, t *testing.T, e *env) float64 {
	t.Helper()
	families := scrapeMetrics(ctx, t, e)
	var sum float64
	for _, m := range families["apiserver_watch_cache_consistent_read_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "configmaps" && labels["success"] == "true" {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestConfigMapModelRejectsStaleReads: the model of
// TestConsistentGetsAreLinearizable fails a GET that misses a write
// acknowledged before it was sent, and one that sees a write that did
// not apply.
func TestConfigMapModelRejectsStaleReads(t *testing.T) {
	created := porcupine.Operation{ClientId: 0, Input: cmInput{kind: cmCreate, name: "a", value: "v1"}, Call: 0, Output: cmOutput{applied: true}, Return: 1}
	for _, c := range []struct {
		name    string
		history []porcupine.Operation
		want    bool // linearizable
	}{
		{"current", []porcupine.Operation{created, {ClientId: 1, Input: cmInput{kind: cmGet, name: "a"}, Call: 2, Output: cmOutput{value: "v1"}, Return: 3}}, true},
		{"stale", []porcupine.Operation{created, {ClientId: 1, Input: cmInput{kind: cmGet, name: "a"}, Call: 2, Output: cmOutput{}, Return: 3}}, false},
		{"failed write seen", []porcupine.Operation{created,
			{ClientId: 0, Input: cmInput{kind: cmCreate, name: "a", value: "v2"}, Call: 2, Output: cmOutput{}, Return: 3},
			{ClientId: 1, Input: cmInput{kind: cmGet, name: "a"}, Call: 4, Output: cmOutput{value: "v2"}, Return: 5}}, false},
	} {
		if got := porcupine.CheckOperations(configMapModel, c.history); got != c.want {
			t.Errorf("%s: linearizable %t, want %t", c.name, got, c.want)
		}
	}
}
