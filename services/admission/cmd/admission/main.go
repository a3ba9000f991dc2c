// Command admission serves meridian's admission decisions over gRPC
// (meridian.admission.v1.AdmissionService). See the README.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/meridian-cp/meridian/services/admission/internal/command"
)

func main() {
	if err := command.Run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
