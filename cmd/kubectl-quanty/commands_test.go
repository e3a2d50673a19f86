package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var created = metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))

func configMap(ns, name, uid string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), CreationTimestamp: created},
		Data:       data,
	}
}

// edits writes a ConfigMap and edits it twice, a few milliseconds apart so
// that each revision has its own commit time.
func edits(t *testing.T, c *cluster) (key string, revs [3]int64, values [3][]byte) {
	key = "/registry/configmaps/shop/web"
	for i, color := range []string{"blue", "green", "red"} {
		values[i] = encode(t, configMap("shop", "web", "uid-web", map[string]string{"color": color, "size": "L"}))
		revs[i] = c.put(key, values[i])
		time.Sleep(5 * time.Millisecond)
	}
	return key, revs, values
}

// A ConfigMap edited twice: its log lists both edits with the changed
// field, get shows an old revision as YAML, diff the last change, and
// restore brings the first value back after asking.
func TestConfigMapHistory(t *testing.T) {
	c := newCluster(t)
	key, revs, values := edits(t, c)
	// A write elsewhere: the store's revision is past the ConfigMap's.
	c.put("/registry/configmaps/shop/other", encode(t, configMap("shop", "other", "uid-other", nil)))

	out := c.ok("log", "cm/web")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "REVISION") {
		t.Fatalf("log: want a header and 3 rows, got:\n%s", out)
	}
	for i, want := range []struct {
		rev     int64
		action  string
		changes string
	}{{revs[2], "updated", "data.color"}, {revs[1], "updated", "data.color"}, {revs[0], "created", ""}} {
		f := strings.Fields(lines[i+1])
		if f[0] != fmt.Sprint(want.rev) || !strings.Contains(lines[i+1], want.action) || !strings.HasSuffix(lines[i+1], want.action+"   "+want.changes) && want.changes != "" {
			t.Errorf("log row %d = %q, want revision %d, %s, %q", i, lines[i+1], want.rev, want.action, want.changes)
		}
	}

	var doc struct {
		Key       string   `json:"key"`
		Revisions []logRow `json:"revisions"`
	}
	if err := json.Unmarshal([]byte(c.ok("log", "configmap/web", "--reverse", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Key != key || len(doc.Revisions) != 3 || doc.Revisions[0].Revision != revs[0] || strings.Join(doc.Revisions[2].Changes, ",") != "data.color" {
		t.Fatalf("log -o json = %+v", doc)
	}
	if got := c.ok("log", "configmaps/web", "--limit", "1", "-o", "json"); !strings.Contains(got, fmt.Sprintf(`"revision": %d`, revs[2])) || strings.Contains(got, fmt.Sprintf(`"revision": %d`, revs[1])) {
		t.Errorf("log --limit 1 printed:\n%s", got)
	}

	// Bare durations, as kubectl logs --since takes them, days included.
	if got := c.ok("log", "cm/web", "--since", "1d", "-o", "json"); strings.Count(got, `"revision": `) != 3 {
		t.Errorf("log --since 1d: want the 3 changes of the last day, got:\n%s", got)
	}
	if got := c.ok("log", "cm/web", "--until", "1d12h", "-o", "json"); strings.Contains(got, `"revision": `) {
		t.Errorf("log --until 1d12h: want no change from before a day and a half ago, got:\n%s", got)
	}

	yaml := c.ok("get", "configmap/web", "--rev", fmt.Sprint(revs[0]))
	for _, want := range []string{"apiVersion: v1\n", "kind: ConfigMap\n", "  color: blue\n", fmt.Sprintf("  resourceVersion: \"%d\"\n", revs[0]), "  uid: uid-web\n"} {
		if !strings.Contains(yaml, want) {
			t.Errorf("get --rev %d: no %q in\n%s", revs[0], want, yaml)
		}
	}
	// --at the commit time of the second revision, as log prints it.
	if got := c.ok("get", "ConfigMap/web", "--at", doc.Revisions[1].Time, "-o", "json"); !strings.Contains(got, `"color": "green"`) {
		t.Errorf("get --at %s printed:\n%s", doc.Revisions[1].Time, got)
	}
	if got := c.ok("get", "cm", "web", "--rev", fmt.Sprint(revs[1]), "-o", "name"); got != "configmap/web\n" {
		t.Errorf("get -o name = %q", got)
	}

	code, out, _ := c.run("", "diff", "cm/web")
	if code != 1 || !strings.Contains(out, "-  color: green\n+  color: red\n") || !strings.Contains(out, fmt.Sprintf("(revision %d (now))", revs[2])) {
		t.Fatalf("diff: exit %d, want 1 and the last change:\n%s", code, out)
	}
	code, out, _ = c.run("", "diff", "cm/web", "--rev", fmt.Sprint(revs[1]), "--rev", fmt.Sprint(revs[0]))
	if code != 1 || !strings.Contains(out, "-  color: blue\n+  color: green\n") {
		t.Fatalf("diff of two revisions (given newest first): exit %d:\n%s", code, out)
	}
	if code, out, _ := c.run("", "diff", "cm/web", "--rev", fmt.Sprint(revs[2])); code != 0 || out != "" {
		t.Fatalf("diff of now against now: exit %d:\n%s", code, out)
	}

	// Refused at the prompt: nothing written.
	code, _, errOut := c.run("n\n", "restore", "cm/web", "--rev", fmt.Sprint(revs[0]))
	if v, _ := c.value(key); code != 1 || !bytes.Equal(v, values[2]) || !strings.Contains(errOut, "+  color: blue") ||
		!strings.Contains(errOut, fmt.Sprintf("--- configmap/web (revision %d (now))\n", revs[2])) {
		t.Fatalf("restore answered no: exit %d, value changed: %v\n%s", code, !bytes.Equal(v, values[2]), errOut)
	}
	code, out, errOut = c.run("y\n", "restore", "cm/web", "--rev", fmt.Sprint(revs[0]))
	v, rev := c.value(key)
	if code != 0 || !bytes.Equal(v, values[0]) || !strings.Contains(out, fmt.Sprintf("restored to revision %d (new revision %d)", revs[0], rev)) {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := c.ok("log", "cm/web", "--limit", "1"); !strings.Contains(got, fmt.Sprintf("restored (revision %d)   data.color", revs[0])) {
		t.Errorf("log after restore:\n%s", got)
	}
	if got := c.ok("restore", "cm/web", "--rev", fmt.Sprint(revs[0]), "--yes"); !strings.Contains(got, "nothing to restore") {
		t.Errorf("restoring the state it has: %s", got)
	}
}

// Every kubectl the plugin runs gets each of kubectl's global flags that
// was given, as given, and no other (not --cache-dir's default, which
// comes from $HOME); --as is the identity the aggregated API checks
// access for.
func TestKubectlFlagsPassedOn(t *testing.T) {
	c := newCluster(t)
	edits(t, c)
	c.grants.allow["bob"] = []string{"get configmaps web in namespace team"}
	c.put("/registry/configmaps/team/web", encode(t, configMap("team", "web", "u2", nil)))
	given := []struct{ flag, passed string }{
		{"--kubeconfig=/etc/kc", ""}, {"--context=ctx1", ""}, {"--cluster=cl1", ""}, {"--user=u1", ""},
		{"-n=team", "--namespace=team"}, {"--as=bob", ""}, {"--as-group=g1", ""}, {"--as-group=g2", ""},
		{"--as-uid=uid-bob", ""}, {"--as-user-extra=scopes=view", ""}, {"--request-timeout=7s", ""},
		{"-s=https://10.0.0.1:6443", "--server=https://10.0.0.1:6443"}, {"--token=s3cr3t-token", ""},
		{"--certificate-authority=/etc/ca.crt", ""}, {"--client-certificate=/etc/me.crt", ""}, {"--client-key=/etc/me.key", ""},
		{"--insecure-skip-tls-verify", "--insecure-skip-tls-verify=true"}, {"--tls-server-name=api.example.com", ""},
		{"--username=admin", ""}, {"--password=hunter2", ""}, {"--cache-dir=/tmp/kc-cache", ""},
		{"--disable-compression", "--disable-compression=true"}, {"--proxy-url=http://127.0.0.1:3128", ""},
	}
	args := []string{"log", "cm/web"}
	var want []string
	for _, g := range given {
		args = append(args, g.flag)
		want = append(want, cmp.Or(g.passed, g.flag))
	}
	c.ok(args...)
	lines := c.kubectlArgs()
	if len(lines) < 2 {
		t.Fatalf("kubectl ran %d times", len(lines))
	}
	for _, l := range lines {
		if got := passedOn(l); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("kubectl %s:\npassed on %q\nwant      %q", l, got, slices.Sorted(slices.Values(want)))
		}
	}
	if asked := strings.Join(c.grants.asked, "\n"); !strings.Contains(asked, "bob: get configmaps web in namespace team") {
		t.Errorf("the aggregated API was asked:\n%s", asked)
	}

	// Without flags, kubectl gets none: not the defaults (--cache-dir's
	// is under $HOME, --request-timeout's is 0), so that kubectl applies
	// the kubeconfig's and its own.
	before := len(c.kubectlArgs())
	c.ok("log", "cm/web")
	for _, l := range c.kubectlArgs()[before:] {
		if got := passedOn(l); len(got) != 0 {
			t.Errorf("kubectl %s: passed on %q, none given", l, got)
		}
	}
	// A token never shows in what the plugin prints, a failure included.
	if _, out, errOut := c.run("", "log", "cm/nope", "--token=s3cr3t-token", "--as=bob"); strings.Contains(out+errOut, "s3cr3t") {
		t.Errorf("the token was printed:\n%s%s", out, errOut)
	}
}

// passedOn are the flags of a kubectl command line (as the fake kubectl
// records it) that are not the plugin's own request's, sorted.
func passedOn(line string) []string {
	var flags []string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "--") && !slices.Contains([]string{"--raw", "--minify", "--output"}, f) {
			flags = append(flags, f)
		}
	}
	slices.Sort(flags)
	return flags
}

