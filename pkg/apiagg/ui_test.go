package apiagg_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/apiagg/ui"
	"github.com/quantyroot/quantykube/pkg/apiagg/uidecode"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const wantCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// uiHeaders checks the headers every answer under ui/ carries.
func uiHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, want := range map[string]string{
		"Content-Security-Policy": wantCSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %s %q, want %q", what, k, got, want)
		}
	}
}

// The page and each of its assets answer with their type, the CSP and
// cache headers; nothing else under ui/ answers (no listing), and only
// GET and HEAD do.
func TestUIAssets(t *testing.T) {
	e := newEnv(t)
	code, b, h := e.as(e.proxy, "GET", base+"/ui/", nil, "u")
	if code != 200 || h.Get("Content-Type") != "text/html; charset=utf-8" || !bytes.Contains(b, []byte(`src="app.js"`)) {
		t.Fatalf("the page: %d %s %.200s", code, h.Get("Content-Type"), b)
	}
	uiHeaders(t, "the page", h)
	if h.Get("Cache-Control") != "no-cache" {
		t.Errorf("the page's Cache-Control %q, want no-cache", h.Get("Cache-Control"))
	}
	names := ui.Names()
	if len(names) < 5 {
		t.Fatalf("assets %v", names)
	}
	total := 0
	for _, n := range names {
		if n == "" {
			continue
		}
		code, b, h := e.as(e.proxy, "GET", base+"/ui/"+n, nil, "u")
		want := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}[n[strings.LastIndex(n, "."):]]
		if code != 200 || want == "" || h.Get("Content-Type") != want || h.Get("Cache-Control") == "" {
			t.Errorf("%s: %d, Content-Type %q (want %q), Cache-Control %q", n, code, h.Get("Content-Type"), want, h.Get("Cache-Control"))
		}
		uiHeaders(t, n, h)
		asset, _ := ui.Asset(n)
		if !bytes.Equal(b, asset) {
			t.Errorf("%s: served %d bytes, embedded %d", n, len(b), len(asset))
		}
		total += len(asset)
	}
	// Scripts and styles together: at most 200 KB (issue 55).
	t.Logf("scripts and styles: %d bytes in %d files", total, len(names)-1)
	if total > 200_000 {
		t.Errorf("scripts and styles are %d bytes, over 200 KB", total)
	}
	for _, p := range []string{"/ui/nope.js", "/ui/assets/", "/ui/assets/app.js", "/ui/index.html", "/ui/./app.js", "/ui//", "/ui/x/"} {
		code, b, h := e.as(e.proxy, "GET", base+p, nil, "u")
		if code != 404 || status(t, b).Code != 404 {
			t.Errorf("GET %s: %d %s, want 404", p, code, b)
		}
		uiHeaders(t, p, h)
	}
	if code, _, h := e.as(e.proxy, "POST", base+"/ui/", nil, "u"); code != 405 || h.Get("Allow") != "GET" {
		t.Errorf("POST ui/: %d, want 405", code)
	}
	if code, b, h := e.as(e.proxy, "HEAD", base+"/ui/app.js", nil, "u"); code != 200 || len(b) != 0 || h.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("HEAD app.js: %d %d bytes %q", code, len(b), h.Get("Content-Type"))
	}
	// ui without the slash: sent, relatively, to ui/ (it works under any
	// prefix, as behind kubectl quanty ui's proxy).
	noRedirect := *e.proxy
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if code, _, h := e.as(&noRedirect, "GET", base+"/ui", nil, "u"); code != http.StatusMovedPermanently || h.Get("Location") != "ui/" {
		t.Errorf("GET ui: %d Location %q, want 301 to ui/", code, h.Get("Location"))
	}
	// Behind the front proxy only, as the rest of the API.
	if code, _, _ := e.as(e.client(nil, ""), "GET", base+"/ui/", nil, "u"); code != 401 {
		t.Errorf("the page without the front proxy: %d, want 401", code)
	}
}

