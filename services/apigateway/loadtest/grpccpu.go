package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// cpuTarget is a gateway's gRPC API and the process serving it, whose CPU
// time is read from /proc.
type cpuTarget struct {
	name string
	addr string
	pid  int
	c    apiv1.ResourceServiceClient
}

// parseCPUTargets parses "name=addr@pid,name=addr@pid".
func parseCPUTargets(spec string) ([]*cpuTarget, error) {
	var out []*cpuTarget
	for _, s := range strings.Split(spec, ",") {
		name, rest, ok1 := strings.Cut(s, "=")
		addr, pid, ok2 := strings.Cut(rest, "@")
		p, err := strconv.Atoi(pid)
		if !ok1 || !ok2 || err != nil {
			return nil, fmt.Errorf("--grpc-cpu: %q is not name=addr@pid", s)
		}
		out = append(out, &cpuTarget{name: name, addr: addr, pid: p})
	}
	return out, nil
}

// processCPU is the CPU time (user and system, all threads) process pid
// has used: fields 14 and 15 of /proc/<pid>/stat, in clock ticks of
// 1/100 s (USER_HZ on Linux).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// cpuOps are the operations grpcCPU measures (--grpc-cpu-op): a Get of
// one 1 KiB ConfigMap or Secret, or Creates of 1 KiB Secrets (each a new
// object), over the gRPC API.
var cpuOps = map[string]func(ctx context.Context, c apiv1.ResourceServiceClient, seq *atomic.Int64) func() (int, error){
	"configmap-get": func(ctx context.Context, c apiv1.ResourceServiceClient, _ *atomic.Int64) func() (int, error) {
		return getOp(ctx, c, "configmaps", "ConfigMap", `"data":{"v":"`+strings.Repeat("x", 1000)+`"}`)
	},
	"secret-get": func(ctx context.Context, c apiv1.ResourceServiceClient, _ *atomic.Int64) func() (int, error) {
		return getOp(ctx, c, "secrets", "Secret", `"stringData":{"v":"`+strings.Repeat("x", 1000)+`"}`)
	},
	"secret-create": func(ctx context.Context, c apiv1.ResourceServiceClient, seq *atomic.Int64) func() (int, error) {
		collection := &apiv1.ResourceRef{Version: "v1", Resource: "secrets", Namespace: "default"}
		return func() (int, error) {
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"loadtest-%d"},"stringData":{"v":"%s"}}`, seq.Add(1), strings.Repeat("x", 1000))
			b, err := c.Create(ctx, &apiv1.CreateRequest{Ref: collection, Body: &httpbody.HttpBody{ContentType: "application/json", Data: []byte(body)}, Accept: "application/json"})
			return len(b.GetData()), err
		}
	},
}

// grpcCPU measures the server CPU time per authenticated unary call of
// operation opName (cpuOps) over the gRPC API of each target — gateways
// built from different commits, or run with different configurations
// (encryption at rest), side by side on the same machine — in rounds of
// slices of d, the targets' order alternating from one round to the next,
// so that every target sees the same load from the rest of the machine.
// The CPU is the whole server process's (gateway, store and the rest of
// the all-in-one), read from /proc before and after each slice.
func grpcCPU(ctx context.Context, tlsConf *tls.Config, token, spec, opName string, d time.Duration, cc, rounds int) error {
	targets, err := parseCPUTargets(spec)
	if err != nil {
		return err
	}
	newOp := cpuOps[opName]
	if newOp == nil {
		return fmt.Errorf("--grpc-cpu-op: no operation %q", opName)
	}
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	ops := map[*cpuTarget]func() (int, error){}
	var seq atomic.Int64
	seq.Store(time.Now().UnixNano())
	for _, t := range targets {
		conn, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
		if err != nil {
			return err
		}
		defer conn.Close()
		t.c = apiv1.NewResourceServiceClient(conn)
		ops[t] = newOp(ctx, t.c, &seq)
		// Warm up: connections, caches, grown stacks.
		if r := measure(time.Second, cc, ops[t]); r.err != nil {
			return fmt.Errorf("%s: %s: %w", t.name, opName, r.err)
		}
	}
	fmt.Printf("%-10s %6s %6s %10s %10s %14s\n", "gateway", "round", "conc", "ops/s", "p50", "CPU µs/op")
	perOp := map[string][]float64{}
	for round := range rounds {
		order := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			before, err := processCPU(t.pid)
			if err != nil {
				return err
			}
			r := measure(d, cc, ops[t])
			after, err := processCPU(t.pid)
			if err != nil {
				return err
			}
			if r.err != nil {
				return fmt.Errorf("%s: %s: %w", t.name, opName, r.err)
			}
			us := float64((after - before).Microseconds()) / float64(r.ops)
			perOp[t.name] = append(perOp[t.name], us)
			fmt.Printf("%-10s %6d %6d %10.0f %10s %14.0f\n", t.name, round, cc, float64(r.ops)/r.took.Seconds(), r.p50().Round(time.Microsecond), us)
		}
	}
	for _, t := range targets {
		v := slices.Sorted(slices.Values(perOp[t.name]))
		fmt.Printf("%-10s %s: median CPU per call %.0f µs (rounds: min %.0f, max %.0f), concurrency %d\n", t.name, opName, v[len(v)/2], v[0], v[len(v)-1], cc)
	}
	return nil
}

// getOp creates an object of resource (kind) with fields and returns a
// Get of it.
func getOp(ctx context.Context, c apiv1.ResourceServiceClient, resource, kind, fields string) func() (int, error) {
	ref := &apiv1.ResourceRef{Version: "v1", Resource: resource, Namespace: "default", Name: "loadtest-grpc-get"}
	collection := &apiv1.ResourceRef{Version: ref.Version, Resource: ref.Resource, Namespace: ref.Namespace}
	body := &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{"apiVersion":"v1","kind":"` + kind + `","metadata":{"name":"loadtest-grpc-get"},` + fields + `}`)}
	_, createErr := c.Create(ctx, &apiv1.CreateRequest{Ref: collection, Body: body})
	return func() (int, error) {
		if createErr != nil && status.Code(createErr) != codes.AlreadyExists {
			return 0, fmt.Errorf("create: %w", createErr)
		}
		b, err := c.Get(ctx, &apiv1.GetRequest{Ref: ref, Accept: "application/json"})
		return len(b.GetData()), err
	}
}
