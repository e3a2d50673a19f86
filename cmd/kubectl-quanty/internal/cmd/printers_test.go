package cmd_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
)

// hidden is text that would reorder a line or hide part of it on a
// terminal: every bidirectional control, zero-width characters, the line
// and paragraph separators, a BOM, a soft hyphen, a tag character, a
// variation selector, a Hangul filler; and a control sequence.
const hidden = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200c\u200d\u200e\u200f\u2028\u2029\ufeff\u00ad\U000e0041\ufe0f\u3164\x1b[2K"

// dangerous is the first character in s that a terminal would act on or
// hide: a raw control character but \n and \t, an invisible character
// (terminal.Invisible), a byte that is not UTF-8; "" when there is none.
func dangerous(s string) string {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") || unicode.IsControl(r) && r != '\n' && r != '\t' || terminal.Invisible(r) {
			return fmt.Sprintf("%q at %d", s[i:min(len(s), i+12)], i)
		}
	}
	return ""
}

// unpainted is s without the colors a painted diff adds: the only raw
// control sequences the plugin writes.
func unpainted(s string) string {
	return strings.NewReplacer("\x1b[1m", "", "\x1b[31m", "", "\x1b[32m", "", "\x1b[36m", "", "\x1b[0m", "").Replace(s)
}

// holds reports whether a string of doc, a key or a value, holds s.
func holds(doc any, s string) bool {
	switch d := doc.(type) {
	case string:
		return strings.Contains(d, s)
	case []any:
		return slices.ContainsFunc(d, func(v any) bool { return holds(v, s) })
	case map[string]any:
		for k, v := range d {
			if strings.Contains(k, s) || holds(v, s) {
				return true
			}
		}
	}
	return false
}

