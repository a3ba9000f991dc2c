// Command apigateway serves the Kubernetes REST API (and meridian's gRPC
// ResourceService behind it) in front of the store, admission and
// flow-control services. See the README.
package main

import (
	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/services/apigateway/internal/command"
)

func main() { daemon.Main("apigateway", command.Run) }
