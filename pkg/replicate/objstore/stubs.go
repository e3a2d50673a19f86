package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
)

// openS3 is not built yet: s3:// comes in the next commit.
func openS3(_ context.Context, u *url.URL, _ string) (Store, error) {
	return nil, fmt.Errorf("object store URL %s: s3:// is not built yet", redacted(u))
}

func readKeyFile(string) ([]byte, error) {
	return nil, errors.New("object store encryption is not built yet")
}

func newEncrypted(st Store, _ []byte) Store { return st }
