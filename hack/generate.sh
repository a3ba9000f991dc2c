#!/usr/bin/env bash
# Regenerates proto/gen from proto/ with local plugins:
#   hack/generate.sh          lint and generate
#   hack/generate.sh --check  also fail when the committed code is stale
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/hack/tools.sh"

# google/api/*.proto are not in any module the project imports as Go code.
# grpc-gateway v1.16.0 ships them under third_party/googleapis; take them from
# the module cache at generate time instead of committing copies.
gw=$(cd tools && GOWORK=off go mod download -json github.com/grpc-ecosystem/grpc-gateway@v1.16.0 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
tp=proto/.third_party
rm -rf "$tp" && mkdir -p "$tp/google/api"
for f in annotations http httpbody; do
  cp "$gw/third_party/googleapis/google/api/$f.proto" "$tp/google/api/"
done
chmod -R u+w "$tp"

.bin/buf lint
rm -rf proto/gen/meridian
.bin/buf generate --path proto/meridian
rm -rf "$tp"

if [ "${1:-}" = "--check" ]; then
  if [ -n "$(git status --porcelain -- proto/gen)" ]; then
    git status --porcelain -- proto/gen
    echo "proto/gen is stale: run hack/generate.sh and commit the result" >&2
    exit 1
  fi
fi
