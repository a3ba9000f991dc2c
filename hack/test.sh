#!/usr/bin/env bash
# Runs every test of every module in the workspace (go test ./... at a
# go.work root would cover only the root module), with the race detector,
# after go vet. Extra arguments go to go test, e.g. hack/test.sh -short.
# Without -short and with FUZZTIME set it then runs each fuzz target for
# that long (hack/fuzz.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

fail=0
for dir in $(go list -m -f '{{.Dir}}'); do
  rel=${dir#"$root"}; rel=${rel#/}; rel=${rel:-.}
  echo "=== module $rel"
  (cd "$dir" && go vet ./...) || fail=1
  if [ "$rel" = . ]; then
    # The black-box suites under test/ (whole control planes, kubectl,
    # Docker) run without the race detector, which would triple their
    # time on 2 cores and keep CI past 20 minutes; the concurrent code
    # they drive is raced in each module's own tests below and above.
    (cd "$dir" && go test -race -count=1 -timeout 15m "$@" $(go list ./... | grep -v '/test/')) || fail=1
    # -p 3: the suites spend much of their time waiting on servers,
    # kubectl and Docker, and test/deploy (about 6 minutes) would
    # otherwise leave one of two slots idle while e2e, integration and
    # distributed (about 11 minutes together) take turns in the other.
    (cd "$dir" && go test -p 3 -count=1 -timeout 15m "$@" ./test/...) || fail=1
  else
    (cd "$dir" && go test -race -count=1 -timeout 15m "$@" ./...) || fail=1
  fi
done

# Fuzzing past the seeds (every plain go test above already runs each
# target's seeds and testdata/fuzz corpus) needs an instrumented build of
# each target's package, about a minute each on 2 cores: it runs when
# FUZZTIME is set (FUZZTIME=15s hack/test.sh), not in CI's 20 minutes.
short=0
for arg in "$@"; do
  case $arg in -short | -short=true) short=1 ;; esac
done
if [ $short = 0 ] && [ -n "${FUZZTIME:-}" ]; then
  echo "=== fuzz targets (hack/fuzz.sh)"
  hack/fuzz.sh || fail=1
fi
exit $fail
