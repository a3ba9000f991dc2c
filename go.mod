module github.com/meridian-cp/meridian

go 1.26.0

require (
	github.com/meridian-cp/meridian/lib v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/proto/gen v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/services/admission v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/services/apigateway v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/services/flowcontrol v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/services/store v0.0.0-00010101000000-000000000000
	github.com/meridian-cp/meridian/services/watchfanout v0.0.0-00010101000000-000000000000
)

require k8s.io/client-go v0.37.2 // indirect

replace (
	github.com/meridian-cp/meridian/lib => ./lib
	github.com/meridian-cp/meridian/proto/gen => ./proto/gen
	github.com/meridian-cp/meridian/services/admission => ./services/admission
	github.com/meridian-cp/meridian/services/apigateway => ./services/apigateway
	github.com/meridian-cp/meridian/services/flowcontrol => ./services/flowcontrol
	github.com/meridian-cp/meridian/services/store => ./services/store
	github.com/meridian-cp/meridian/services/watchfanout => ./services/watchfanout
)
