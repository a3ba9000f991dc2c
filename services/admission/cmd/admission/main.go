// Command admission serves meridian's admission decisions over gRPC
// (meridian.admission.v1.AdmissionService). See the README.
package main

import (
	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/services/admission/internal/command"
)

func main() { daemon.Main("admission", command.Run) }
