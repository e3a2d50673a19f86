package e2e

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantyroot/quantykube/test/framework"
)

// The chart (deploy/chart/quantykube) as helm itself renders it, without a
// cluster: lint, refusals, and its aggregated-API objects held against
// deploy/aggregated-api, their one source of truth. chartcluster_test.go
// has what needs kube-apiserver.

// chartShapes are the profiles the chart must have, one per shape.
var chartShapes = []string{"sqlite", "replicas", "sidecar", "external"}

// chartVariants are the further profiles, SHAPE-FEATURE: a shape with a
// feature of its own turned on, every value of the feature given.
var chartVariants = []string{"sqlite-replicate"}

// TestChartLint: each shape and variant has its ci/*-values.yaml profile,
// and `helm lint --strict` finds nothing to say but information with each.
func TestChartLint(t *testing.T) {
	profiles := chartProfiles(t)
	all := slices.Concat(chartShapes, chartVariants)
	if got := slices.Sorted(maps.Keys(profiles)); !reflect.DeepEqual(got, slices.Sorted(slices.Values(all))) {
		t.Fatalf("ci/ holds the profiles %q, want one per shape and variant: %q", got, all)
	}
	for _, name := range all {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, "lint", "--strict", "--namespace", "quantykube", "-f", profiles[name], chartDir(t))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for line := range strings.Lines(string(out)) {
				if strings.HasPrefix(line, "[") && !strings.HasPrefix(line, "[INFO]") {
					t.Errorf("helm lint: %s", line)
				}
			}
		})
	}
}

