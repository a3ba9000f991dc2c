package server

import "sync"

// slots is a counting semaphore whose waiters are jobs, not goroutines:
// a job that finds no free slot is parked and started on a goroutine of
// its own when one frees, so a relist storm of thousands of watches queues
// thousands of closures rather than thousands of blocked goroutines.
type slots struct {
	mu      sync.Mutex
	free    int
	waiting []func() // FIFO
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire takes a slot and reports true, or parks job (run later, holding
// a slot) and reports false.
func (s *slots) acquire(job func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 {
		s.free--
		return true
	}
	s.waiting = append(s.waiting, job)
	return false
}

// release gives the slot to the oldest parked job (started on a new
// goroutine, holding the slot), or frees it.
func (s *slots) release() {
	s.mu.Lock()
	if len(s.waiting) == 0 {
		s.free++
		s.mu.Unlock()
		return
	}
	job := s.waiting[0]
	s.waiting[0] = nil
	s.waiting = s.waiting[1:]
	if len(s.waiting) == 0 {
		s.waiting = nil
	}
	s.mu.Unlock()
	go job()
}
