// Command k3sembed embeds QuantyKube the way k3s embeds kine, to prove that
// pkg/endpoint is a drop-in for kine's: it builds an endpoint.Config with
// the fields k3s sets (a unix socket listener, the datastore endpoint, pool
// settings, a 5 s progress interval, an emulated etcd version), calls
// endpoint.Listen, and then serves what k3s serves from the returned
// ETCDConfig: an etcd client, and kube-apiserver's own storage layer
// (k8s.io/apiserver's storagebackend factory, the code kube-apiserver runs on
// its --etcd-servers). Only the import paths differ from a program written
// against kine.
//
//	k3sembed [-endpoint sqlite://DIR/state.db | postgres://...] [-dir DIR]
//
// It exits 0 when every step agreed, and prints each step.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/endpoint"
)

func main() {
	dir := flag.String("dir", "", "data and socket directory (default: a new temporary one)")
	dsn := flag.String("endpoint", "", "datastore endpoint (default: sqlite://DIR/state.db)")
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("", "k3sembed-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "k3sembed:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := run(ctx, *dir, *dsn, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "k3sembed:", err)
		os.Exit(1)
	}
}

// result is what a run saw, for the test to hold against the datastore.
type result struct {
	etcd endpoint.ETCDConfig
	// revs are the resourceVersions kube-apiserver's storage reported for
	// the create, the update and the delete.
	revs [3]uint64
}

// run embeds QuantyKube on dsn (a SQLite file in dir when empty), serves
// through it, and stops it as k3s does: by cancelling the context and
// waiting on the WaitGroup.
func run(ctx context.Context, dir, dsn string, out io.Writer) (result, error) {
	var res result
	if dsn == "" {
		// k3s's own default carries kine's SQLite parameters; QuantyKube
		// ignores them (durability is not the caller's to weaken).
		dsn = "sqlite://" + filepath.Join(dir, "state.db") + "?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate"
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	etcdCfg, err := endpoint.Listen(lctx, endpoint.Config{
		Listener:             "unix://" + filepath.Join(dir, "kine.sock"),
		Endpoint:             dsn,
		WaitGroup:            &wg,
		ConnectionPoolConfig: generic.ConnectionPoolConfig{MaxIdle: 2, MaxOpen: 3, MaxLifetime: time.Minute},
		NotifyInterval:       5 * time.Second,
		EmulatedETCDVersion:  "3.5.13",
	})
	if err != nil {
		return res, fmt.Errorf("endpoint.Listen: %w", err)
	}
	res.etcd = etcdCfg
	fmt.Fprintf(out, "listening: endpoints %v, leader election %v\n", etcdCfg.Endpoints, etcdCfg.LeaderElect)

	if err := etcdClient(ctx, etcdCfg, out); err != nil {
		return res, err
	}
	if res.revs, err = apiserverStorage(ctx, etcdCfg, out); err != nil {
		return res, err
	}

	stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		fmt.Fprintln(out, "stopped: the WaitGroup was released")
	case <-ctx.Done():
		return res, errors.New("the server did not stop after its context ended")
	}
	return res, nil
}

// etcdClient does with clientv3 what an etcd client would: a put, a get
// and a watch that sees the put.
func etcdClient(ctx context.Context, cfg endpoint.ETCDConfig, out io.Writer) error {
	tlsConf, err := cfg.TLSConfig.ClientConfig()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, TLS: tlsConf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	wch := cli.Watch(ctx, "/k3sembed/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		return fmt.Errorf("etcd client: watch not created: %v", wr.Err())
	}
	put, err := cli.Put(ctx, "/k3sembed/a", "1")
	if err != nil {
		return fmt.Errorf("etcd client: put: %w", err)
	}
	get, err := cli.Get(ctx, "/k3sembed/a")
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "1" || get.Kvs[0].ModRevision != put.Header.Revision {
		return fmt.Errorf("etcd client: get after put at %d: %v %v", put.Header.Revision, get, err)
	}
	select {
	case wr := <-wch:
		if len(wr.Events) != 1 || wr.Events[0].Kv.ModRevision != put.Header.Revision {
			return fmt.Errorf("etcd client: watch: %+v", wr)
		}
	case <-time.After(10 * time.Second):
		return errors.New("etcd client: the watch saw no event")
	}
	fmt.Fprintf(out, "etcd client: put, get and watch at revision %d\n", put.Header.Revision)
	return nil
}

