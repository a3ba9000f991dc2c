package apf

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// maxHandSize bounds HandSize as Kubernetes does.
const maxHandSize = 15

// dealer deals hands for shuffle sharding: a flow is hashed to a hand of
// handSize distinct queues out of deckSize, so two heavy flows rarely share
// all their queues.
type dealer struct {
	deckSize, handSize int
}

func newDealer(deckSize, handSize int) (dealer, error) {
	if deckSize < 1 || handSize < 1 || handSize > deckSize || handSize > maxHandSize {
		return dealer{}, fmt.Errorf("hand size %d with %d queues: want 1 <= hand size <= min(queues, %d)", handSize, deckSize, maxHandSize)
	}
	// The hand is drawn from 64 bits of hash; as in Kubernetes, require
	// enough entropy left for each card.
	if need := bits.Len(uint(deckSize-1)) * handSize; need > 60 {
		return dealer{}, errors.New("queues and hand size need more than 60 bits of hash entropy")
	}
	return dealer{deckSize: deckSize, handSize: handSize}, nil
}

// deal calls pick with each card of the hand of hash value h.
func (d dealer) deal(h uint64, pick func(card int)) {
	var chosen [maxHandSize]int
	for i := 0; i < d.handSize; i++ {
		n := uint64(d.deckSize - i)
		card := int(h % n)
		h /= n
		// card is an index into the cards not yet chosen: map it to the
		// deck by stepping over the chosen ones in ascending order.
		j := 0
		for ; j < i && chosen[j] <= card; j++ {
			card++
		}
		copy(chosen[j+1:i+1], chosen[j:i])
		chosen[j] = card
		pick(card)
	}
}

// flowHash hashes a flow: its schema's name and distinguisher.
func flowHash(schema, distinguisher string) uint64 {
	h := sha256.New()
	h.Write([]byte(schema))
	h.Write([]byte{0})
	h.Write([]byte(distinguisher))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}