// The page holds no inline script, style or event handler (the CSP
// would block them; their absence is what lets it), and names nothing
// outside itself: every URL in it and in its scripts is relative.
func TestUIPageIsInert(t *testing.T) {
	page, _ := ui.Asset("")
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "style":
				t.Errorf("an inline <style>")
			case "script":
				scripts++
				if n.FirstChild != nil || attr(n, "src") == "" {
					t.Errorf("an inline <script>")
				}
			}
			for _, a := range n.Attr {
				k := strings.ToLower(a.Key)
				switch {
				case strings.HasPrefix(k, "on"):
					t.Errorf("<%s %s=…>: an inline event handler", n.Data, a.Key)
				case k == "style":
					t.Errorf("<%s style=…>: an inline style", n.Data)
				case k == "src" || k == "href" || k == "action" || k == "srcset" || k == "content" && strings.Contains(a.Val, "url"):
					if !relative(a.Val) {
						t.Errorf("<%s %s=%q>: not a relative URL", n.Data, a.Key, a.Val)
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if scripts != 1 {
		t.Errorf("%d scripts, want the one module", scripts)
	}
	absolute := regexp.MustCompile(`(?i)\b(https?|wss?|ftp):|['"\x60(]//|@import|\burl\(`)
	sink := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"]on`)
	for _, n := range ui.Names() {
		if n == "" {
			continue
		}
		b, _ := ui.Asset(n)
		if m := absolute.Find(b); m != nil {
			t.Errorf("%s names something outside the page: %q", n, m)
		}
		if strings.HasSuffix(n, ".js") {
			if m := sink.Find(b); m != nil {
				t.Errorf("%s: %q parses text as markup or code; build the DOM with textContent", n, m)
			}
		}
	}
}

func attr(n *html.Node, k string) string {
	for _, a := range n.Attr {
		if a.Key == k {
			return a.Val
		}
	}
	return ""
}

func relative(u string) bool {
	return u != "" && !strings.Contains(u, ":") && !strings.HasPrefix(u, "//") && !strings.HasPrefix(u, "/") && !strings.HasPrefix(u, `\`)
}

// A restore a browser sends (it names an Origin, or Sec-Fetch-Site) is
// refused without the page's header, so that another site's form cannot
// ride a browser's client certificate through kube-apiserver; kubectl
// sends neither and is not concerned.
func TestRestoreFromABrowserNeedsTheHeader(t *testing.T) {
	e := newEnv(t)
	key := "/registry/configmaps/ns1/app"
	first := e.put(key, configMap("app", "one"))
	second := e.put(key, configMap("app", "two"))
	e.grants.allow["carol"] = []string{"get configmaps app in namespace ns1", "update configmaps app in namespace ns1"}
	body := mustMarshal(t, &historypb.Request{Key: []byte(key), Revision: first})
	for _, hdr := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "null"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://evil.example", ui.Header: "yes"},
	} {
		code, b := e.restoreWith("carol", body, "", hdr)
		if st := status(t, b); code != 403 || !strings.Contains(st.Message, ui.Header) {
			t.Errorf("%v: %d %s, want 403 naming %s", hdr, code, b, ui.Header)
		}
		if e.store.Rev() != second {
			t.Fatalf("%v: a refused restore wrote", hdr)
		}
	}
	code, b := e.restoreWith("carol", body, "", map[string]string{"Origin": "https://kube.example", ui.Header: "1"})
	if code != 200 || e.store.Rev() == second {
		t.Fatalf("with the header: %d %s, and the store at %d", code, b, e.store.Rev())
	}
}

// A dry run (dryRun=All) is checked as the restore would be, kube-
// apiserver's dry run included, answers what it would write, and writes
// nothing; a refusal is kube-apiserver's own Status.
func TestRestoreDryRunParam(t *testing.T) {
	e := newEnvWith(t, apiagg.Config{DecodeValue: uidecode.Decode})
	key := "/registry/configmaps/ns1/app"
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns1", UID: "u1"}, Data: map[string]string{"v": v}}
	}
	first := e.put(key, stored(t, cm("one<script>alert(1)</script>")))
	second := e.put(key, stored(t, cm("two")))
	e.grants.allow["carol"] = []string{"get configmaps app in namespace ns1", "update configmaps app in namespace ns1"}
	body := mustMarshal(t, &historypb.Request{Key: []byte(key), Revision: first})

	code, b := e.restoreWith("carol", body, "?dryRun=All", map[string]string{"Accept": apiagg.JSONType})
	var got struct {
		Revision    int64
		NewRevision int64
		KV          struct {
			Key    string
			Object struct{ Data map[string]string }
		}
	}
	if err := json.Unmarshal(b, &got); code != 200 || err != nil || got.NewRevision != 0 || got.KV.Key != key || got.KV.Object.Data["v"] != "one<script>alert(1)</script>" {
		t.Fatalf("dry run: %d %v %s", code, err, b)
	}
	if e.store.Rev() != second {
		t.Fatal("a dry run wrote")
	}
	if m := e.dry.methods(); len(m) != 1 || m[0] != "PUT" {
		t.Errorf("kube-apiserver's dry runs: %v, want the PUT of the update", m)
	}
	e.dry.refuse = func(apiagg.Write) error { return errForbiddenByPolicy }
	code, b = e.restoreWith("carol", body, "?dryRun=All", nil)
	if st := status(t, b); code != 403 || st.Message != errForbiddenByPolicy.Error() {
		t.Errorf("a refused dry run: %d %s, want kube-apiserver's Status as it is", code, b)
	}
	e.dry.refuse = nil
	for _, bad := range []string{"?dryRun=", "?dryRun=Some", "?dryRun=All&dryRun=All"} {
		if code, b := e.restoreWith("carol", body, bad, nil); code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, code, b)
		}
	}
	if e.store.Rev() != second {
		t.Fatal("a refused dry run wrote")
	}
}

// JSON answers (the page's) carry each value as its object, decoded on
// the server, or why it cannot be; protobuf stays the default.
func TestJSONAnswers(t *testing.T) {
	e := newEnvWith(t, apiagg.Config{DecodeValue: uidecode.Decode})
	key := "/registry/configmaps/ns1/app"
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns1"}, Data: map[string]string{"k": "v"}}
	e.put(key, stored(t, cm))
	e.put(key, "k8s:enc:aescbc:v1:key1:xxxx")
	e.del(key)
	e.grants.allow["carol"] = []string{"get configmaps app in namespace ns1"}
	path := base + "/logs" + q(&historypb.Request{Key: []byte(key)})
	code, b, h := e.asWith("GET", path, nil, "carol", map[string]string{"Accept": apiagg.JSONType})
	var l struct {
		Entries []struct {
			Revision int64
			Deleted  int64
			KV       *struct {
				Key     string
				Object  json.RawMessage
				Problem string
			}
			PrevKV *struct{ Problem string } `json:"prevKv"`
		}
		HeaderRevision int64
	}
	if err := json.Unmarshal(b, &l); code != 200 || err != nil || h.Get("Content-Type") != apiagg.JSONType || len(l.Entries) != 3 {
		t.Fatalf("JSON log: %d %s %v %s", code, h.Get("Content-Type"), err, b)
	}
	if o := string(l.Entries[0].KV.Object); !strings.Contains(o, `"data":{"k":"v"}`) || !strings.Contains(o, `"kind":"ConfigMap"`) {
		t.Errorf("the ConfigMap as JSON: %s", o)
	}
	if p := l.Entries[1].KV.Problem; !strings.Contains(p, "encrypted") || l.Entries[1].KV.Object != nil {
		t.Errorf("an encrypted value: %q", p)
	}
	if d := l.Entries[2]; d.Deleted != 1 || d.PrevKV == nil || !strings.Contains(d.PrevKV.Problem, "encrypted") {
		t.Errorf("the delete: %+v", d)
	}
	// kubectl get --raw asks for JSON and anything else, and reads the
	// protobuf it gets.
	for _, accept := range []string{"", "application/json, */*", "application/json"} {
		if code, b, h := e.asWith("GET", path, nil, "carol", map[string]string{"Accept": accept}); code != 200 || h.Get("Content-Type") != "application/vnd.google.protobuf" || json.Valid(b) {
			t.Errorf("Accept %q: %d %s, want protobuf", accept, code, h.Get("Content-Type"))
		}
	}
}

var errForbiddenByPolicy = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "app", errors.New("violates a policy"))

// asWith is as, from the front proxy, with headers of the caller's own.
func (e *env) asWith(method, path string, body []byte, name string, hdr map[string]string, groups ...string) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-Remote-User", name)
	for _, g := range groups {
		req.Header.Add("X-Remote-Group", g)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.proxy.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func (e *env) restoreWith(user string, body []byte, query string, hdr map[string]string) (int, []byte) {
	e.t.Helper()
	code, b, _ := e.asWith("POST", base+"/restores"+query, body, user, hdr)
	return code, b
}

// A dry run of a deleted Service's restore holds none of its ClusterIPs:
// holding them is a write of its own, made only for the restore itself.
func TestRestoreDryRunHoldsNothing(t *testing.T) {
	e := newEnv(t)
	key := "/registry/services/specs/ns1/web"
	web := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "u1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10", ClusterIPs: []string{"10.0.0.10"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	made := e.put(key, stored(t, web))
	gone := e.del(key)
	e.grants.allow["carol"] = []string{"get services web in namespace ns1", "create services in namespace ns1"}
	code, b := e.restoreWith("carol", mustMarshal(t, &historypb.Request{Key: []byte(key), Revision: made}), "?dryRun=All", nil)
	if code != http.StatusOK || e.store.Rev() != gone {
		t.Fatalf("dry run: %d %s, store at %d (want %d)", code, b, e.store.Rev(), gone)
	}
	if len(e.cluster.ips) != 0 || len(e.cluster.released) != 0 {
		t.Errorf("a dry run held %v, released %v", e.cluster.ips, e.cluster.released)
	}
	if m := e.dry.methods(); len(m) != 1 || m[0] != "POST" {
		t.Errorf("kube-apiserver's dry runs: %v, want the POST of the create", m)
	}
	// The restore itself holds them.
	if code, b := e.restore("carol", &historypb.Request{Key: []byte(key), Revision: made}); code != 200 || e.cluster.ips["10.0.0.10"] != "services ns1/web" {
		t.Fatalf("the restore: %d %s, held %v", code, b, e.cluster.ips)
	}
}
