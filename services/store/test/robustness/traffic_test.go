package robustness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// ack is an acknowledged write: it must be in the history at rev.
type ack struct {
	key, value string // value "" for a delete
	rev        int64
	deleted    bool
}

// recorder collects the history of every client.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	acks  []ack
	stats map[string]int
}

func newRecorder() *recorder { return &recorder{start: time.Now(), stats: map[string]int{}} }

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(op porcupine.Operation, a *ack, stat string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	if a != nil {
		r.acks = append(r.acks, *a)
	}
	r.stats[stat]++
}

func (r *recorder) count(stat string) {
	r.mu.Lock()
	r.stats[stat]++
	r.mu.Unlock()
}

const numKeys = 6

// runClient issues random operations, pause apart, until ctx ends. Every
// operation gets a fresh bounded context. Outcomes: success → recorded; an error proving
// no effect (reads, not proposed, invalid) → dropped; other write errors
// → recorded as unknown with a return time at infinity.
func runClient(ctx context.Context, id int, c *client.Client, rec *recorder, pause time.Duration) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	seq := 0
	lastSeen := map[string]string{}
	for ctx.Err() == nil {
		if pause > 0 {
			time.Sleep(pause)
		}
		seq++
		key := fmt.Sprintf("key-%d", rng.IntN(numKeys))
		val := fmt.Sprintf("c%d-%d", id, seq)
		var in kvInput
		switch p := rng.IntN(100); {
		case p < 30:
			in = kvInput{kind: opPut, key: key, value: val}
		case p < 50:
			in = kvInput{kind: opCAS, key: key, value: val, expected: lastSeen[key]}
		case p < 88:
			// Half the reads are transactions that only read (served
			// like a linearizable Range, without raft), unless the run
			// asks for stale reads.
			in = kvInput{kind: opGet, key: key, viaTxn: !*staleReads && rng.IntN(2) == 0}
		default:
			in = kvInput{kind: opDelete, key: key}
		}
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		call := rec.now()
		out, a, err := do(opCtx, c, in)
		ret := rec.now()
		cancel()
		if err == nil {
			if in.kind == opGet {
				lastSeen[key] = out.value
			}
			rec.add(porcupine.Operation{ClientId: id, Input: in, Output: out, Call: call, Return: ret}, a, "ok")
			continue
		}
		if in.kind == opGet || client.NotProposed(err) || status.Code(err) == codes.InvalidArgument {
			rec.count("failed-no-effect")
			continue
		}
		rec.add(porcupine.Operation{ClientId: id, Input: in, Output: kvOutput{unknown: true}, Call: call, Return: math.MaxInt64}, nil, "unknown")
		// Back off briefly so a dead cluster is not hammered.
		time.Sleep(20 * time.Millisecond)
	}
}

func do(ctx context.Context, c *client.Client, in kvInput) (kvOutput, *ack, error) {
	kv := c.KV()
	switch in.kind {
	case opGet:
		if in.viaTxn {
			r, err := kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestRange{
				RequestRange: &storev1.RangeRequest{Key: []byte(in.key)}}}}})
			if err != nil {
				return kvOutput{}, nil, err
			}
			if kvs := r.GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				return kvOutput{value: string(kvs[0].GetValue())}, nil, nil
			}
			return kvOutput{}, nil, nil
		}
		r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(in.key), Serializable: *staleReads})
		if err != nil {
			return kvOutput{}, nil, err
		}
		if len(r.GetKvs()) == 0 {
			return kvOutput{}, nil, nil
		}
		return kvOutput{value: string(r.GetKvs()[0].GetValue())}, nil, nil
	case opPut:
		r, err := kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{putOp(in.key, in.value)}})
		if err != nil {
			return kvOutput{}, nil, err
		}
		return kvOutput{}, &ack{key: in.key, value: in.value, rev: r.GetHeader().GetRevision()}, nil
	case opDelete:
		r, err := kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(in.key)}}}}})
		if err != nil {
			return kvOutput{}, nil, err
		}
		var a *ack
		if r.GetResponses()[0].GetResponseDeleteRange().GetDeleted() > 0 {
			a = &ack{key: in.key, rev: r.GetHeader().GetRevision(), deleted: true}
		}
		return kvOutput{}, a, nil
	case opCAS:
		r, err := kv.Txn(ctx, &storev1.TxnRequest{
			Compare: []*storev1.Compare{{Key: []byte(in.key), Target: storev1.Compare_TARGET_VALUE,
				Result: storev1.Compare_RESULT_EQUAL, TargetUnion: &storev1.Compare_Value{Value: []byte(in.expected)}}},
			Success: []*storev1.RequestOp{putOp(in.key, in.value)},
		})
		if err != nil {
			return kvOutput{}, nil, err
		}
		var a *ack
		if r.GetSucceeded() {
			a = &ack{key: in.key, value: in.value, rev: r.GetHeader().GetRevision()}
		}
		return kvOutput{succeeded: r.GetSucceeded()}, a, nil
	}
	return kvOutput{}, nil, errors.New("unknown op")
}

func putOp(k, v string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

// event is one watch event, flattened.
type event struct {
	rev     int64
	key     string
	value   string
	deleted bool
}

func (e event) String() string {
	return fmt.Sprintf("%d %s=%q del=%t", e.rev, e.key, e.value, e.deleted)
}

func flatten(evs []*storev1.Event) []event {
	out := make([]event, 0, len(evs))
	for _, ev := range evs {
		out = append(out, event{rev: ev.GetKv().GetModRevision(), key: string(ev.GetKv().GetKey()),
			value: string(ev.GetKv().GetValue()), deleted: ev.GetType() == storev1.Event_TYPE_DELETE})
	}
	return out
}

// watcher records every event of a resumable watch from revision 1.
type watcher struct {
	name string
	mu   sync.Mutex
	evs  []event
	err  error
}

func (w *watcher) run(ctx context.Context, c *client.Client) {
	err := c.Watch(ctx, &storev1.WatchCreateRequest{Key: []byte("key-"), RangeEnd: []byte("key."), StartRevision: 1},
		func(r *storev1.WatchResponse) error {
			w.mu.Lock()
			w.evs = append(w.evs, flatten(r.GetEvents())...)
			w.mu.Unlock()
			return nil
		})
	w.mu.Lock()
	if ctx.Err() == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *watcher) snapshot() ([]event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event(nil), w.evs...), w.err
}
