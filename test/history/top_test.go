package history

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

// `quantykube history top` finds the churn an operator would look for: a
// lease renewed 120 times tops the revisions of the types, namespaces and
// keys, a large Secret tops the bytes, and bad flags are refused.
func TestCLITop(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e := startEnv(t, b, nil, nil)
		ep := "--endpoints=" + e.url
		for i := range 120 {
			e.put("/registry/leases/kube-node-lease/node-a", fmt.Sprintf("renewal %d", i))
		}
		e.put("/registry/configmaps/shop/web", "color: red")
		e.put("/registry/secrets/shop/tls", strings.Repeat("x", 20000))

		out := e.ok("top", ep, "--by", "revisions", "--limit", "1").stdout
		for _, want := range []string{
			"leases.coordination.k8s.io ", "leases.coordination.k8s.io in kube-node-lease", "/registry/leases/kube-node-lease/node-a",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("top --by revisions: no %q in\n%s", want, out)
			}
		}
		rows := table(t, firstList(out), "TYPE", "BYTES", "REVISIONS", "LAST HOUR", "OLDEST")
		if rows[0][2] != "120" || rows[0][3] != "120" {
			t.Errorf("the lease type's row %q: want 120 revisions, all in the last hour\n%s", rows[0], out)
		}
		out = e.ok("top", ep, "--limit", "1").stdout
		if rows := table(t, firstList(out), "TYPE", "BYTES", "REVISIONS", "LAST HOUR", "OLDEST"); rows[0][0] != "secrets" {
			t.Errorf("top by bytes: first type %q, want secrets\n%s", rows[0][0], out)
		}
		if !strings.Contains(e.ok("top", ep, "-o", "json").stdout, `"revisions_last_hour"`) {
			t.Error("top -o json has no revisions_last_hour")
		}
		if msg := e.fails("top", ep, "--by", "size"); !strings.Contains(msg, `by "size": want bytes or revisions`) {
			t.Errorf("top --by size: %s", msg)
		}
		if msg := e.fails("top", ep, "extra"); !strings.Contains(msg, "takes no arguments") {
			t.Errorf("top extra: %s", msg)
		}
	})
}

// firstList is top's first table: each list is aligned on its own, and a
// blank line ends it.
func firstList(out string) string {
	first, _, _ := strings.Cut(out, "\n\n")
	return first + "\n"
}
