package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// checkpointInterval is how often the WAL is copied into the database file.
// At the write rates a 2-core machine sustains, that keeps the WAL to a few
// MB, about what SQLite's own 1,000-page auto-checkpoint kept.
const checkpointInterval = 100 * time.Millisecond

// checkpointer runs SQLite's checkpoints on a connection of its own, so the
// writer never pays for one. With auto-checkpoint on, the commit that
// crosses 1,000 WAL pages copies them into the database file and fsyncs it
// before its batch is answered: the write latency's long tail, and the part
// that grows with the database, since a big index dirties more pages per
// commit. A PASSIVE checkpoint waits for no reader or writer; frames a
// reader still needs stay in the WAL until a later pass.
type checkpointer struct {
	db   *sql.DB
	stop chan struct{}
	done chan struct{}
}

func startCheckpointer(db *sql.DB) *checkpointer {
	c := &checkpointer{db: db, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *checkpointer) run() {
	defer close(c.done)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	var lastWarn time.Time
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var busy, walPages, copied int
		err := c.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &walPages, &copied)
		cancel()
		if err != nil && time.Since(lastWarn) > time.Minute {
			// The WAL grows until a checkpoint succeeds; reads and writes
			// stay correct meanwhile.
			slog.Warn("sqlite: WAL checkpoint failed", "err", err)
			lastWarn = time.Now()
		}
	}
}

// close stops the loop and closes its connection; SQLite's last connection
// to close checkpoints what is left.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
