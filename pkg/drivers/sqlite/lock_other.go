//go:build !unix

package sqlite

import "os"

// lockFile opens path without locking it: QuantyKube's server targets
// Unix; elsewhere nothing stops a second server on the same file.
func lockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
