package msgboard

import pb "github.com/msgboard/msgboard/clients/go/msgboardpb"

// PretendAckInFlight makes s behave as if an ack request were in flight
// (sent, not answered) until the returned func is called, which answers it:
// the coalescing of acks, made deterministic for a test.
func PretendAckInFlight(s *Subscription) (answer func()) {
	const ref = 1 << 62
	s.mu.Lock()
	s.inFlight[ref] = &pb.SubscribeRequest{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.answered(ref)
	}
}
