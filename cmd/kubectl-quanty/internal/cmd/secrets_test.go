package cmd_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
)

// A Secret's values are masked in all the plugin prints of them, as
// kubectl diff masks them: get (yaml and json), diff (built in and
// external), restore's diff; undelete never prints them. --show-secrets
// shows them where they are printed.
func TestSecretsMasked(t *testing.T) {
	c := newCluster(t)
	key := "/registry/secrets/shop/db"
	r1 := c.Put(key, cmdtesting.Encode(t, cmdtesting.Secret(t, map[string]string{"password": "hunter2", "user": "admin"})))
	c.Put(key, cmdtesting.Encode(t, cmdtesting.Secret(t, map[string]string{"password": "swordfish", "user": "admin", "token": "s3cr3t-token"})))

	for _, format := range []string{"yaml", "json"} {
		out := c.OK("get", "secret/db", "--rev", fmt.Sprint(r1), "-o", format)
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); format == "json" && err != nil {
			t.Fatalf("get -o json: %v\n%s", err, out)
		}
		if l := cmdtesting.Leaked(out); l != nil || !strings.Contains(out, "***") || !strings.Contains(out, "kubectl.kubernetes.io/last-applied-configuration") {
			t.Errorf("get -o %s shows %q:\n%s", format, l, out)
		}
		if out := c.OK("get", "secret/db", "--rev", fmt.Sprint(r1), "-o", format, "--show-secrets"); !strings.Contains(out, "aHVudGVyMg==") || !strings.Contains(out, `hunter2`) {
			t.Errorf("get -o %s --show-secrets does not show the values:\n%s", format, out)
		}
	}

	code, out, errOut := c.Run("", "diff", "secret/db")
	for _, want := range []string{"-  password: '*** (before)'\n", "+  password: '*** (after)'\n", "+  token: '***'\n", "   user: '***'\n"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("diff: exit %d, no %q in:\n%s%s", code, want, out, errOut)
		}
	}
	if l := cmdtesting.Leaked(out); l != nil {
		t.Errorf("diff shows %q:\n%s", l, out)
	}
	if _, out, _ := c.Run("", "diff", "secret/db", "--show-secrets"); !strings.Contains(out, "-  password: aHVudGVyMg==\n+  password: c3dvcmRmaXNo\n") {
		t.Errorf("diff --show-secrets:\n%s", out)
	}
	var ext strings.Builder
	t.Setenv("KUBECTL_EXTERNAL_DIFF", "diff -u")
	if code := c.RunTo(strings.NewReader(""), &ext, &ext, "diff", "secret/db"); code != 1 || cmdtesting.Leaked(ext.String()) != nil || !strings.Contains(ext.String(), "*** (after)") {
		t.Errorf("KUBECTL_EXTERNAL_DIFF: exit %d, shows %q:\n%s", code, cmdtesting.Leaked(ext.String()), ext.String())
	}

	code, out, errOut = c.Run("", "restore", "secret/db", "--rev", fmt.Sprint(r1), "--dry-run")
	if code != 0 || cmdtesting.Leaked(out+errOut) != nil || !strings.Contains(errOut, "+  password: '*** (after)'") {
		t.Errorf("restore --dry-run: exit %d, shows %q:\n%s%s", code, cmdtesting.Leaked(out+errOut), out, errOut)
	}
	if _, _, errOut := c.Run("", "restore", "secret/db", "--rev", fmt.Sprint(r1), "--dry-run", "--show-secrets"); !strings.Contains(errOut, "+  password: aHVudGVyMg==") {
		t.Errorf("restore --dry-run --show-secrets:\n%s", errOut)
	}

	// The namespace goes, with the Secret: undelete names it, and only
	// that.
	c.Put("/registry/namespaces/shop", cmdtesting.Encode(t, cmdtesting.Namespace(false)))
	c.Put("/registry/namespaces/shop", cmdtesting.Encode(t, cmdtesting.Namespace(true)))
	c.Del(key)
	c.Del("/registry/namespaces/shop")
	for _, args := range [][]string{{"--dry-run"}, {"--dry-run", "-o", "yaml"}, {"--yes", "-o", "json"}} {
		code, out, errOut := c.Run("", append([]string{"undelete", "namespace", "shop"}, args...)...)
		if code != 0 || cmdtesting.Leaked(out+errOut) != nil || !strings.Contains(out+errOut, "secret/db") {
			t.Errorf("undelete %s: exit %d, shows %q:\n%s%s", args, code, cmdtesting.Leaked(out+errOut), out, errOut)
		}
	}
}
