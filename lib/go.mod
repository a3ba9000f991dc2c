module github.com/meridian-cp/meridian/lib

go 1.26.0

require (
	github.com/meridian-cp/meridian/proto/gen v0.0.0-00010101000000-000000000000
)

replace (
	github.com/meridian-cp/meridian/proto/gen => ../proto/gen
)
