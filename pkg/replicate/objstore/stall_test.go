package objstore_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
)

// An object store that takes the request and never answers, nor closes
// the connection (a black hole), fails the PUT after the stall timeout,
// retries included, rather than holding it until TCP gives up.
func TestS3BlackHoleFailsAfterTheStallTimeout(t *testing.T) {
	objstoretest.SetCredentials(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c) // read all, answer nothing
		}
	}()
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := objstore.Open(ctx, "s3://bucket/prefix?endpoint=http://"+ln.Addr().String()+"&region=us-east-1&force-path-style=true",
		objstore.Options{StallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = st.Put(ctx, "a", strings.NewReader("x"), 1)
	took := time.Since(start)
	if err == nil || ctx.Err() != nil || took > 20*time.Second {
		t.Fatalf("PUT to a black hole: %v after %s (context: %v), want a failure within the stall timeout and the retries", err, took.Round(time.Millisecond), ctx.Err())
	}
	t.Logf("PUT to a black hole failed after %s: %v", took.Round(time.Millisecond), err)
}
