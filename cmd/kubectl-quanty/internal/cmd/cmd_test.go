package cmd_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd"
	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// A ConfigMap edited twice: its log lists both edits with the changed
// field, get shows an old revision as YAML, diff the last change, and
// restore brings the first value back after asking.
// commands are the plugin's history commands: every command but help,
// completion and version.
var commands = func() []string {
	var names []string
	root := cmd.NewCmdQuanty(util.NewFactory(), genericiooptions.NewTestIOStreamsDiscard(), "test")
	for _, c := range root.Commands() {
		if !slices.Contains([]string{"help", "completion", "version"}, c.Name()) {
			names = append(names, c.Name())
		}
	}
	return names
}()

// The plugin's commands are the ten the docs name.
func TestCommands(t *testing.T) {
	want := []string{"blame", "changes", "deleted", "diff", "get", "log", "restore", "revert", "ui", "undelete"}
	if got := slices.Sorted(slices.Values(commands)); !slices.Equal(got, want) {
		t.Fatalf("kubectl quanty's commands are %q, want %q", got, want)
	}
}

func newCluster(t *testing.T) *cmdtesting.Cluster {
	return cmdtesting.New(t, func(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
		return cmd.NewCmdQuanty(f, streams, "test")
	})
}

func TestConfigMapHistory(t *testing.T) {
	c := newCluster(t)
	key, revs, values := c.Edits()
	// A write elsewhere: the store's revision is past the ConfigMap's.
	c.Put("/registry/configmaps/shop/other", cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "other", "uid-other", nil)))

	out := c.OK("log", "cm/web")
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
		Key       string           `json:"key"`
		Revisions []objects.Change `json:"revisions"`
	}
	if err := json.Unmarshal([]byte(c.OK("log", "configmap/web", "--reverse", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Key != key || len(doc.Revisions) != 3 || doc.Revisions[0].Revision != revs[0] || strings.Join(doc.Revisions[2].Changes, ",") != "data.color" {
		t.Fatalf("log -o json = %+v", doc)
	}
	if got := c.OK("log", "configmaps/web", "--limit", "1", "-o", "json"); !strings.Contains(got, fmt.Sprintf(`"revision": %d`, revs[2])) || strings.Contains(got, fmt.Sprintf(`"revision": %d`, revs[1])) {
		t.Errorf("log --limit 1 printed:\n%s", got)
	}

	// Bare durations, as kubectl logs --since takes them, days included.
	if got := c.OK("log", "cm/web", "--since", "1d", "-o", "json"); strings.Count(got, `"revision": `) != 3 {
		t.Errorf("log --since 1d: want the 3 changes of the last day, got:\n%s", got)
	}
	if got := c.OK("log", "cm/web", "--until", "1d12h", "-o", "json"); strings.Contains(got, `"revision": `) {
		t.Errorf("log --until 1d12h: want no change from before a day and a half ago, got:\n%s", got)
	}

	yaml := c.OK("get", "configmap/web", "--rev", fmt.Sprint(revs[0]))
	for _, want := range []string{"apiVersion: v1\n", "kind: ConfigMap\n", "  color: blue\n", fmt.Sprintf("  resourceVersion: \"%d\"\n", revs[0]), "  uid: uid-web\n"} {
		if !strings.Contains(yaml, want) {
			t.Errorf("get --rev %d: no %q in\n%s", revs[0], want, yaml)
		}
	}
	// --at the commit time of the second revision, as log prints it.
	if got := c.OK("get", "ConfigMap/web", "--at", doc.Revisions[1].Time, "-o", "json"); !strings.Contains(got, `"color": "green"`) {
		t.Errorf("get --at %s printed:\n%s", doc.Revisions[1].Time, got)
	}
	if got := c.OK("get", "cm", "web", "--rev", fmt.Sprint(revs[1]), "-o", "name"); got != "configmap/web\n" {
		t.Errorf("get -o name = %q", got)
	}

	code, out, _ := c.Run("", "diff", "cm/web")
	if code != 1 || !strings.Contains(out, "-  color: green\n+  color: red\n") || !strings.Contains(out, fmt.Sprintf("(revision %d (now))", revs[2])) {
		t.Fatalf("diff: exit %d, want 1 and the last change:\n%s", code, out)
	}
	code, out, _ = c.Run("", "diff", "cm/web", "--rev", fmt.Sprint(revs[1]), "--rev", fmt.Sprint(revs[0]))
	if code != 1 || !strings.Contains(out, "-  color: blue\n+  color: green\n") {
		t.Fatalf("diff of two revisions (given newest first): exit %d:\n%s", code, out)
	}
	if code, out, _ := c.Run("", "diff", "cm/web", "--rev", fmt.Sprint(revs[2])); code != 0 || out != "" {
		t.Fatalf("diff of now against now: exit %d:\n%s", code, out)
	}

	// Refused at the prompt: nothing written.
	code, _, errOut := c.Run("n\n", "restore", "cm/web", "--rev", fmt.Sprint(revs[0]))
	if v, _ := c.Value(key); code != 1 || !bytes.Equal(v, values[2]) || !strings.Contains(errOut, "+  color: blue") ||
		!strings.Contains(errOut, fmt.Sprintf("--- configmap/web (revision %d (now))\n", revs[2])) {
		t.Fatalf("restore answered no: exit %d, value changed: %v\n%s", code, !bytes.Equal(v, values[2]), errOut)
	}
	code, out, errOut = c.Run("y\n", "restore", "cm/web", "--rev", fmt.Sprint(revs[0]))
	v, rev := c.Value(key)
	if code != 0 || !bytes.Equal(v, values[0]) || !strings.Contains(out, fmt.Sprintf("restored to revision %d (new revision %d)", revs[0], rev)) {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := c.OK("log", "cm/web", "--limit", "1"); !strings.Contains(got, fmt.Sprintf("restored (revision %d)   data.color", revs[0])) {
		t.Errorf("log after restore:\n%s", got)
	}
	if got := c.OK("restore", "cm/web", "--rev", fmt.Sprint(revs[0]), "--yes"); !strings.Contains(got, "nothing to restore") {
		t.Errorf("restoring the state it has: %s", got)
	}
}

// fakeKubectl records its command line, and answers the discovery of the
// core group and the Log of a key (empty: no history), or fails as
// kubectl fails to reach a server when KQ_FAIL is set.
const fakeKubectl = `#!/bin/sh
printf '%s\n' "$*" >>"$KQ_DIR/args"
case "$*" in
"get --raw /api/v1" | "get --raw /api/v1 "*) cat "$KQ_DIR/core.json" ;;
"get --raw /apis/quanty.quantyroot.io/v1alpha1/logs?"*) [ -z "$KQ_FAIL" ] || { echo "error: the server is down" >&2; exit 1; } ;;
"config view "*) printf team ;;
*) echo "Error from server (NotFound): the server could not find the requested resource" >&2; exit 1 ;;
esac
`

// Every kubectl the plugin runs gets each of kubectl's global flags that
// was given, as given, and no other (not --cache-dir's default, which
// comes from $HOME). (TestRealKubectl shows that kubectl takes them, and
// that --as is the identity the aggregated API checks.)
func TestKubectlFlagsPassedOn(t *testing.T) {
	c := newCluster(t)
	c.RealKubectl = true
	dir := t.TempDir()
	core, err := json.Marshal(cmdtesting.Discovery()["/api/v1"])
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"kubectl": fakeKubectl, "core.json": string(core)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KQ_DIR", dir)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	kubectlArgs := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "args"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
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
	if _, out, errOut := c.Run("", args...); !strings.Contains(errOut, "No history found for configmap/web in namespace team.") {
		t.Fatalf("log through the fake kubectl:\n%s%s", out, errOut)
	}
	lines := kubectlArgs()
	if len(lines) < 2 {
		t.Fatalf("kubectl ran %d times", len(lines))
	}
	for _, l := range lines {
		if got := passedOn(l); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("kubectl %s:\npassed on %q\nwant      %q", l, got, slices.Sorted(slices.Values(want)))
		}
	}

	// Without flags, kubectl gets none: not the defaults (--cache-dir's
	// is under $HOME, --request-timeout's is 0), so that kubectl applies
	// the kubeconfig's and its own.
	before := len(kubectlArgs())
	c.OK("log", "cm/web")
	after := kubectlArgs()[before:]
	if len(after) != 3 || !strings.HasPrefix(after[1], "config view ") {
		t.Errorf("log cm/web ran kubectl %q, want discovery, the context's namespace and the log", after)
	}
	for _, l := range after {
		if got := passedOn(l); len(got) != 0 {
			t.Errorf("kubectl %s: passed on %q, none given", l, got)
		}
	}
	// A token never shows in what the plugin prints, a failure included.
	t.Setenv("KQ_FAIL", "1")
	if code, out, errOut := c.Run("", "log", "cm/web", "--token=s3cr3t-token", "--as=bob"); code != 1 || !strings.Contains(errOut, "the server is down") || strings.Contains(out+errOut, "s3cr3t") {
		t.Errorf("kubectl failed: exit %d, printed:\n%s%s", code, out, errOut)
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
		d := discovery.New(c.Client())
		r, err := d.Resolve(t.Context(), typ)
		if err != nil || r.Resource.String() != want {
			t.Errorf("resolve(%q) = %s, %v; want %s", typ, r.Resource, err, want)
		}
	}
	for _, typ := range []string{"nope", "pods/status", "bindings", "logs", "deployments.nope.io", "widgets.v2.example.com", ""} {
		d := discovery.New(c.Client())
		if r, err := d.Resolve(t.Context(), typ); err == nil {
			t.Errorf("resolve(%q) = %s, want an error", typ, r.Resource)
		}
	}
	// A core name needs the core group's document only.
	before := len(c.Requests())
	if _, err := discovery.New(c.Client()).Resolve(t.Context(), "svc"); err != nil {
		t.Fatal(err)
	}
	if ran := c.Requests()[before:]; len(ran) != 1 || ran[0] != "GET /api/v1" {
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
		out := c.OK(append([]string{"log", "-o", "json"}, tc.args...)...)
		if !strings.Contains(out, `"key": "`+tc.key+`"`) {
			t.Errorf("log %s: want key %s in\n%s", tc.args, tc.key, out)
		}
	}
}

// Errors name what is missing: the permission on the object, the
// APIService, the resource type, the object at a revision.
func TestErrors(t *testing.T) {
	c := newCluster(t)
	_, revs, _ := c.Edits()
	c.Del("/registry/configmaps/shop/web")
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
		code, _, errOut := c.Run("", tc.args...)
		for _, w := range tc.want {
			if code == 0 || !strings.Contains(errOut, w) {
				t.Errorf("%s: exit %d, want %q in:\n%s", tc.args, code, w, errOut)
			}
		}
	}
	c.NoAPIService = true
	if code, _, errOut := c.Run("", "log", "cm/web"); code != 1 || !strings.Contains(errOut, "the APIService v1alpha1.quanty.quantyroot.io is not registered") {
		t.Errorf("without the APIService: exit %d:\n%s", code, errOut)
	}
}

// Each command's help shows examples of it and kubectl's flags; the
// overview lists every command with its first example.
func TestHelpShowsExamples(t *testing.T) {
	c := newCluster(t)
	out := c.OK("--help")
	for _, name := range commands {
		if !strings.Contains(out, "\n  "+name+" ") || !strings.Contains(out, "kubectl quanty "+name) {
			t.Errorf("--help has no line or example for %s:\n%s", name, out)
		}
	}
	// In the order the docs list them, log first.
	if !cmdtesting.HasLine(`(?s)Commands:\n  log .*\n  get .*\n  diff .*\n  restore .*\n  deleted .*\n  undelete .*\n  blame .*\n  revert .*\n  changes .*\n  ui `, out) {
		t.Errorf("--help lists the commands in another order:\n%s", out)
	}
	if code, alone, _ := c.Run(""); code != 1 || alone != out {
		t.Errorf("kubectl quanty alone: exit %d, printed:\n%s", code, alone)
	}
	for _, name := range commands {
		for _, args := range [][]string{{name, "--help"}, {"help", name}, {name, "-h"}} {
			h := c.OK(args...)
			if !strings.Contains(h, "Usage:\n  kubectl quanty "+name+" ") || strings.Contains(h, "[flags]") {
				t.Errorf("%s has no usage line of its own:\n%s", args, h)
			}
			if n := len(regexp.MustCompile(`(?m)^  kubectl quanty `+name+` `).FindAllString(h, -1)); n < 2 {
				t.Errorf("%s shows %d examples, want 2 or more:\n%s", args, n, h)
			}
			for _, flag := range []string{"--kubeconfig", "--context", "--as-group", "--request-timeout", "-n, --namespace", "--etcd-prefix"} {
				if !strings.Contains(h, flag) {
					t.Errorf("%s has no %s", args, flag)
				}
			}
			// Passed on to kubectl, or (ui) read as kubectl reads them.
			own, kubectl, _ := strings.Cut(h, "\nkubectl's flags, ")
			if !strings.Contains(own, "--etcd-prefix") || strings.Contains(kubectl, "--etcd-prefix") || strings.Contains(own, "--kubeconfig") {
				t.Errorf("%s: --etcd-prefix is not among the command's flags, or kubectl's are:\n%s", args, h)
			}
		}
	}
	if out := c.OK("version"); out != "kubectl-quanty test\n" {
		t.Errorf("version: %q", out)
	}
	if out := c.OK("--version"); out != "kubectl-quanty test\n" {
		t.Errorf("--version: %q", out)
	}
}
