// Command flowcontrol serves meridian's API Priority and Fairness over
// gRPC (meridian.flowcontrol.v1.FlowControlService). See the README.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/meridian-cp/meridian/services/flowcontrol/internal/command"
)

func main() {
	if err := command.Run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
