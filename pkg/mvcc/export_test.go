package mvcc

// Test hooks: the live index's state, and the one failure tests cannot
// cause (a commit whose outcome is unknown). Call them between writes: the
// writer's answers order them with its own use of the index.

func (s *Store) IndexEnabled() bool { return s.index.Load() != nil }

func (s *Store) IndexServing() bool {
	c := s.index.Load()
	return c != nil && c.pub.Load() != nil
}

// FailCommitOutcome does to the store what a commit that failed in an
// unknown state does: the index stops serving and the next batch starts
// from the database.
func (s *Store) FailCommitOutcome() {
	s.staleIndex()
	if b, ok := s.writer.b.(*directBatcher); ok {
		b.uncertain = true
	}
}

// EtcdContains is etcd's rule for a key in [key, range_end), stated
// directly (keyrange_fuzz_test.go), for the fuzz targets outside the
// package.
var EtcdContains = etcdContains
