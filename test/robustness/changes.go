package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// HistoryChanges reads every change QuantyKube's history holds, of the
// whole key space, with `quantykube history log` (bin) from endpoint: the
// store's own record of what it did, whatever its clients and watchers
// saw.
func HistoryChanges(ctx context.Context, bin, endpoint string) ([]Revision, error) {
	cmd := exec.CommandContext(ctx, bin, "history", "log", "", "--prefix", "-o", "json", "--endpoints", endpoint)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("quantykube history log: %v: %s", err, stderr.String())
	}
	return parseLog(out)
}

// logJSON is `quantykube history log -o json`: protojson of a LogResponse
// with the proto's field names, int64s as strings and bytes as base64.
type logJSON struct {
	Entries []struct {
		Revision int64 `json:"revision,string"`
		Deleted  int64 `json:"deleted,string"`
		Kv       struct {
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
			Lease int64  `json:"lease,string"`
		} `json:"kv"`
	} `json:"entries"`
}

func parseLog(b []byte) ([]Revision, error) {
	var l logJSON
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("quantykube history log's output: %w", err)
	}
	var revs []Revision
	for _, e := range l.Entries {
		c := Change{Delete: e.Deleted != 0, Key: string(e.Kv.Key)}
		if !c.Delete {
			c.Value, c.Lease = e.Kv.Value, e.Kv.Lease
		}
		if n := len(revs); n == 0 || revs[n-1].Rev != e.Revision {
			if n > 0 && revs[n-1].Rev > e.Revision {
				return nil, fmt.Errorf("history log: revision %d after %d", e.Revision, revs[n-1].Rev)
			}
			revs = append(revs, Revision{Rev: e.Revision})
		}
		revs[len(revs)-1].Changes = append(revs[len(revs)-1].Changes, c)
	}
	return revs, nil
}

// Recorder is a watch of the whole key space from the first revision,
// started before the traffic: on etcd, whose compactions leave no history
// to read afterwards, the record of every revision that Rebuild reads.
type Recorder struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	revs []Revision
	err  error
}

// Record starts a Recorder on endpoints.
func Record(endpoints []string) (*Recorder, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{cli: cli, cancel: cancel, done: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	for resp := range r.cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(2)) {
		if err := resp.Err(); err != nil {
			r.mu.Lock()
			r.err = fmt.Errorf("the recording watch ended: %w", err)
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		for _, ev := range resp.Events {
			c := Change{Delete: ev.Type == mvccpb.DELETE, Key: string(ev.Kv.Key)}
			if !c.Delete {
				c.Value, c.Lease = ev.Kv.Value, ev.Kv.Lease
			}
			if n := len(r.revs); n == 0 || r.revs[n-1].Rev != ev.Kv.ModRevision {
				r.revs = append(r.revs, Revision{Rev: ev.Kv.ModRevision})
			}
			r.revs[len(r.revs)-1].Changes = append(r.revs[len(r.revs)-1].Changes, c)
		}
		r.mu.Unlock()
	}
}

// Stop waits until the recorder has seen revision rev (or ctx ends), stops
// it and returns what it saw.
func (r *Recorder) Stop(ctx context.Context, rev int64) ([]Revision, error) {
	defer r.cli.Close()
	defer func() { r.cancel(); <-r.done }()
	for {
		r.mu.Lock()
		revs, err := r.revs, r.err
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if n := len(revs); n > 0 && revs[n-1].Rev >= rev {
			return revs, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the recording watch did not reach revision %d: %w", rev, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// String is a revision as a line, for the reports.
func (rv Revision) String() string {
	var b bytes.Buffer
	b.WriteString(strconv.FormatInt(rv.Rev, 10))
	for _, c := range rv.Changes {
		if c.Delete {
			fmt.Fprintf(&b, " delete %s", c.Key)
			continue
		}
		fmt.Fprintf(&b, " put %s=%s", c.Key, showValue(normalize([]Change{c})[0].value))
	}
	return b.String()
}
