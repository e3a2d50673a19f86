//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path, held until the file is closed
// (or the process dies, so a crash never leaves it stuck).
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		switch {
		case errors.Is(err, syscall.EWOULDBLOCK):
			return nil, fmt.Errorf("another QuantyKube server has this database open (%s is locked)", path)
		case errors.Is(err, syscall.ENOLCK), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS):
			// SQLite's own locking is unreliable there too.
			return nil, fmt.Errorf("the filesystem of %s does not support file locks (%v): keep the database on a local filesystem", path, err)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
