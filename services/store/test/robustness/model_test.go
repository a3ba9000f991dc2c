package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// The model: a register per key holding a string ("" = absent; the store
// compares a missing key's value as empty, so cas from "" creates).

type opKind int

const (
	opGet opKind = iota
	opPut
	opDelete
	opCAS
)

type kvInput struct {
	kind     opKind
	key      string
	value    string // put, cas: new value
	expected string // cas: compared value
	viaTxn   bool   // get: read by a transaction that only reads
}

type kvOutput struct {
	value     string // get
	succeeded bool   // cas
	unknown   bool   // the outcome of a write is unknown (timeout, connection lost)
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.kind {
		case opGet:
			return out.value == s, s
		case opPut:
			return true, in.value
		case opDelete:
			return true, ""
		case opCAS:
			holds := s == in.expected
			if out.unknown {
				if holds {
					return true, in.value
				}
				return true, s
			}
			if out.succeeded != holds {
				return false, s
			}
			if holds {
				return true, in.value
			}
			return true, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		switch in.kind {
		case opGet:
			if in.viaTxn {
				return fmt.Sprintf("txn-get(%s) -> %q", in.key, out.value)
			}
			return fmt.Sprintf("get(%s) -> %q", in.key, out.value)
		case opPut:
			return fmt.Sprintf("put(%s, %s) unknown=%t", in.key, in.value, out.unknown)
		case opDelete:
			return fmt.Sprintf("delete(%s) unknown=%t", in.key, out.unknown)
		default:
			return fmt.Sprintf("cas(%s, %q -> %s) -> %t unknown=%t", in.key, in.expected, in.value, out.succeeded, out.unknown)
		}
	},
}