// Resolution goes through discovery as kubectl's does: short names,
// kinds, singulars, group-qualified names; the core group first.
func TestResolveTypes(t *testing.T) {
	c := newCluster(t)
	cases := map[string]string{
		"cm": "configmaps", "configmap": "configmaps", "ConfigMap": "configmaps", "CONFIGMAPS": "configmaps",
		"deploy": "deployments.apps", "Deployment": "deployments.apps", "deployments.apps": "deployments.apps",
		"deployments.v1.apps": "deployments.apps", "rs": "replicasets.apps",
		"ev": "events", "events": "events", "events.events.k8s.io": "events.events.k8s.io",
		"wd": "widgets.example.com", "Widget": "widgets.example.com", "widgets.example.com": "widgets.example.com",
		"widget.v1beta1.example.com": "widgets.example.com", "ns": "namespaces", "endpointslice": "endpointslices.discovery.k8s.io",
	}
	for typ, want := range cases {
		d := newDiscovery(&kubectl{path: "kubectl"})
		r, err := d.resolve(t.Context(), typ)
		if err != nil || r.Resource.String() != want {
			t.Errorf("resolve(%q) = %s, %v; want %s", typ, r.Resource, err, want)
		}
	}
	for _, typ := range []string{"nope", "pods/status", "bindings", "logs", "deployments.nope.io", "widgets.v2.example.com", ""} {
		d := newDiscovery(&kubectl{path: "kubectl"})
		if r, err := d.resolve(t.Context(), typ); err == nil {
			t.Errorf("resolve(%q) = %s, want an error", typ, r.Resource)
		}
	}
	// A core name needs the core group's document only.
	before := len(c.kubectlArgs())
	if _, err := newDiscovery(&kubectl{path: "kubectl"}).resolve(t.Context(), "svc"); err != nil {
		t.Fatal(err)
	}
	if ran := c.kubectlArgs()[before:]; len(ran) != 1 || !strings.Contains(ran[0], "/api/v1") {
		t.Errorf("resolving svc ran %q", ran)
	}

	// The namespace: -n, else the context's; keys as kube-apiserver's.
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"svc/web"}, "/registry/services/specs/shop/web"},
		{[]string{"deploy/web", "-n", "prod"}, "/registry/deployments/prod/web"},
		{[]string{"ns/shop", "-n", "prod"}, "/registry/namespaces/shop"},
		{[]string{"wd/blue"}, "/registry/example.com/widgets/shop/blue"},
		{[]string{"events.events.k8s.io/e1"}, "/registry/events/shop/e1"},
		{[]string{"--key", "/registry/configmaps/x/y"}, "/registry/configmaps/x/y"},
	} {
		out := c.ok(append([]string{"log", "-o", "json"}, tc.args...)...)
		if !strings.Contains(out, `"key": "`+tc.key+`"`) {
			t.Errorf("log %s: want key %s in\n%s", tc.args, tc.key, out)
		}
	}
}

