package raftwal

// Helpers of this package's tests, for its external tests (migrate_test.go).
var (
	Entries     = entries
	CheckLog    = checkLog
	OpenForTest = open
)