// apiserverStorage runs kube-apiserver's storage layer for ConfigMaps on
// the endpoints: create, get, update, a paged list, delete, and a watch
// that sees all three changes. It returns their resourceVersions.
func apiserverStorage(ctx context.Context, cfg endpoint.ETCDConfig, out io.Writer) ([3]uint64, error) {
	var revs [3]uint64
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return revs, err
	}
	// Stored as JSON and read back as v1 objects: kube-apiserver stores
	// protobuf and converts to its internal types, neither of which matters
	// to the datastore.
	cf := serializer.NewCodecFactory(scheme)
	info, _ := runtime.SerializerInfoForMediaType(cf.SupportedMediaTypes(), runtime.ContentTypeJSON)
	codec := cf.CodecForVersions(info.Serializer, cf.UniversalDeserializer(), corev1.SchemeGroupVersion, corev1.SchemeGroupVersion)
	sc := storagebackend.NewDefaultConfig("/registry", codec)
	sc.Transport.ServerList = cfg.Endpoints
	sc.Transport.TrustedCAFile = cfg.TLSConfig.CAFile
	store, destroy, err := factory.Create(*sc.ForResource(schema.GroupResource{Resource: "configmaps"}),
		func() runtime.Object { return &corev1.ConfigMap{} },
		func() runtime.Object { return &corev1.ConfigMapList{} }, "/configmaps")
	if err != nil {
		return revs, fmt.Errorf("kube-apiserver storage: %w", err)
	}
	defer destroy()
	v := store.Versioner()

	key := "/configmaps/default/demo"
	created := &corev1.ConfigMap{}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"}, Data: map[string]string{"step": "1"}}
	if err := store.Create(ctx, key, cm, created, 0); err != nil {
		return revs, fmt.Errorf("storage create: %w", err)
	}
	if revs[0], err = v.ObjectResourceVersion(created); err != nil {
		return revs, err
	}
	w, err := store.Watch(ctx, key, storage.ListOptions{ResourceVersion: created.ResourceVersion, Predicate: storage.Everything})
	if err != nil {
		return revs, fmt.Errorf("storage watch: %w", err)
	}
	defer w.Stop()

	updated := &corev1.ConfigMap{}
	err = store.GuaranteedUpdate(ctx, key, updated, false, nil, func(in runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		c := in.(*corev1.ConfigMap).DeepCopy()
		c.Data["step"] = "2"
		return c, nil, nil
	}, nil)
	if err != nil {
		return revs, fmt.Errorf("storage update: %w", err)
	}
	if revs[1], err = v.ObjectResourceVersion(updated); err != nil {
		return revs, err
	}
	got := &corev1.ConfigMap{}
	if err := store.Get(ctx, key, storage.GetOptions{}, got); err != nil || got.Data["step"] != "2" || got.UID != created.UID {
		return revs, fmt.Errorf("storage get after update: %v %v", got, err)
	}
	for i := range 3 {
		extra := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("page-%d", i), Namespace: "default"}}
		if err := store.Create(ctx, "/configmaps/default/"+extra.Name, extra, nil, 0); err != nil {
			return revs, fmt.Errorf("storage create %s: %w", extra.Name, err)
		}
	}
	names, err := pagedList(ctx, store)
	if err != nil {
		return revs, err
	}
	deleted := &corev1.ConfigMap{}
	if err := store.Delete(ctx, key, deleted, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		return revs, fmt.Errorf("storage delete: %w", err)
	}
	if err := expectEvents(w, created, updated); err != nil {
		return revs, err
	}
	if revs[2], err = store.GetCurrentResourceVersion(ctx); err != nil {
		return revs, err
	}
	fmt.Fprintf(out, "kube-apiserver storage: create %d, update %d, delete %d; paged list %v; watch saw the update and the delete\n", revs[0], revs[1], revs[2], names)
	return revs, nil
}

// pagedList lists the namespace two at a time, as kube-apiserver pages a
// list, and returns the names in order.
func pagedList(ctx context.Context, store storage.Interface) ([]string, error) {
	var names []string
	pred := storage.Everything
	pred.Limit = 2
	for page := 0; page < 10; page++ {
		list := &corev1.ConfigMapList{}
		if err := store.GetList(ctx, "/configmaps/default", storage.ListOptions{Predicate: pred, Recursive: true}, list); err != nil {
			return nil, fmt.Errorf("storage list: %w", err)
		}
		for _, c := range list.Items {
			names = append(names, c.Name)
		}
		if list.Continue == "" {
			if len(names) != 4 {
				return nil, fmt.Errorf("storage list: %v, want demo and page-0..2", names)
			}
			return names, nil
		}
		pred.Continue = list.Continue
	}
	return nil, errors.New("storage list: more than 10 pages")
}

// expectEvents reads the update and the delete of the object from w.
func expectEvents(w watch.Interface, created, updated *corev1.ConfigMap) error {
	want := []watch.EventType{watch.Modified, watch.Deleted}
	for _, t := range want {
		select {
		case ev := <-w.ResultChan():
			c, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type != t || !ok || c.UID != created.UID {
				return fmt.Errorf("storage watch: got %s %v, want %s of %s", ev.Type, ev.Object, t, created.Name)
			}
			if t == watch.Modified && c.ResourceVersion != updated.ResourceVersion {
				return fmt.Errorf("storage watch: update at %s, want %s", c.ResourceVersion, updated.ResourceVersion)
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("storage watch: no %s event", t)
		}
	}
	return nil
}
