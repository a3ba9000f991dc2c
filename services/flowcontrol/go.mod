module github.com/meridian-cp/meridian/services/flowcontrol

go 1.26.0

require (
	github.com/meridian-cp/meridian/proto/gen v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/lib v0.0.0-00010101000000-000000000000
)

replace (
	github.com/meridian-cp/meridian/proto/gen => ../../proto/gen
	github.com/meridian-cp/meridian/lib => ../../lib
)
