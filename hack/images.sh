#!/usr/bin/env bash
# Builds meridian's container images with the local Docker engine, one
# per service and one all-in-one, each FROM scratch with one static
# binary, a non-root user (65532) and the CA bundle:
#
#   meridian/store  meridian/watchfanout  meridian/admission
#   meridian/flowcontrol  meridian/apigateway  meridian/meridian (all-in-one)
#
# tagged meridian/<name>:<version>. The version is $MERIDIAN_VERSION, or
# `git describe --always --dirty`; it is stamped into every binary
# (lib/buildinfo: the gateway's /version reports it as gitCommit).
# Usage: hack/images.sh [name...]   (default: all six)
# Environment: MERIDIAN_VERSION, MERIDIAN_IMAGE_PREFIX (default meridian/).
# No registry is involved: push the tags yourself if you need one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

version=${MERIDIAN_VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
commit=$(git rev-parse HEAD 2>/dev/null || true)
prefix=${MERIDIAN_IMAGE_PREFIX:-meridian/}

# name -> package of its main
declare -A pkg=(
  [store]=./services/store/cmd/store
  [watchfanout]=./services/watchfanout/cmd/watchfanout
  [admission]=./services/admission/cmd/admission
  [flowcontrol]=./services/flowcontrol/cmd/flowcontrol
  [apigateway]=./services/apigateway/cmd/apigateway
  [meridian]=./cmd/meridian
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(store watchfanout admission flowcontrol apigateway meridian)
for n in "${names[@]}"; do
  [ -n "${pkg[$n]:-}" ] || { echo "images.sh: unknown image $n (want: ${!pkg[*]})" >&2; exit 2; }
done

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/base/bin" "$ctx/base/etc/ssl/certs" "$ctx/base/var/lib/meridian"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/base/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/base/etc/group"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/base/etc/ssl/certs/"

pkgs=()
for n in "${names[@]}"; do pkgs+=("${pkg[$n]}"); done
ldflags="-s -w -X github.com/meridian-cp/meridian/lib/buildinfo.Version=$version -X github.com/meridian-cp/meridian/lib/buildinfo.Commit=$commit"
echo "building ${names[*]} ($version)" >&2
CGO_ENABLED=0 GOOS=linux GOFLAGS=-buildvcs=false go build -trimpath -ldflags "$ldflags" -o "$ctx/bin/" "${pkgs[@]}"

# Each image's context holds its own binary only.
for n in "${names[@]}"; do
  cp -a "$ctx/base" "$ctx/$n"
  mv "$ctx/bin/$n" "$ctx/$n/bin/"
  sed "s/@BINARY@/$n/g" deploy/images/Dockerfile >"$ctx/$n/Dockerfile"
  if ! out=$(docker build --build-arg VERSION="$version" --build-arg REVISION="$commit" \
    -t "$prefix$n:$version" "$ctx/$n" 2>&1); then
    echo "$out" >&2
    exit 1
  fi
  echo "$prefix$n:$version"
done
