// Command watchfanout serves meridian's watch cache and fan-out
// (meridian.watch.v1.WatchService); see the README.
package main

import (
	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/command"
)

func main() { daemon.Main("watchfanout", command.Run) }