// Every command's printers (tables, text, diffs, JSON, YAML, errors and
// questions, painted or not) show what reorders or hides text as escapes:
// a name, a key, a label, a field manager, a data key and value, an
// owner's name holding hidden (issue 51, item 8). JSON and YAML read back
// as what was stored.
func TestEveryPrinterEscapes(t *testing.T) {
	c := newCluster(t)
	name := "cfg" + hidden
	nsKey, cmKey := "/registry/namespaces/shop", "/registry/configmaps/shop/"+name
	before := c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(false)))
	time.Sleep(5 * time.Millisecond)
	cm := cmdtesting.ConfigMap("shop", name, "uid-cfg", map[string]string{"k" + hidden: "blue" + hidden})
	cm.Labels = map[string]string{"app": "web", "note": "x" + hidden}
	cm.ManagedFields = []metav1.ManagedFieldsEntry{cmdtesting.Managed("kubectl"+hidden, metav1.ManagedFieldsOperationUpdate, time.Now(), `{"f:data":{}}`)}
	r1 := c.Put(cmKey, cmdtesting.Encode(t, cm))
	cm.Data = map[string]string{"k" + hidden: "red" + hidden, "line": "a\nb" + hidden + "\n"}
	cm.ManagedFields = append(cm.ManagedFields, cmdtesting.Managed("editor"+hidden, metav1.ManagedFieldsOperationUpdate, time.Now().Add(time.Second), `{"f:data":{"f:line":{}}}`))
	c.Put(cmKey, cmdtesting.Encode(t, cm))
	rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{Kind: "ReplicaSet", APIVersion: "apps/v1"}, ObjectMeta: cmdtesting.Meta("shop", "rs"+hidden, "uid-rs")}
	c.Put("/registry/replicasets/shop/rs"+hidden, cmdtesting.Encode(t, rs))
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: cmdtesting.Meta("shop", "p", "uid-p", cmdtesting.ControlledBy("ReplicaSet", "apps/v1", "rs"+hidden, "uid-rs"))}
	c.Put("/registry/pods/shop/p", cmdtesting.Encode(t, pod))

	ran := map[string]bool{}
	// check runs the command line, checks what it printed, and returns its
	// standard output.
	check := func(color bool, want int, args ...string) string {
		t.Helper()
		ran[args[0]] = true
		var out, errOut strings.Builder
		c.Color = color
		code := c.RunTo(strings.NewReader(""), &out, &errOut, args...)
		c.Color = false
		printed := out.String() + errOut.String()
		if color {
			printed = unpainted(printed)
		}
		if code != want {
			t.Errorf("%q: exit %d, want %d\n%s", args, code, want, printed)
		}
		if d := dangerous(printed); d != "" {
			t.Errorf("%q printed %s raw:\n%s", args, d, printed)
		}
		if !strings.Contains(strings.ToLower(printed), `\u202e`) {
			t.Errorf("%q shows no escape of U+202E:\n%s", args, printed)
		}
		return out.String()
	}
	// readBack checks that JSON or YAML output holds the hidden text as it
	// was stored.
	readBack := func(format, out string, args ...string) {
		t.Helper()
		var doc any
		unmarshal := func(b []byte, v any) error { return yaml.Unmarshal(b, v) }
		if format == "json" {
			unmarshal = json.Unmarshal // beyond U+FFFF, as surrogate pairs, which go-yaml refuses
		}
		if err := unmarshal([]byte(out), &doc); err != nil {
			t.Errorf("%q -o %s does not parse: %v\n%s", args, format, err, out)
			return
		}
		if !holds(doc, hidden) {
			t.Errorf("%q -o %s lost the hidden text:\n%s", args, format, out)
		}
	}
	for _, color := range []bool{false, true} {
		check(color, 1, "diff", "--key", cmKey)
		check(color, 0, "revert", "-n", "shop", "--to-rev", fmt.Sprint(before), "--dry-run", "--diff")
	}
	for _, format := range []string{"", "json", "yaml"} {
		o := func(args ...string) []string {
			if format == "" {
				return args
			}
			return append(args, "-o", format)
		}
		for _, args := range [][]string{
			o("log", "--key", cmKey),
			o("get", "--key", cmKey, "--rev", fmt.Sprint(r1)),
			o("get", "configmaps", "--rev", fmt.Sprint(r1)),
			o("restore", "--key", cmKey, "--rev", fmt.Sprint(r1), "--dry-run"),
			o("blame", "--key", cmKey),
			o("changes", "-A", "cm,rs"),
			o("revert", "-n", "shop", "--to-rev", fmt.Sprint(before), "--dry-run"),
		} {
			out := check(false, 0, args...)
			if format != "" {
				readBack(format, out, args...)
			}
		}
	}
	check(false, 0, "get", "configmaps", "--rev", fmt.Sprint(r1), "-o", "wide")
	check(false, 0, "get", "configmaps", "--rev", fmt.Sprint(r1), "-o", "name")
	check(false, 0, "changes", "-A", "-o", "wide")
	check(false, 1, "get", "configmap/"+name, "--rev", fmt.Sprint(before)) // an error naming it
	check(false, 1, "restore", "configmap/"+name, "--rev", fmt.Sprint(r1)) // a question, no answer

	// Gone with its namespace.
	c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(true)))
	c.Del(cmKey)
	c.Del("/registry/pods/shop/p")
	c.Del("/registry/replicasets/shop/rs" + hidden)
	c.Del(nsKey)
	for _, format := range []string{"table", "json", "yaml"} {
		out := check(false, 0, "deleted", "-o", format)
		if format != "table" {
			readBack(format, out, "deleted")
		}
	}
	for _, format := range []string{"text", "json", "yaml"} {
		out := check(false, 0, "undelete", "namespace", "shop", "--dry-run", "-o", format)
		if format != "text" {
			readBack(format, out, "undelete")
		}
	}
	var untested []string
	for _, name := range commands {
		// ui prints nothing the cluster sends: the URL it made and the
		// kubeconfig's server, through the same Screen; the page is the
		// browser's to escape (test/e2e's ui check).
		if name == "ui" {
			continue
		}
		if !ran[name] {
			untested = append(untested, name)
		}
	}
	if len(untested) > 0 || len(ran) != len(commands)-1 {
		t.Errorf("commands not checked: %q (ran %v)", untested, ran)
	}
}
