package linearizability

import "context"

// Halt stops the clients and the watchers and returns what was recorded,
// without asking the store anything: for a run whose server is gone for
// good (the lost-machine drill kills it and deletes its data), where Stop
// would wait a minute for a final revision no server can give. The
// history's Final is 0 and its watch logs end where they were cut off, so
// it is not for Check, whose watch guarantees need Final; its operations
// are what the clients sent and were told.
func (r *Recorder) Halt() *History {
	r.stop.Store(true)
	r.wg.Wait()
	h := &History{Init: r.init}
	r.mu.Lock()
	h.Ops = append([]Op(nil), r.ops...)
	r.mu.Unlock()
	for _, w := range r.watchers {
		h.Watches = append(h.Watches, w.follow(context.Background(), 0))
	}
	r.close()
	return h
}
