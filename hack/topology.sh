#!/usr/bin/env bash
# A standing local topology of meridian on Docker, from the images
# hack/images.sh builds and the Helm chart's rendered pods: 3 store voters
# and 1 non-voter, 2 gateways, 2 watchfanout replicas, admission and flow
# control on one container network, each gateway published on a loopback
# port. It is the harness of test/deploy's TestImages/chart-on-docker,
# left running (-topology-keep).
#
#   hack/topology.sh up [DIR]   build the images, start it, write DIR/admin.kubeconfig
#                               (default DIR: ./.topology); prints the kubeconfig path
#   hack/topology.sh down [DIR] remove its containers, networks, images and DIR
#   hack/topology.sh status     list its containers
#
# Needs a Docker engine, kubectl and Go; the first `up` builds helm from
# the Go module proxy (a few minutes), later ones reuse Go's cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
label=io.meridian.topology
cmd=${1:-}
dir=${2:-$root/.topology}
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac

case $cmd in
up)
  if [ -n "$(docker ps -aq --filter label=$label)" ]; then
    echo "topology.sh: a topology is already running (hack/topology.sh down first)" >&2
    exit 1
  fi
  mkdir -p "$dir"
  cd "$root"
  if ! out=$(GOFLAGS=-buildvcs=false go test ./test/deploy -run 'TestImages/chart-on-docker' -count=1 -timeout 60m -v \
    -args -topology-keep="$dir" 2>&1); then
    echo "$out" | tail -40 >&2
    echo "topology.sh: up failed" >&2
    exit 1
  fi
  echo "$out" | grep -E 'topology running' | sed 's/^ *//' >&2 || true
  for f in "$dir"/gateway-*.kubeconfig; do
    echo "gateway: $(kubectl --kubeconfig "$f" config view -o jsonpath='{.clusters[0].cluster.server}')  $f" >&2
  done
  echo "$dir/admin.kubeconfig"
  ;;
down)
  images=$(docker ps -a --filter label=$label --format '{{.Image}}' | sort -u)
  containers=$(docker ps -aq --filter label=$label)
  [ -z "$containers" ] || docker rm -f $containers >/dev/null
  networks=$(docker network ls -q --filter label=$label)
  [ -z "$networks" ] || docker network rm $networks >/dev/null
  # Every image of the topology's version: the pods' and the all-in-one
  # (which issued the operator certificate).
  for tag in $(printf '%s\n' $images | sed -n 's/.*://p' | sort -u); do
    ids=$(docker images -q --filter "reference=${MERIDIAN_IMAGE_PREFIX:-meridian/}*:$tag")
    [ -z "$ids" ] || docker rmi -f $ids >/dev/null 2>&1 || true
  done
  rm -rf "$dir"
  echo "topology removed" >&2
  ;;
status)
  docker ps -a --filter label=$label --format 'table {{.Names}}\t{{.Status}}\t{{.Ports}}'
  ;;
*)
  echo "usage: hack/topology.sh up|down [DIR] | status" >&2
  exit 2
  ;;
esac
