// Command watchfanout serves meridian's watch cache and fan-out
// (meridian.watch.v1.WatchService); see the README.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/meridian-cp/meridian/services/watchfanout/internal/command"
)

func main() {
	if err := command.Run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
