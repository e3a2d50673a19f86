package mvcc

// Test hooks: the cache's state, and the one failure tests cannot cause
// (a commit whose outcome is unknown). Call them between writes: the
// writer's answers order them with its own use of the cache.

func (s *Store) CacheEnabled() bool { return s.cache.Load() != nil }

func (s *Store) CacheServing() bool {
	c := s.cache.Load()
	return c != nil && c.pub.Load() != nil
}

func (s *Store) MarkCacheStale() { s.cacheBatch(0, nil, false) }
