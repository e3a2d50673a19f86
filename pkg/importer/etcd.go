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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdPage is how many keys one Range asks for at first. etcd bounds a
// value by its --max-request-bytes, not a page: a page of large values can
// exceed what the client takes in one answer (etcdMaxRecv), and is then
// asked for again with half as many keys, down to one.
const etcdPage = 500

// etcdMaxRecv is the largest answer the client takes, which bounds the
// memory one page holds.
const etcdMaxRecv = 256 << 20

type etcdSource struct {
	cli       *clientv3.Client
	endpoints []string
	maxRecv   int
}

func openEtcd(ctx context.Context, from string, opts Options) (Source, error) {
	tlsConf, err := opts.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("import: etcd source: %w", err)
	}
	endpoints, err := etcdEndpoints(from, tlsConf != nil)
	if err != nil {
		return nil, err
	}
	maxRecv := opts.maxRecvMsgSize
	if maxRecv == 0 {
		maxRecv = etcdMaxRecv
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          endpoints,
		TLS:                tlsConf,
		DialTimeout:        10 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallRecvMsgSize: maxRecv,
	})
	if err != nil {
		return nil, fmt.Errorf("import: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	e := &etcdSource{cli: cli, endpoints: endpoints, maxRecv: maxRecv}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Status(sctx, endpoints[0]); err != nil {
		cli.Close()
		return nil, fmt.Errorf("import: etcd %s does not answer: %w", endpoints[0], err)
	}
	return e, nil
}

// etcdEndpoints are the client URLs of an etcd source: etcd://, http:// or
// https:// endpoints separated by commas, the scheme given once or on
// each. etcd:// is https:// with TLS files, http:// without; http:// with
// TLS files is refused rather than sending them nowhere.
func etcdEndpoints(from string, withTLS bool) ([]string, error) {
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
		case u.Scheme == "etcd" && withTLS:
			u.Scheme = "https"
		case u.Scheme == "etcd":
			u.Scheme = "http"
		case u.Scheme == "http" && withTLS:
			return nil, fmt.Errorf("import: etcd endpoint %q is plaintext but TLS files were given: use https://", ep)
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("import: etcd endpoint %q: want etcd://HOST:PORT, http://HOST:PORT or https://HOST:PORT", ep)
		}
		endpoints = append(endpoints, u.Scheme+"://"+u.Host)
	}
	return endpoints, nil
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
	page := int64(etcdPage)
	for {
		opts := []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithLimit(page)}
		if sum.Rev != 0 {
			opts = append(opts, clientv3.WithRev(sum.Rev))
		}
		resp, err := e.cli.Get(ctx, from, opts...)
		if status.Code(err) == codes.ResourceExhausted && page > 1 {
			// The answer was over the client's limit: fewer keys.
			page /= 2
			continue
		}
		if status.Code(err) == codes.ResourceExhausted {
			return sum, fmt.Errorf("import: %s: the key at or after %q is alone over the %d bytes the client takes in one answer: %w", e, from, e.maxRecv, err)
		}
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
