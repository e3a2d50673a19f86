package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/quantyroot/quantykube/test/framework"
)

const (
	// drillInterval is --replicate-interval's default, the RPO the drill
	// holds the restore to.
	drillInterval = time.Second
	// drillMargin is what a revision may take beyond the interval to be in
	// the bucket: the step's read transaction, gzip, and one file://
	// PUT (write, fsync, rename) of a second's worth of writes, on a
	// loaded 2-core machine. An ack is read by the writer after
	// kube-apiserver answered, after the commit, so an ack's age is an
	// upper bound of its commit's.
	drillMargin = 500 * time.Millisecond
	// drillLoad is how long the writers run before the kill.
	drillLoad = 6 * time.Second
)

var (
	restoredRev = regexp.MustCompile(`at revision (\d+)`)
	bumpedRev   = regexp.MustCompile(`bumped +to revision (\d+)`)
)

// TestLostMachineUnderAPIServer is issue 54's lost-machine drill under a
// real kube-apiserver: `quantykube serve --replicate file://BUCKET` on
// SQLite, ConfigMaps written through kube-apiserver with a raw watch and
// an informer following them, then kill -9, the data directory deleted,
// `quantykube restore --from` into the same path, and QuantyKube started
// again on the same address, under the same kube-apiserver. Checked
// against the writer's log: every write acknowledged more than the RPO
// before the kill is restored at its resourceVersion with its content, and
// nothing is there the writer did not send. Then what docs/backup.md tells
// operators: restore --from moved the store's revision a billion past the
// bucket's last and marked it compacted, so the same kube-apiserver, not
// restarted, relists and serves the store's state, hands out no
// resourceVersion twice, answers 410 Gone to a client resuming from before
// the loss, and the informer that ran across catches up.
func TestLostMachineUnderAPIServer(t *testing.T) {
	// --replicate names bucket/current/replica, current a link to the
	// first store's folder. A restored store has a lineage of its own and
	// must replicate to a prefix of its own (docs/backup.md): the link is
	// moved to a new folder before QuantyKube starts again, as an operator
	// gives it a new prefix, and the flags stay the same.
	bucket := t.TempDir()
	for _, d := range []string{"lost", "restored"} {
		if err := os.Mkdir(filepath.Join(bucket, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	current := filepath.Join(bucket, "current")
	if err := os.Symlink("lost", current); err != nil {
		t.Fatal(err)
	}
	c := StartCluster(t, Options{Backend: framework.SQLite, Args: []string{"--replicate", "file://" + current + "/replica"}})
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	prefix := "/registry/configmaps/" + ns + "/"

	start, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "drill-start"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	startRV := rvOf(start)
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: start.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from %d: %v", startRV, err)
	}
	defer w.Stop()
	var raw watchRecorder
	raw.record(w)
	inf := startInformer(t, c, ns)

	l := newLedger()
	stop := make(chan struct{})
	wctx, cancelWriters := context.WithCancel(ctx)
	defer cancelWriters()
	written := make(chan struct{})
	go func() {
		defer close(written)
		runWriters(wctx, c, ns, l, stop, 4, 25, 5000)
	}()
	select {
	case <-time.After(drillLoad):
	case <-written:
		t.Fatal("the writers stopped before the kill")
	}

	addr := c.QuantyKube.Endpoint()
	killed := time.Now()
	c.QuantyKube.Kill(t)
	close(stop)
	cancelWriters()
	<-written
	maxSeen := int64(0) // the newest revision kube-apiserver handed out
	for _, a := range l.acked() {
		maxSeen = max(maxSeen, a.rv)
	}
	evs, _, _ := raw.snapshot()
	for _, e := range evs {
		maxSeen = max(maxSeen, e.rv)
	}

	// The machine is lost: its disk with it.
	path := strings.TrimPrefix(c.QuantyKube.DSN(), "sqlite://")
	if err := os.RemoveAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	out, err := c.QuantyKubeCLI(t, "restore", "--from", "file://"+filepath.Join(bucket, "lost", "replica"), "--endpoint", c.QuantyKube.DSN())
	if err != nil {
		t.Fatal(err)
	}
	m := restoredRev.FindSubmatch(out)
	if m == nil {
		t.Fatalf("restore printed no revision:\n%s", out)
	}
	restored, _ := strconv.ParseInt(string(m[1]), 10, 64)
	if err := os.Remove(current); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("restored", current); err != nil {
		t.Fatal(err)
	}
	c.QuantyKube.Start(t)
	if got := c.QuantyKube.Endpoint(); got != addr {
		t.Fatalf("QuantyKube came back on %s, not %s: kube-apiserver cannot reconnect", got, addr)
	}
	storeBack := time.Since(killed)
	// The same kube-apiserver, reconnected to the restored store.
	if err := c.waitAPIServer(time.Minute); err != nil {
		t.Fatalf("kube-apiserver after the restore: %v", err)
	}
	apiBack := time.Since(killed)

	m = bumpedRev.FindSubmatch(out)
	if m == nil {
		t.Fatalf("restore --from printed no bump; docs/backup.md says it moves the revision a billion past the bucket's last: update it\n%s", out)
	}
	bumped, _ := strconv.ParseInt(string(m[1]), 10, 64)
	if bumped <= maxSeen {
		t.Fatalf("restore --from bumped to %d, not past the %d kube-apiserver had handed out", bumped, maxSeen)
	}
	t.Logf("restore --from:\n%s", out)

	seen := storeHistory(t, ctx, c.QuantyKube.Client(t), prefix, startRV, restored, l)
	checkAcked(t, l, seen, killed, restored)
	t.Logf("kill to ready: QuantyKube restored and serving in %s, kube-apiserver ready in %s; revisions: restored %d, bumped to %d, kube-apiserver had handed out up to %d",
		storeBack.Round(time.Millisecond), apiBack.Round(time.Millisecond), restored, bumped, maxSeen)
	checkSameAPIServer(t, ctx, c, &raw, inf, l, ns, prefix, killed, maxSeen)
}

// checkAcked holds the acknowledged writes against what the restored
// store's history holds (seen: revision by value, up to restored): one
// acknowledged more than the RPO before the kill must be there; one in
// the RPO window may be missing, and is counted.
func checkAcked(t *testing.T, l *ledger, seen map[string]int64, killed time.Time, restored int64) {
	t.Helper()
	var old, window, lost int
	var oldestLost time.Duration
	for _, a := range l.acked() {
		age := killed.Sub(a.acked)
		inWindow := age <= drillInterval+drillMargin
		if inWindow {
			window++
		} else {
			old++
		}
		if _, ok := seen[a.value]; ok {
			continue
		}
		switch {
		case a.rv <= restored:
			t.Errorf("%s=%q, acknowledged at %d, is not in the restored store at %d", a.name, a.value, a.rv, restored)
		case !inWindow:
			t.Errorf("%s=%q, acknowledged at %d %s before the kill, is lost (restored revision %d; RPO %s + %s)",
				a.name, a.value, a.rv, age.Round(time.Millisecond), restored, drillInterval, drillMargin)
		default:
			lost++
			oldestLost = max(oldestLost, age)
		}
	}
	if old == 0 {
		t.Fatal("no write was acknowledged before the RPO window: the drill proved nothing")
	}
	t.Logf("acknowledged writes: %d more than %s before the kill, all restored; %d in the RPO window, %d of them lost (the oldest lost acknowledged %s before the kill)",
		old, drillInterval+drillMargin, window, lost, oldestLost.Round(time.Millisecond))
}

// storeState is ns's ConfigMaps as QuantyKube holds them, read straight
// through its etcd API.
func storeState(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) (map[string]objState, int64) {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get %s from QuantyKube: %v", prefix, err)
	}
	out := map[string]objState{}
	for _, kv := range resp.Kvs {
		cm, err := storeConfigMap(kv.Value)
		if err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		out[cm.Name] = objState{kv.ModRevision, cm.Data["v"]}
	}
	return out, resp.Header.Revision
}

// checkSameAPIServer holds what the kube-apiserver that ran across the
// loss, not restarted, and its clients do once the store is back behind
// it, bumped and marked compacted: the watch cache's etcd watch is
// cancelled as compacted and it relists, so a write gets a resourceVersion
// past every one handed out before (maxSeen) and its list is the store's;
// a client resuming from a resourceVersion it saw before the loss is
// answered 410 Gone and relists, so the informer that ran across catches
// up; new writes reach a fresh list and watch. docs/backup.md says so.
func checkSameAPIServer(t *testing.T, ctx context.Context, c *Cluster, raw *watchRecorder, inf *informer, l *ledger, ns, prefix string, killed time.Time, maxSeen int64) {
	t.Helper()
	const bound = time.Minute
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cli := c.QuantyKube.Client(t)
	var probe *corev1.ConfigMap
	eventually(t, ctx, bound, 250*time.Millisecond, "a create through the same kube-apiserver after the restore", func(ctx context.Context) (bool, error) {
		var err error
		probe, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "drill-probe"}, Data: map[string]string{"v": "probe"}}, metav1.CreateOptions{})
		return err == nil, err
	})
	if rvOf(probe) <= maxSeen {
		t.Errorf("a create after the restore got resourceVersion %s, not past the %d kube-apiserver had handed out: reused; docs/backup.md says no revision names two states: update it", probe.ResourceVersion, maxSeen)
	}
	var storeRev, listRV int64
	eventually(t, ctx, bound, 250*time.Millisecond, "the same kube-apiserver's list equal to the store (docs/backup.md says it relists without a restart: update it)", func(ctx context.Context) (bool, error) {
		store, rev := storeState(t, ctx, cli, prefix)
		api, rv, err := apiState(ctx, c, ns)
		if err != nil {
			return false, err
		}
		storeRev, listRV = rev, rv
		if d := diffStates(api, store); d != "" {
			return false, fmt.Errorf("list at %d against the store at %d:%s", rv, rev, d)
		}
		if _, ok := api["drill-probe"]; !ok {
			return false, fmt.Errorf("list at %d holds no drill-probe", rv)
		}
		return true, nil
	})
	t.Logf("kill to the same kube-apiserver's list equal to the store: %s (store at %d, list at %d, probe at %d)",
		time.Since(killed).Round(time.Millisecond), storeRev, listRV, rvOf(probe))

	// The raw watch open across the loss: kube-apiserver ended it when its
	// cache relisted, and what it saw before was what the writer sent.
	eventually(t, ctx, bound, 250*time.Millisecond, "the raw watch open across the loss ended (docs/backup.md says kube-apiserver ends it: update it)", func(context.Context) (bool, error) {
		_, errs, ended := raw.snapshot()
		return ended || len(errs) > 0, nil
	})
	evs, errs, ended := raw.snapshot()
	lastRV := int64(0)
	for _, e := range evs {
		if e.rv > maxSeen {
			continue // written after the restore
		}
		if w := l.lookup(e.value); w == nil || w.name != e.name || (w.rv != 0 && w.rv != e.rv) {
			t.Errorf("the raw watch saw %s %s@%d=%q, which the writer did not send at that resourceVersion", e.typ, e.name, e.rv, e.value)
		}
		lastRV = max(lastRV, e.rv)
	}
	t.Logf("raw watch across the loss: %d events up to %d, errors %v, ended %v", len(evs), lastRV, errs, ended)
	err := resumeWatch(ctx, c, ns, maxSeen)
	t.Logf("a watch resumed from %d, the newest resourceVersion a client saw before the loss: %v", maxSeen, err)
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("a watch resumed from %d, handed out before the loss, with the store at %d: %v; docs/backup.md says it is refused with 410 Gone and the client relists: update it", maxSeen, storeRev, err)
	}

	eventually(t, ctx, bound, 250*time.Millisecond, "the informer that ran across the loss equal to a fresh list (docs/backup.md says it relists and catches up: update it)", func(ctx context.Context) (bool, error) {
		want, _, err := apiState(ctx, c, ns)
		if err != nil {
			return false, err
		}
		if d := diffStates(inf.state(), want); d != "" {
			return false, fmt.Errorf("against a fresh list:%s", d)
		}
		return true, nil
	})
	t.Logf("kill to the informer that ran across the loss caught up: %s (its watch errors: %v)", time.Since(killed).Round(time.Millisecond), inf.errors())

	// A client that lists afresh follows new writes.
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("relist: %v", err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from the relist's %s: %v", list.ResourceVersion, err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "drill-new"}}
	for i := range 3 {
		cm.Data = map[string]string{"v": fmt.Sprintf("new#%d", i)}
		if i == 0 {
			cm, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("write %d after the restore: %v", i, err)
		}
		if rvOf(cm) <= maxSeen {
			t.Errorf("write %d after the restore got resourceVersion %s, handed out before the loss (up to %d)", i, cm.ResourceVersion, maxSeen)
		}
		ev := nextEvent(t, w, fmt.Sprintf("write %d after the restore", i))
		if got, ok := ev.Object.(*corev1.ConfigMap); !ok || got.Name != "drill-new" || got.ResourceVersion != cm.ResourceVersion || got.Data["v"] != cm.Data["v"] {
			t.Errorf("after write %d at %s: %s %+v", i, cm.ResourceVersion, ev.Type, ev.Object)
		}
	}
	eventually(t, ctx, bound, 250*time.Millisecond, "the informer that ran across the loss holding the writes after the restore", func(ctx context.Context) (bool, error) {
		if got := inf.state()["drill-new"]; got.rv != rvOf(cm) {
			return false, fmt.Errorf("it holds drill-new@%d, want @%s", got.rv, cm.ResourceVersion)
		}
		return true, nil
	})
}

// resumeWatch starts a watch from rv, as a client that kept running
// resumes, writes a ConfigMap, and returns the error the watch was
// answered with (nil if it was served: it delivered an event, or none
// within a few seconds of the write).
func resumeWatch(ctx context.Context, c *Cluster, ns string, rv int64) error {
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rv, 10)})
	if err != nil {
		return err
	}
	defer w.Stop()
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "drill-resume"}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	select {
	case ev, ok := <-w.ResultChan():
		switch {
		case !ok:
			return errors.New("the watch closed with no event")
		case ev.Type == watch.Error:
			return apierrors.FromObject(ev.Object)
		}
		return nil
	case <-time.After(5 * time.Second):
		return nil
	}
}