// Errors name what is missing: the permission on the object, the
// APIService, the resource type, the object at a revision.
func TestErrors(t *testing.T) {
	c := newCluster(t)
	_, revs, _ := edits(t, c)
	c.del("/registry/configmaps/shop/web")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"log", "cm/web", "--as", "bob"}, []string{"history is never wider than access to the object itself", "you may not get configmaps in the namespace shop"}},
		{[]string{"get", "cm/web", "--rev", "999999"}, []string{"outside the history QuantyKube retains", "revision 999999 is a future revision"}},
		{[]string{"get", "cm/web", "--rev", fmt.Sprint(revs[2] + 1)}, []string{fmt.Sprintf("configmap/web in namespace shop did not exist at revision %d", revs[2]+1)}},
		{[]string{"get", "cm/web"}, []string{"want --rev N or --at TIME"}},
		{[]string{"get", "cm/web", "--rev", "1", "--at", "-1m"}, []string{"--rev and --at exclude each other"}},
		{[]string{"log", "nope/web"}, []string{`the server doesn't have a resource type "nope"`}},
		{[]string{"log", "cm/web", "-o", "wide"}, []string{`--output "wide"`}},
		{[]string{"log"}, []string{"want one object: TYPE/NAME"}},
		{[]string{"log", "cm/web", "--limit", "-1"}, []string{"--limit -1: want N >= 0 (0: every change)"}},
		{[]string{"log", "cm/web", "--since", "1x"}, []string{`--since: time "1x"`, "or a duration like 1h, 2d"}},
		{[]string{"deleted", "--since", "1y"}, []string{`--since: time "1y"`, "or a duration like 1h, 2d"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
		{[]string{"undelete", "namespace", "nothere"}, []string{"no history of namespace nothere"}},
	} {
		code, _, errOut := c.run("", tc.args...)
		for _, w := range tc.want {
			if code == 0 || !strings.Contains(errOut, w) {
				t.Errorf("%s: exit %d, want %q in:\n%s", tc.args, code, w, errOut)
			}
		}
	}
	t.Setenv(envNoAPIService, "1")
	if code, _, errOut := c.run("", "log", "cm/web"); code != 1 || !strings.Contains(errOut, "the APIService v1alpha1.quanty.quantyroot.io is not registered") {
		t.Errorf("without the APIService: exit %d:\n%s", code, errOut)
	}
}