// TestChartRefuses: values the chart cannot render correctly fail the
// release with a message that says what to give: values.schema.json's
// (unknown names, types, enumerations, ranges) or the templates' own
// (quantykube.validate: what depends on the mode and on other values).
func TestChartRefuses(t *testing.T) {
	profiles := chartProfiles(t)
	for _, tc := range []struct {
		name    string
		profile string
		args    []string
		want    string
	}{
		{"unknown mode", "sqlite", []string{"--set", "mode=etcd"}, "at '/mode': value must be one of 'sqlite', 'replicas', 'sidecar', 'external'"},
		{"misspelt value", "replicas", []string{"--set", "replica.count=3"}, "additional properties 'replica' not allowed"},
		{"a port out of range", "sqlite", []string{"--set", "serve.port=70000"}, "at '/serve/port': maximum"},
		{"no database secret", "replicas", []string{"--set", "database.existingSecret="}, "mode=replicas needs database.existingSecret"},
		{"no serving certificate", "sqlite", []string{"--set", "apiService.tls.existingSecret="}, "apiService: no serving certificate"},
		{"no caBundle", "replicas", []string{"--set", "apiService.caBundle="}, "apiService.tls.existingSecret needs apiService.caBundle"},
		{"no front-proxy CA", "sqlite", []string{"--set", "apiService.clientCA.pem="}, "kube-apiserver's front-proxy CA was not found"},
		{"sidecar registering here", "sidecar", []string{"--set", "apiService.register=true"}, "the APIService belongs in the tenant cluster"},
		{"sidecar without the tenant's kubeconfig", "sidecar", []string{"--set", "apiService.kubeconfigSecret="}, "needs apiService.kubeconfigSecret"},
		{"sidecar without the tenant's certificates", "sidecar", []string{"--set", "sidecar.kubeApiserver.pkiSecret="}, "needs sidecar.kubeApiserver.pkiSecret"},
		{"external without an address", "external", []string{"--set", "external.address="}, "mode=external needs external.address"},
		{"external on loopback", "external", []string{"--set", "external.address=127.0.0.1"}, "is a loopback address"},
		{"external without caBundle", "external", []string{"--set", "apiService.caBundle="}, "mode=external needs apiService.caBundle"},
		{"unknown anti-affinity", "replicas", []string{"--set", "replicas.antiAffinity=always"}, "at '/replicas/antiAffinity': value must be one of 'soft', 'hard'"},
		{"unknown restore check", "sqlite", []string{"--set", "apiService.restoreCheck=maybe"}, "at '/apiService/restoreCheck': value must be one of 'dry-run', 'none'"},
		{"replication on replicas", "replicas", []string{"--set", "replicate.url=s3://bucket/prefix"}, "replication to object storage serves SQLite only (ADR-052), not mode=replicas"},
		{"replication on sidecar", "sidecar", []string{"--set", "replicate.url=s3://bucket/prefix"}, "serves SQLite only (ADR-052), not mode=sidecar"},
		{"replication of no store", "external", []string{"--set", "replicate.url=s3://bucket/prefix"}, "serves SQLite only (ADR-052), not mode=external"},
		{"replication to an unknown scheme", "sqlite", []string{"--set", "replicate.url=https://s3.example.com/bucket"}, "at '/replicate/url'"},
		{"replication CA for file://", "sqlite-replicate", []string{"--set", "replicate.url=file:///var/lib/quantykube/replica"}, "replicate.caSecret: a CA verifies an s3:// endpoint only"},
		{"replication CA given twice", "sqlite-replicate", []string{"--set-string", "replicate.url=s3://bucket/prefix?endpoint=https://minio:9000&ca-file=/etc/ca.pem"}, "give it once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "quantykube", chartDir(t), "--namespace", "quantykube", "-f", profiles[tc.profile]}, tc.args...)
			out, err := runHelm(t, args...)
			if err == nil {
				t.Fatalf("helm template %s rendered:\n%s", strings.Join(tc.args, " "), out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %s: %v\nwant a message with %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}

// TestChartMatchesDeployFiles: deploy/aggregated-api is the one source of
// truth of the aggregated API's objects. The chart's external profile
// renders exactly the objects `quantykube apiservice` fills those files
// into (the same Service, EndpointSlice, APIService, roles and bindings;
// the chart adds labels only), and every profile that registers the API
// in-cluster has the same ClusterRoles, rule for rule, bound to its
// ServiceAccount as `quantykube apiservice --store-service-account` binds.
func TestChartMatchesDeployFiles(t *testing.T) {
	profiles := chartProfiles(t)
	printed := func(t *testing.T, args ...string) []*unstructured.Unstructured {
		t.Helper()
		dir := t.TempDir()
		out, err := run(t, framework.Binary(t), append([]string{"apiservice", "--dir", dir, "--address", "192.0.2.10", "--port", "8443"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := parseObjects(out)
		if err != nil {
			t.Fatalf("quantykube apiservice printed: %v", err)
		}
		return objs
	}
	t.Run("external", func(t *testing.T) {
		want := printed(t, "--service", "quantykube", "--namespace", "kube-system", "--store-user", "quantykube")
		ca, _, _ := unstructured.NestedString(find(t, want, "APIService", "", "v1alpha1.quanty.quantyroot.io").Object, "spec", "caBundle")
		got, err := parseObjects(renderChart(t, "quantykube", "kube-system", "-f", profiles["external"],
			"--set", "external.address=192.0.2.10", "--set", "external.port=8443", "--set", "apiService.caBundle="+ca,
			"--set", "rbac.storeSubject.kind=User", "--set", "rbac.storeSubject.name=quantykube"))
		if err != nil {
			t.Fatal(err)
		}
		sameObjects(t, want, got, nil)
	})
	for _, name := range []string{"sqlite", "replicas"} {
		t.Run(name, func(t *testing.T) {
			want := printed(t, "--service", "quantykube", "--namespace", "quantykube", "--store-service-account", "quantykube")
			got, err := parseObjects(renderChart(t, "quantykube", "quantykube", "-f", profiles[name]))
			if err != nil {
				t.Fatal(err)
			}
			rbac := func(o *unstructured.Unstructured) bool {
				return o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding"
			}
			sameObjects(t, slices.DeleteFunc(want, func(o *unstructured.Unstructured) bool { return !rbac(o) }), got, rbac)
		})
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s/%s among %s", kind, ns, name, kinds(objs))
	return nil
}

// sameObjects holds got (the chart's, those of them in scope when scope
// is given) against want (deploy/aggregated-api's, filled in): the same
// objects, each with want's labels among its own and otherwise equal;
// ClusterRoles are compared by the permissions their rules grant.
func sameObjects(t *testing.T, want, got []*unstructured.Unstructured, scope func(*unstructured.Unstructured) bool) {
	t.Helper()
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range got {
		if scope == nil || scope(o) {
			byKey[objectKey(o)] = o
		}
	}
	for _, w := range want {
		k := objectKey(w)
		g := byKey[k]
		delete(byKey, k)
		if g == nil {
			t.Errorf("the chart has no %s (deploy/aggregated-api has)", k)
			continue
		}
		gl := g.GetLabels()
		for l, v := range w.GetLabels() {
			if gl[l] != v {
				t.Errorf("%s: label %s=%q, deploy/aggregated-api has %q", k, l, gl[l], v)
			}
		}
		if w.GetKind() == "ClusterRole" {
			if gp, wp := grants(t, g), grants(t, w); !reflect.DeepEqual(gp, wp) {
				t.Errorf("%s grants\n%q\ndeploy/aggregated-api's grants\n%q", k, gp, wp)
			}
			continue
		}
		gc, wc := g.DeepCopy(), w.DeepCopy()
		for _, o := range []*unstructured.Unstructured{gc, wc} {
			o.SetLabels(nil)
			o.SetAnnotations(nil)
		}
		if !reflect.DeepEqual(gc.Object, wc.Object) {
			t.Errorf("%s differs from deploy/aggregated-api's:\nchart: %v\nfile:  %v", k, gc.Object, wc.Object)
		}
	}
	for k := range byKey {
		t.Errorf("the chart has %s, which deploy/aggregated-api has not", k)
	}
}

// grants are the permissions of a ClusterRole's rules, one string each
// (group, resource, verb, or a non-resource URL and verb), sorted: two
// roles grant the same when these are equal, however their rules are cut.
func grants(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	var role rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
		t.Fatalf("%s: %v", objectKey(o), err)
	}
	if role.AggregationRule != nil {
		t.Errorf("%s has an aggregation rule: its rules are not its own", objectKey(o))
	}
	set := map[string]bool{}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				set[fmt.Sprintf("url=%s verb=%s", u, v)] = true
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					names := r.ResourceNames
					if len(names) == 0 {
						names = []string{"*"}
					}
					for _, n := range names {
						set[fmt.Sprintf("group=%s resource=%s name=%s verb=%s", g, res, n, v)] = true
					}
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// TestChartAggregatesRoles: the history roles join the built-in ones
// (reader into view, restorer into edit and admin), and not when
// rbac.aggregateToDefaultRoles is off.
func TestChartAggregatesRoles(t *testing.T) {
	profiles := chartProfiles(t)
	want := map[string][]string{
		"quanty-history-reader":   {"view"},
		"quanty-history-restorer": {"admin", "edit"},
	}
	for _, on := range []bool{true, false} {
		objs, err := parseObjects(renderChart(t, "quantykube", "quantykube", "-f", profiles["sqlite"], "--set", fmt.Sprintf("rbac.aggregateToDefaultRoles=%t", on)))
		if err != nil {
			t.Fatal(err)
		}
		for role, into := range want {
			var got []string
			for l, v := range find(t, objs, "ClusterRole", "", role).GetLabels() {
				if r, ok := strings.CutPrefix(l, "rbac.authorization.k8s.io/aggregate-to-"); ok && v == "true" {
					got = append(got, r)
				}
			}
			slices.Sort(got)
			if !on {
				into = nil
			}
			if !slices.Equal(got, into) {
				t.Errorf("aggregateToDefaultRoles=%t: %s aggregates into %q, want %q", on, role, got, into)
			}
		}
	}
}

// TestChartIncluded: a chart that runs kube-apiserver itself puts the
// store in its pod through the named templates (quantykube.container,
// quantykube.volumes, ...; testdata/chart-include): its pod gets the
// store as a native sidecar on the socket its kube-apiserver mounts, and
// the subchart, with sidecar.controlPlane=false, renders no control plane
// of its own.
func TestChartIncluded(t *testing.T) {
	objs, err := parseObjects(renderIncluding(t, "tenant-b", "tenants"))
	if err != nil {
		t.Fatal(err)
	}
	var deployments []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			deployments = append(deployments, o)
		}
	}
	if len(deployments) != 1 || deployments[0].GetName() != "tenant-b-control-plane" {
		t.Fatalf("want the including chart's Deployment alone, got %s", kinds(objs))
	}
	pod := podOf(t, deployments[0])
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("want the store as the one init container beside kube-apiserver: %+v", pod.Spec)
	}
	qk, kas := pod.Spec.InitContainers[0], pod.Spec.Containers[0]
	if qk.RestartPolicy == nil || *qk.RestartPolicy != "Always" {
		t.Errorf("the store is not a native sidecar (restartPolicy Always): %v", qk.RestartPolicy)
	}
	if !slices.Contains(qk.Args, "--listen-address=unix:///run/quantykube/etcd.sock") || !slices.Contains(kas.Command, "--etcd-servers=unix:///run/quantykube/etcd.sock") {
		t.Errorf("the store serves %q, kube-apiserver dials %q: want the same socket", qk.Args, kas.Command)
	}
	for _, c := range []struct {
		name string
		vms  []string
	}{{qk.Name, mountNames(qk.VolumeMounts)}, {kas.Name, mountNames(kas.VolumeMounts)}} {
		if !slices.Contains(c.vms, "quantykube-socket") {
			t.Errorf("%s does not mount the socket's volume: %q", c.name, c.vms)
		}
	}
}

func mountNames(vms []corev1.VolumeMount) []string {
	var out []string
	for _, m := range vms {
		out = append(out, m.Name)
	}
	return out
}

// TestChartReplicate: replication to object storage (replicate.*,
// mode=sqlite only; TestChartRefuses has the other modes). The
// sqlite-replicate profile's store runs `serve --replicate URL`, with the
// encryption key and the endpoint's CA as files of their Secrets, mounted
// read-only where its flags name them, and the credentials Secret as its
// environment; its root file system stays read-only, and the directory of
// the store, where a base is copied before it is uploaded, is the data
// volume, writable. The URL alone leaves credentials to the AWS SDK's
// chain (no environment, no files); the sqlite profile has none of it.
func TestChartReplicate(t *testing.T) {
	profiles := chartProfiles(t)
	const url = "s3://quantykube/clusters/ci?endpoint=https://minio.minio.svc:9000&region=us-east-1"
	store := func(t *testing.T, args ...string) (*corev1.Pod, *corev1.Container) {
		t.Helper()
		objs, err := parseObjects(renderChart(t, "quantykube", "quantykube", args...))
		if err != nil {
			t.Fatal(err)
		}
		pod := podOf(t, find(t, objs, "StatefulSet", "quantykube", "quantykube"))
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == "quantykube" {
				return pod, &pod.Spec.Containers[i]
			}
		}
		t.Fatalf("no quantykube container in %+v", pod.Spec)
		return nil, nil
	}
	// replication is what the container has of replication: its
	// --replicate* arguments, its environment from Secrets, and the
	// volumes it mounts but the data volume and /tmp.
	type replication struct {
		args    []string
		envFrom []corev1.EnvFromSource
		mounts  []string
	}
	of := func(c *corev1.Container) replication {
		var r replication
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--replicate") {
				r.args = append(r.args, a)
			}
		}
		r.envFrom = c.EnvFrom
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.Name, "replicate") {
				r.mounts = append(r.mounts, m.Name)
			}
		}
		return r
	}
	arg := func(t *testing.T, c *corev1.Container, flag string) string {
		t.Helper()
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		t.Fatalf("no %s among %q", flag, c.Args)
		return ""
	}
	// mountAt is the container's mount at dir, and its volume.
	mountAt := func(t *testing.T, pod *corev1.Pod, c *corev1.Container, dir string) (corev1.VolumeMount, corev1.Volume) {
		t.Helper()
		for _, m := range c.VolumeMounts {
			if m.MountPath != dir {
				continue
			}
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name {
					return m, v
				}
			}
			t.Fatalf("the mount at %s names no volume of the pod: %q", dir, m.Name)
		}
		t.Fatalf("nothing is mounted at %s: %+v", dir, c.VolumeMounts)
		return corev1.VolumeMount{}, corev1.Volume{}
	}

	t.Run("on", func(t *testing.T) {
		pod, c := store(t, "-f", profiles["sqlite-replicate"])
		keyFile := "/etc/quantykube/replicate-key/replicate.key"
		caFile := "/etc/quantykube/replicate-ca/ca.crt"
		want := replication{
			args: []string{"--replicate=" + url, "--replicate-encryption-key-file=" + keyFile, "--replicate-ca-file=" + caFile},
			envFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "quantykube-replicate-s3"}}}},
			mounts: []string{"replicate-key", "replicate-ca"},
		}
		if got := of(c); !reflect.DeepEqual(got, want) {
			t.Errorf("replication: %+v\nwant %+v", got, want)
		}
		if len(c.Env) != 0 {
			t.Errorf("env %+v: mode=sqlite sets none but the credentials Secret's", c.Env)
		}
		for _, f := range []struct{ flag, secret, key string }{
			{"--replicate-encryption-key-file", "quantykube-replicate-key", "replicate.key"},
			{"--replicate-ca-file", "quantykube-replicate-ca", "ca.crt"},
		} {
			file := arg(t, c, f.flag)
			m, v := mountAt(t, pod, c, filepath.Dir(file))
			if !m.ReadOnly {
				t.Errorf("%s: %s is mounted writable", f.flag, m.MountPath)
			}
			wantItems := []corev1.KeyToPath{{Key: f.key, Path: filepath.Base(file)}}
			if v.Secret == nil || v.Secret.SecretName != f.secret || !reflect.DeepEqual(v.Secret.Items, wantItems) {
				t.Errorf("%s=%s: volume %s is the Secret %+v, want the Secret %s's key %s at %s", f.flag, file, v.Name, v.Secret, f.secret, f.key, filepath.Base(file))
			}
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("the root file system is not read-only: %+v", sc)
		}
		db, ok := strings.CutPrefix(arg(t, c, "--endpoint"), "sqlite://")
		if !ok {
			t.Fatalf("--endpoint=%s: want sqlite://", db)
		}
		m, v := mountAt(t, pod, c, filepath.Dir(db))
		if m.ReadOnly || v.PersistentVolumeClaim == nil || m.SubPath != "" {
			t.Errorf("the store's directory %s, where a base is copied: mount %+v of claim %+v, want the data volume's claim, writable", filepath.Dir(db), m, v.PersistentVolumeClaim)
		}
	})

	t.Run("url alone", func(t *testing.T) {
		_, c := store(t, "-f", profiles["sqlite"], "--set-string", "replicate.url="+url)
		if got, want := of(c), (replication{args: []string{"--replicate=" + url}}); !reflect.DeepEqual(got, want) {
			t.Errorf("replication: %+v\nwant %+v (credentials from the AWS SDK's chain, no key, the system's CAs)", got, want)
		}
	})

	t.Run("off", func(t *testing.T) {
		pod, c := store(t, "-f", profiles["sqlite"])
		if got := of(c); !reflect.DeepEqual(got, replication{}) {
			t.Errorf("the sqlite profile replicates: %+v", got)
		}
		for _, v := range pod.Spec.Volumes {
			if strings.HasPrefix(v.Name, "replicate") {
				t.Errorf("the sqlite profile has the volume %s", v.Name)
			}
		}
	})
}
