// Package buildinfo holds what a release build stamps into every binary
// with the linker (go build -ldflags "-X <pkg>.Version=... -X <pkg>.Commit=..."),
// as hack/images.sh does. A plain `go build` leaves the defaults.
package buildinfo

// Version is the release's version (git describe --always --dirty in
// hack/images.sh); "dev" when not stamped. It is the images' tag.
var Version = "dev"

// Commit is the git commit the binary was built from; empty when not
// stamped. The gateway's /version reports it as gitCommit.
var Commit = ""
