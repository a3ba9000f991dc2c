#!/usr/bin/env bash
# Runs every test of every module in the workspace (go test ./... at a
# go.work root would cover only the root module), with the race detector,
# after go vet. Extra arguments go to go test, e.g. hack/test.sh -short.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

fail=0
for dir in $(go list -m -f '{{.Dir}}'); do
  rel=${dir#"$root"}; rel=${rel#/}; rel=${rel:-.}
  echo "=== module $rel"
  (cd "$dir" && go vet ./...) || fail=1
  (cd "$dir" && go test -race -count=1 -timeout 15m "$@" ./...) || fail=1
done
exit $fail
