#!/usr/bin/env bash
# Runs each Go fuzz target for a short, bounded time: FUZZTIME each
# (default 15s). Every target's
# seeds and testdata/fuzz corpus also run in every plain `go test`; this
# explores past them. A failure leaves the input under the package's
# testdata/fuzz, to be committed once fixed.
#
# Targets are listed here (module directory, package, target) because
# finding them means building every test package once more.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
fuzztime=${FUZZTIME:-15s}

targets=(
  "services/apigateway ./internal/resources FuzzJSONPatch"
  "services/apigateway ./internal/resources FuzzMergePatch"
  "services/apigateway ./internal/resources FuzzStrategicMergePatch"
  "services/apigateway ./internal/resources FuzzApply"
  "services/apigateway ./internal/authn/serviceaccount FuzzServiceAccountToken"
  "services/apigateway ./internal/authn FuzzClientCertificate"
  "services/apigateway ./internal/authn FuzzParseTokenFile"
  "services/apigateway ./internal/authn/oidc FuzzIDToken"
  "lib ./kube/crdschema FuzzAdmit"
  "services/admission ./internal/celpolicy FuzzRequestToCEL"
  "services/admission ./internal/webhook FuzzDecodeReview"
)

fail=0
for t in "${targets[@]}"; do
  read -r dir pkg name <<<"$t"
  echo "=== fuzz $name ($dir/${pkg#./}, $fuzztime)"
  (cd "$root/$dir" && go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 10s "$pkg") || fail=1
done
exit $fail
