package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// historyLog is `quantykube history log KEY -o json` through endpoint.
func historyLog(t *testing.T, c *Cluster, endpoint, key string) []*historypb.LogEntry {
	t.Helper()
	out, err := c.QuantyKubeCLI(t, "history", "log", key, "--endpoints", endpoint, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var resp historypb.LogResponse
	if err := protojson.Unmarshal(out, &resp); err != nil {
		t.Fatalf("history log -o json: %v\n%s", err, out)
	}
	return resp.Entries
}

// checkHistory: a ConfigMap deleted through kube-apiserver has exactly its
// create and its delete in QuantyKube's History log, at the revisions
// kube-apiserver reported; `quantykube history restore --at` a time
// between the two brings it back, as a new revision, with its uid and
// data, to kube-apiserver's clients (its watch cache follows the write
// like any other); and the restored object takes updates. With replicas,
// the log is read through the last replica and the restore written
// through the first.
func checkHistory(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	const name = "e2e-restored"
	key := "/registry/configmaps/" + ns + "/" + name
	eps := c.QuantyKube.Endpoints()
	logEP, restoreEP := eps[len(eps)-1], eps[0]

	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"state": "precious"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	createRev := rv(t, created)
	// A delete event carries the revision of the delete.
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: byName(name), ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	// The log's times are milliseconds: keep the create and the delete
	// apart, so that a time strictly between them exists.
	time.Sleep(50 * time.Millisecond)
	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	ev := nextEvent(t, w, "watch after the delete")
	deleted, ok := ev.Object.(*corev1.ConfigMap)
	if ev.Type != watch.Deleted || !ok {
		t.Fatalf("after the delete: %s %v, want DELETED", ev.Type, ev.Object)
	}
	deleteRev := rv(t, deleted)
	if _, err := cms.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}

	entries := historyLog(t, c, logEP, key)
	if len(entries) != 2 {
		t.Fatalf("history log %s: %d entries, want the create and the delete:\n%s", key, len(entries), entriesString(entries))
	}
	cr, del := entries[0], entries[1]
	if cr.Revision != createRev || cr.Deleted != 0 || cr.PrevKv != nil || cr.Kv == nil ||
		string(cr.Kv.Key) != key || cr.Kv.CreateRevision != createRev || cr.Kv.ModRevision != createRev || cr.Kv.Version != 1 {
		t.Errorf("history log entry 1: %s\nwant the create at revision %d (deleted 0, version 1, no prev_kv)", entryString(cr), createRev)
	}
	if del.Revision != deleteRev || del.Deleted != 1 || del.Kv == nil || string(del.Kv.Key) != key ||
		del.PrevKv == nil || del.PrevKv.ModRevision != createRev {
		t.Errorf("history log entry 2: %s\nwant the delete at revision %d (deleted 1, prev_kv at %d)", entryString(del), deleteRev, createRev)
	}
	if del.UnixMs <= cr.UnixMs {
		t.Fatalf("history log: the delete at %d ms is not after the create at %d ms", del.UnixMs, cr.UnixMs)
	}

	at := time.UnixMilli((cr.UnixMs + del.UnixMs) / 2).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	out, err := c.QuantyKubeCLI(t, "history", "restore", key, "--at", at, "--endpoints", restoreEP, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var restore historypb.RestoreResponse
	if err := protojson.Unmarshal(out, &restore); err != nil {
		t.Fatalf("history restore -o json: %v\n%s", err, out)
	}
	if restore.Revision < createRev || restore.Revision >= deleteRev || restore.Kv == nil || restore.NewRevision <= deleteRev {
		t.Fatalf("history restore --at %s: %v\nwant the state read between revisions %d and %d, written after %d",
			at, &restore, createRev, deleteRev, deleteRev)
	}

	var back *corev1.ConfigMap
	eventually(t, ctx, 30*time.Second, 250*time.Millisecond, "the restored configmap through kube-apiserver", func(ctx context.Context) (bool, error) {
		back, err = cms.Get(ctx, name, metav1.GetOptions{})
		return err == nil, err
	})
	if back.UID != created.UID || back.Data["state"] != "precious" || rv(t, back) != restore.NewRevision {
		t.Errorf("restored: uid %s data %v rv %s; want uid %s, state=precious, rv %d",
			back.UID, back.Data, back.ResourceVersion, created.UID, restore.NewRevision)
	}
	back.Labels = map[string]string{"restored": "yes"}
	updated, err := cms.Update(ctx, back, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update the restored configmap: %v", err)
	}
	if rv(t, updated) <= restore.NewRevision || updated.Labels["restored"] != "yes" {
		t.Errorf("update of the restored configmap: rv %s labels %v", updated.ResourceVersion, updated.Labels)
	}

	// The restore and the update are ordinary changes in the log.
	entries = historyLog(t, c, logEP, key)
	if len(entries) != 4 || entries[2].Revision != restore.NewRevision || entries[2].Deleted != 0 || entries[2].PrevKv != nil ||
		entries[3].Revision != rv(t, updated) || entries[3].Deleted != 0 {
		t.Errorf("history log after the restore and the update:\n%s\nwant the create, the delete, a create at %d, a put at %s",
			entriesString(entries), restore.NewRevision, updated.ResourceVersion)
	}
}

// entryString shows a log entry without its value (a protobuf-encoded
// object, unreadable in a failure message).
func entryString(e *historypb.LogEntry) string {
	s := fmt.Sprintf("revision %d, deleted %d", e.Revision, e.Deleted)
	if e.Kv != nil {
		s += fmt.Sprintf(", key %s create %d mod %d version %d", e.Kv.Key, e.Kv.CreateRevision, e.Kv.ModRevision, e.Kv.Version)
	}
	if e.PrevKv != nil {
		s += fmt.Sprintf(", prev_kv mod %d", e.PrevKv.ModRevision)
	}
	return s
}

func entriesString(entries []*historypb.LogEntry) string {
	var b strings.Builder
	for i, e := range entries {
		fmt.Fprintf(&b, "  %d: %s\n", i+1, entryString(e))
	}
	return b.String()
}
