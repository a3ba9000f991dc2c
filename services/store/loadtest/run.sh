#!/usr/bin/env bash
# run.sh drives the loadtest against meridian's store and etcd, one after
# the other, with the same cluster shape (3 members on loopback, or 1),
# data directories on the same disk, and the same client concurrency.
#
#   services/store/loadtest/run.sh [DATA_ROOT] [DURATION]
#
# STORE_FLAGS adds flags to every meridian store (e.g. "--min-free-bytes -1"), for A/B runs;
# LOADTEST_FLAGS adds flags to the loadtest (e.g. "-watch-rate 20").
# COMPARE=1 runs both clusters at once and drives them in alternating
# 1-second slices (loadtest -compare), which cancels the drift of the
# machine's speed between two runs one after the other.
# Needs: go, etcd (Debian: apt-get install -y etcd-server). Output: the
# loadtest tables on stdout; CPU profiles of the meridian leader in
# $DATA_ROOT/*.pprof.
set -euo pipefail
root=${1:-/tmp/store-bench}
dur=${2:-5s}
workloads=${WORKLOADS:-put,get,watch}
shapes=${SHAPES:-3 1}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$root/bin"
(cd "$here" && GOWORK=off go build -o "$root/bin/loadtest" .)
(cd "$here/.." && go build -o "$root/bin/store" ./cmd/store)
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done; pids=(); }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 200); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not up" >&2; return 1; }

meridian() { # n
  local n=$1 initial="" eps=""
  rm -rf "$root/m"; mkdir -p "$root/m"
  for i in $(seq 0 $((n-1))); do
    initial+="${initial:+,}m$i=127.0.0.1:$((23800+i))/127.0.0.1:$((23790+i))"
    eps+="${eps:+,}127.0.0.1:$((23790+i))"
  done
  for i in $(seq 0 $((n-1))); do
    "$root/bin/store" --id m$i --data-dir "$root/m/$i" --listen 127.0.0.1:$((23790+i)) \
      --peer-listen 127.0.0.1:$((23800+i)) --initial-cluster "$initial" \
      --metrics-listen 127.0.0.1:$((23810+i)) --pprof --log-level warn ${STORE_FLAGS:-} >"$root/m/$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq 0 $((n-1))); do wait_port $((23790+i)); done
  EPS=$eps
}

etcdc() { # n
  local n=$1 initial="" eps=""
  rm -rf "$root/e"; mkdir -p "$root/e"
  for i in $(seq 0 $((n-1))); do
    initial+="${initial:+,}e$i=http://127.0.0.1:$((24800+i))"
    eps+="${eps:+,}127.0.0.1:$((24790+i))"
  done
  for i in $(seq 0 $((n-1))); do
    etcd --name e$i --data-dir "$root/e/$i" --listen-client-urls http://127.0.0.1:$((24790+i)) \
      --advertise-client-urls http://127.0.0.1:$((24790+i)) --listen-peer-urls http://127.0.0.1:$((24800+i)) \
      --initial-advertise-peer-urls http://127.0.0.1:$((24800+i)) --initial-cluster "$initial" \
      --initial-cluster-state new --log-level warn --logger zap >"$root/e/$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq 0 $((n-1))); do wait_port $((24790+i)); done
  sleep 2
  EPS=$eps
}

profile() { # n: CPU profile of every meridian member (the leader's is the one that counts)
  curls=()
  for i in $(seq 0 $(($1-1))); do
    curl -s -o "$root/meridian-$1-m$i.pprof" "http://127.0.0.1:$((23810+i))/debug/pprof/profile?seconds=20" &
    curls+=($!)
  done
}

if [ -n "${COMPARE:-}" ]; then
  for n in $shapes; do
    meridian $n; meps=$EPS
    etcdc $n; eeps=$EPS
    echo "## meridian and etcd $(etcd --version | head -1 | awk '{print $3}'), $n member(s), alternating slices"
    profile $n
    "$root/bin/loadtest" -compare "$eeps" -endpoints "$meps" -duration "$dur" -workloads "$workloads" ${LOADTEST_FLAGS:-}
    wait "${curls[@]}" 2>/dev/null || true
    cleanup; sleep 1
  done
  exit 0
fi

for n in $shapes; do
  meridian $n; eps=$EPS; sleep 1
  echo "## meridian, $n member(s)"
  profile $n
  "$root/bin/loadtest" -target meridian -endpoints "$eps" -duration "$dur" -workloads "$workloads"
  wait "${curls[@]}" 2>/dev/null || true
  cleanup; sleep 1
  etcdc $n; eps=$EPS
  echo "## etcd $(etcd --version | head -1 | awk '{print $3}'), $n member(s)"
  "$root/bin/loadtest" -target etcd -endpoints "$eps" -duration "$dur" -workloads "$workloads"
  cleanup; sleep 1
done
