#!/usr/bin/env bash
# Builds the code-generation tools pinned in tools/go.mod into .bin/.
# Idempotent: go install reuses the build cache, so a second run is quick.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/tools"
GOWORK=off GOBIN="$root/.bin" go install \
  github.com/bufbuild/buf/cmd/buf \
  google.golang.org/protobuf/cmd/protoc-gen-go \
  google.golang.org/grpc/cmd/protoc-gen-go-grpc \
  github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway
