//go:build seaweedfs

// Replication on a real S3 server: make replicate-s3 runs it (the
// seaweedfs tag), with SeaweedFS built by scripts/seaweedfs.sh.

package replicate_test

import (
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
)

// A replicated store on SeaweedFS's S3, encrypted, restores at its
// latest and an earlier revision, and is refused without the key.
func TestReplicateS3Encrypted(t *testing.T) {
	srv := objstoretest.Start(t)
	objstoretest.SetCredentials(t)
	replicateEncrypted(t, srv.URL("replicate-test"))
}
