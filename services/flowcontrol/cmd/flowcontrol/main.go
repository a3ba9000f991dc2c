// Command flowcontrol serves meridian's API Priority and Fairness over
// gRPC (meridian.flowcontrol.v1.FlowControlService). See the README.
package main

import (
	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/command"
)

func main() { daemon.Main("flowcontrol", command.Run) }
