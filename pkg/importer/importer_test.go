package importer

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// recorder is a Sink that keeps what it is given.
type recorder struct {
	kvs    []*mvccpb.KeyValue
	leases map[int64]int64
}

func (r *recorder) Put(kv *mvccpb.KeyValue) error { r.kvs = append(r.kvs, kv); return nil }

func (r *recorder) Lease(id, ttl int64) error {
	if r.leases == nil {
		r.leases = map[int64]int64{}
	}
	r.leases[id] = ttl
	return nil
}

func readAll(t *testing.T, from string, opts Options) (*recorder, Summary, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	src, err := Open(ctx, from, opts)
	if err != nil {
		return nil, Summary{}, err
	}
	defer src.Close()
	r := &recorder{}
	sum, err := src.Read(ctx, r)
	return r, sum, err
}

// A page of keys whose values together exceed what the client takes in
// one answer is read again in smaller pages, every key once, in order; a
// single key over that limit is an error, not a loop.
func TestEtcdPagesShrinkToFit(t *testing.T) {
	etcd := framework.Start(t, framework.Etcd, framework.Options{})
	cli := etcd.Client(t)
	const n = 12
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 1<<20) }
	for i := range n {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("/big/%02d", i), string(value(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Every key fits alone; the first page of n keys is four times too big.
	r, sum, err := readAll(t, etcd.Endpoint(), Options{maxRecvMsgSize: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.kvs) != n || sum.Rev != n+1 {
		t.Fatalf("read %d keys at revision %d, want %d at %d", len(r.kvs), sum.Rev, n, n+1)
	}
	for i, kv := range r.kvs {
		if string(kv.Key) != fmt.Sprintf("/big/%02d", i) || !bytes.Equal(kv.Value, value(i)) {
			t.Errorf("key %d: %s (%d bytes)", i, kv.Key, len(kv.Value))
		}
	}

	_, _, err = readAll(t, etcd.Endpoint(), Options{maxRecvMsgSize: 512 << 10})
	if err == nil || !strings.Contains(err.Error(), `the key at or after "\x00" is alone over the 524288 bytes`) {
		t.Errorf("a key over the limit: %v", err)
	}
}