// kube-apiserver's own refusals, in its words, and the aggregator's.
func TestExplain(t *testing.T) {
	for stderr, want := range map[string]string{
		`Error from server (Forbidden): logs.quanty.quantyroot.io is forbidden: User "bob" cannot list resource "logs" in API group "quanty.quantyroot.io" at the cluster scope`:                                                                                                       "RBAC does not let you list logs.quanty.quantyroot.io: reading history needs a role with list on logs, objects and changes",
		`Error from server (Forbidden): restores.quanty.quantyroot.io is forbidden: User "bob" cannot create resource "restores" in API group "quanty.quantyroot.io" at the cluster scope`:                                                                                             "restoring one with create on restores",
		`Error from server (Forbidden): secrets "db" is forbidden: User "bob" cannot get resource "secrets" in API group "" in the namespace "shop": (history is never wider than access to the object)`:                                                                               "you may not get secrets in the namespace shop",
		`Error from server (Forbidden): clusterrolebindings.rbac.authorization.k8s.io "admin" is forbidden: User "bob" cannot get resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope`:                                                        "you may not get clusterrolebindings.rbac.authorization.k8s.io cluster-wide",
		`Error from server (Forbidden): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"web\" is forbidden: User \"bob\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"shop\"","reason":"Forbidden","code":403}`: "you may not get configmaps in the namespace shop",
		`Error from server (ServiceUnavailable): the server is currently unable to handle the request`:                                                                                                                                                                                 "the APIService v1alpha1.quanty.quantyroot.io is not available",
		`Error from server (NotFound): the server could not find the requested resource`:                                                                                                                                                                                               "is not registered",
		`Error from server (Expired): quantykube: revision 3 is older than the oldest retained revision 5 (2026-05-01T12:00:00.000Z)`:                                                                                                                                                  "outside the history QuantyKube retains (its --retain window), or in the future: revision 3 is older than the oldest retained revision 5",
		"The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set":                                                                                                                                                                             "The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable",
		`The connection to the server localhost:8080 was refused - did you specify the right host or port?`:                                                                                                                                                                            "The connection to the server localhost:8080 was refused",
	} {
		err := explain(newKubectlError([]string{"get", "--raw", "/x"}, stderr, fmt.Errorf("exit status 1")))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("explain(%q) = %v, want %q", stderr, err, want)
		}
	}
}

