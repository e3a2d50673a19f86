package robustness

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// warmFor is how long warm reads the servers before the traffic.
const warmFor = time.Second

// warm reads from every server, with as many clients as the traffic will
// have, for warmFor, before the traffic starts: the first requests of a
// freshly started server open its database connections and prepare its
// statements, which on PostgreSQL takes long enough that etcd's 200 ms
// deadlines fail a tenth of the first second's requests, and on two
// replicas under load half of them, so that its minimal rate is not
// reached. A server in service has them open. Reads take no revision.
// With writes (QuantyKube's servers, not etcd, whose WAL would hold them
// for the validators to read), it also sends Txns whose compare fails:
// they take no revision either, but go through the writer's batch as
// every write does (pkg/mvcc, KV.Txn). Their errors are not the run's (a
// slow first batch is what warming is for); one applied would be. The
// store is still empty, as etcd's validators require.
func warm(ctx context.Context, endpoints []string, clients int, writes bool) error {
	ctx, cancel := context.WithTimeout(ctx, warmFor)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoints[i%len(endpoints)]}, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cli.Close()
			for n := 0; ctx.Err() == nil; n++ {
				if writes && n%3 == 2 {
					// No key is ever created under this name: the compare
					// fails and the Put is never applied.
					r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("quanty-warm"), ">", 0)).
						Then(clientv3.OpPut("quanty-warm", "never")).Commit()
					if err == nil && r.Succeeded {
						errs <- fmt.Errorf("a warming write whose compare must fail was applied at revision %d", r.Header.Revision)
						return
					}
					continue
				}
				opts := []clientv3.OpOption{clientv3.WithPrefix()}
				if n%3 == 1 {
					opts = append(opts, clientv3.WithRev(1)) // the SQL of a read at a revision
				}
				if _, err := cli.Get(ctx, fmt.Sprintf("key%d", n%10), opts...); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("warming the servers up: %w", err)
	}
	return nil
}
