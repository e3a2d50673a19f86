package importer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdPage is how many keys one Range reads: bounded so that no answer
// nears etcd's message limits whatever the values' sizes.
const etcdPage = 500

type etcdSource struct {
	cli       *clientv3.Client
	endpoints []string
}

func openEtcd(ctx context.Context, from string, opts Options) (Source, error) {
	tlsConf, err := opts.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("import: etcd source: %w", err)
	}
	var endpoints []string
	for _, ep := range strings.Split(from, ",") {
		ep = strings.TrimSpace(ep)
		if !strings.Contains(ep, "://") {
			// etcd://a:2379,b:2379: the scheme comes once.
			scheme, _, _ := strings.Cut(from, "://")
			ep = scheme + "://" + ep
		}
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("import: etcd endpoint %q: want etcd://HOST:PORT, http://HOST:PORT or https://HOST:PORT", ep)
		}
		switch {
		case u.Scheme == "etcd" && tlsConf != nil:
			u.Scheme = "https"
		case u.Scheme == "etcd":
			u.Scheme = "http"
		case u.Scheme == "http" && tlsConf != nil:
			return nil, fmt.Errorf("import: etcd endpoint %q is plaintext but TLS files were given: use https://", ep)
		}
		endpoints = append(endpoints, u.Scheme+"://"+u.Host)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsConf,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		// The largest answer a page of big values makes.
		MaxCallRecvMsgSize: 256 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("import: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	e := &etcdSource{cli: cli, endpoints: endpoints}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Status(sctx, endpoints[0]); err != nil {
		cli.Close()
		return nil, fmt.Errorf("import: etcd %s does not answer: %w", endpoints[0], err)
	}
	return e, nil
}

func (e *etcdSource) String() string { return "etcd (" + strings.Join(e.endpoints, ",") + ")" }

func (e *etcdSource) Close() error { return e.cli.Close() }

// Read pages through every key at the revision of its first read, then
// reads the leases.
func (e *etcdSource) Read(ctx context.Context, sink Sink) (Summary, error) {
	var sum Summary
	leases := map[int64]bool{}
	// "\x00" with WithFromKey is every key: none sorts before it.
	from := "\x00"
	for {
		opts := []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithLimit(etcdPage)}
		if sum.Rev != 0 {
			opts = append(opts, clientv3.WithRev(sum.Rev))
		}
		resp, err := e.cli.Get(ctx, from, opts...)
		if errors.Is(err, rpctypes.ErrCompacted) {
			return sum, fmt.Errorf("import: %s compacted revision %d while it was read: run the import again (and pause compaction, or stop kube-apiserver, while it runs)", e, sum.Rev)
		}
		if err != nil {
			return sum, fmt.Errorf("import: %s: read keys from %q: %w", e, from, err)
		}
		if sum.Rev == 0 {
			sum.Rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if kv.Lease != 0 {
				leases[kv.Lease] = true
			}
			if err := sink.Put(kv); err != nil {
				return sum, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	// The leases that exist now, and those the keys were attached to at
	// sum.Rev, which may have ended since.
	ll, err := e.cli.Leases(ctx)
	if err != nil {
		return sum, fmt.Errorf("import: %s: list leases: %w", e, err)
	}
	for _, l := range ll.Leases {
		leases[int64(l.ID)] = true
	}
	ids := make([]int64, 0, len(leases))
	for id := range leases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		ttl, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(id))
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return sum, fmt.Errorf("import: %s: lease %x: %w", e, id, err)
		}
		// An ended lease gets the shortest TTL (0 is raised to it).
		granted := int64(0)
		if err == nil && ttl.TTL > 0 {
			granted = ttl.GrantedTTL
		} else {
			sum.EndedLeases++
		}
		if err := sink.Lease(id, granted); err != nil {
			return sum, err
		}
	}
	return sum, nil
}