func TestHelpShowsExamples(t *testing.T) {
	var out bytes.Buffer
	p := &plugin{out: &out, errOut: &out}
	if code := p.run(t.Context(), []string{"--help"}); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(out.String(), "\n  "+c.name+" ") || !strings.Contains(out.String(), "kubectl quanty "+c.name) {
			t.Errorf("--help has no line or example for %s:\n%s", c.name, out.String())
		}
	}
	for _, c := range commands {
		out.Reset()
		if code := p.run(t.Context(), []string{c.name, "--help"}); code != 0 {
			t.Fatalf("%s --help: exit %d", c.name, code)
		}
		h := out.String()
		if n := len(regexp.MustCompile(`(?m)^  kubectl quanty `+c.name+` `).FindAllString(h, -1)); n < 2 {
			t.Errorf("%s --help shows %d examples, want 2 or more:\n%s", c.name, n, h)
		}
		for _, flag := range []string{"--kubeconfig", "--context", "--as-group", "--request-timeout", "-n, --namespace"} {
			if !strings.Contains(h, flag) {
				t.Errorf("%s --help has no %s", c.name, flag)
			}
		}
	}
}

// Restoring the last state of an object that was being deleted warns and
// takes the state from before its deletion began (owners: owners_test.go).
func TestRestoreSafety(t *testing.T) {
	c := newCluster(t)
	key := "/registry/configmaps/shop/kept"
	cm := configMap("shop", "kept", "uid-kept", map[string]string{"a": "1"})
	cm.Finalizers = []string{"example.com/keep"}
	before := encode(t, cm)
	rBefore := c.put(key, before)
	cm.DeletionTimestamp = &created
	rDeleting := c.put(key, encode(t, cm))
	c.del(key)

	code, out, errOut := c.run("", "restore", "cm/kept", "--rev", fmt.Sprint(rDeleting), "--dry-run")
	if code != 0 || !strings.Contains(errOut, fmt.Sprintf("at revision %d, configmap/kept in namespace shop was being deleted (deletionTimestamp 2026-05-01T12:00:00Z, finalizers example.com/keep)", rDeleting)) ||
		!strings.Contains(out, fmt.Sprintf("would create it as it was at revision %d (dry run)", rBefore)) {
		t.Fatalf("restore --dry-run of a state being deleted: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.value(key); v != nil {
		t.Fatal("the dry run wrote")
	}
	// Declining the offer restores what was asked for.
	if code, out, errOut := c.run("n\ny\n", "restore", "cm/kept", "--rev", fmt.Sprint(rDeleting)); code != 0 || !strings.Contains(out, fmt.Sprintf("restored to revision %d", rDeleting)) {
		t.Fatalf("restore, offer declined: exit %d\n%s\n%s", code, out, errOut)
	}
	c.del(key)
	c.ok("restore", "cm/kept", "--rev", fmt.Sprint(rDeleting), "--yes")
	if v, _ := c.value(key); !bytes.Equal(v, before) {
		t.Fatal("restore --yes did not take the state from before the deletion began")
	}
}

// A restore writes only over the state its diff showed: a change made
// while the question was on the screen is kept, and the restore says to
// run it again.
func TestRestoreChangedSinceTheDiff(t *testing.T) {
	c := newCluster(t)
	key, revs, values := edits(t, c)
	meanwhile := encode(t, configMap("shop", "web", "uid-web", map[string]string{"color": "black", "size": "XL"}))
	put := &answerAfter{change: func() { c.put(key, meanwhile) }, answer: strings.NewReader("y\n")}
	code, out, errOut := c.runIn(put, "restore", "cm/web", "--rev", fmt.Sprint(revs[0]))
	if code == 0 || !strings.Contains(errOut, "-  color: red\n+  color: blue\n") ||
		!strings.Contains(errOut, "not restored: configmap/web in namespace shop changed since the diff; run it again") {
		t.Fatalf("restore over a change made during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.value(key); !bytes.Equal(v, meanwhile) {
		t.Fatal("the restore overwrote the change made during the question")
	}
	// Run again, it shows that change and restores over it.
	if code, out, errOut := c.run("y\n", "restore", "cm/web", "--rev", fmt.Sprint(revs[0])); code != 0 || !strings.Contains(errOut, "-  color: black\n") {
		t.Fatalf("restore run again: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.value(key); !bytes.Equal(v, values[0]) {
		t.Fatal("the restore run again did not write")
	}

	// Deleted when the diff was shown, created again before the answer.
	c.del(key)
	put = &answerAfter{change: func() { c.put(key, meanwhile) }, answer: strings.NewReader("y\n")}
	if code, out, errOut := c.runIn(put, "restore", "cm/web", "--rev", fmt.Sprint(revs[1])); code == 0 || !strings.Contains(errOut, "changed since the diff; run it again") {
		t.Fatalf("restore over an object created during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.value(key); !bytes.Equal(v, meanwhile) {
		t.Fatal("the restore overwrote the object created during the question")
	}
}

func TestExternalDiff(t *testing.T) {
	c := newCluster(t)
	edits(t, c)
	var out, errOut bytes.Buffer
	p := &plugin{in: strings.NewReader(""), out: &out, errOut: &errOut, now: time.Now, loc: time.UTC, externalDiff: "diff -u -N --bad;arg"}
	if code := p.run(t.Context(), []string{"diff", "cm/web"}); code != 1 {
		t.Fatalf("exit %d, want 1 (differences)\n%s\n%s", code, out.String(), errOut.String())
	}
	if !hasLine(`(?m)^--- .*/FROM-REV-\d+/v1\.ConfigMap\.shop\.web\t`, out.String()) || !strings.Contains(out.String(), "-  color: green\n+  color: red\n") {
		t.Fatalf("external diff printed:\n%s", out.String())
	}
}

// diff fails as kubectl diff does, with 2, a wrong flag included: 1 says
// that the objects differ.
func TestDiffErrorStatus(t *testing.T) {
	c := newCluster(t)
	edits(t, c)
	for _, args := range [][]string{{"diff", "cm/web", "-o", "json"}, {"diff"}, {"diff", "nope/web"}} {
		if code, _, errOut := c.run("", args...); code != 2 || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("%s: exit %d, want 2 and the error:\n%s", args, code, errOut)
		}
	}
}
