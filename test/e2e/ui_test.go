package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The web page's payloads: what an object may carry that a page that
// parsed it as markup, or made a link of it, would run.
const (
	xssAnnotation = `<script>alert("annotation")</script><img src=x onerror=alert("img")>`
	xssLink       = `javascript:alert("link")`
	xssManager    = `<img src=x onerror=alert("manager")>`
)

// uiObjects are what the web page's checks look at, written by the admin
// in ns (and one ConfigMap in other): a ConfigMap created blue by
// ui-setup and made red by ops-bot, a Secret the viewer may not read, and
// a ConfigMap whose annotations and field manager carry markup and a
// javascript: URL.
type uiObjects struct {
	ns, other          string
	from, to           time.Time
	key                string // the ConfigMap's storage key
	blue, red          int64  // its revisions
	uid                string
	secretRev, elseRev int64 // what the viewer must not see
	xssKey             string
}

func writeUIObjects(t *testing.T, c *Cluster) uiObjects {
	t.Helper()
	ctx := c.Ctx(t)
	o := uiObjects{from: time.Now().Add(-time.Second)}
	o.ns, o.other = c.Namespace(t), c.Namespace(t)
	rev := func(m metav1.Object) int64 {
		r, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cms := c.Kube.CoreV1().ConfigMaps(o.ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"color": "blue", "size": "3"}}, metav1.CreateOptions{FieldManager: "ui-setup"})
	if err != nil {
		t.Fatal(err)
	}
	o.blue, o.uid, o.key = rev(cm), string(cm.UID), "/registry/configmaps/"+o.ns+"/settings"
	cm.Data["color"] = "red"
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "ops-bot"}); err != nil {
		t.Fatal(err)
	}
	o.red = rev(cm)
	s, err := c.Kube.CoreV1().Secrets(o.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.secretRev = rev(s)
	e, err := c.Kube.CoreV1().ConfigMaps(o.other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.elseRev = rev(e)
	x := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "javascript-alert-1",
		Annotations: map[string]string{"note": xssAnnotation, "link": xssLink}}, Data: map[string]string{"html": xssAnnotation}}
	if _, err := cms.Create(ctx, x, metav1.CreateOptions{FieldManager: xssManager}); err != nil {
		t.Fatal(err)
	}
	o.xssKey = "/registry/configmaps/" + o.ns + "/" + x.Name
	// The window ends after the last write, by more than a clock's step.
	time.Sleep(1100 * time.Millisecond)
	o.to = time.Now()
	return o
}

func iso(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// checkUI opens the web page through kubectl quanty ui in headless
// Chromium as a view user and as an edit user (issue 55's proof).
func checkUI(t *testing.T, c *Cluster) {
	o := writeUIObjects(t, c)
	viewer, editor := c.NewUser(t, "ui-viewer"), c.NewUser(t, "ui-editor")
	c.Bind(t, viewer, "quanty-history-reader", "")
	c.Bind(t, viewer, "view", o.ns)
	c.Bind(t, editor, "quanty-history-reader", "")
	c.Bind(t, editor, "quanty-history-restorer", "")
	c.Bind(t, editor, "edit", o.ns)

	s := c.StartUI(t, viewer.Kubeconfig)
	checkUIProxy(t, s)
	b := NewBrowser(t)
	t.Run("timeline-as-changes", func(t *testing.T) { checkUITimeline(t, c, b, s, viewer, o) })
	t.Run("diff-and-blame", func(t *testing.T) { checkUIDiffBlame(t, b, s, o) })
	t.Run("restore-refused", func(t *testing.T) {
		b.Do(t, "the restore preview as the viewer",
			chromedp.Navigate(s.URL+objectRoute(o.key, o.blue, "restore")),
			WaitFor(`document.querySelector('[data-test=restore-verdict]')`))
		verdict := Eval[string](t, b, `document.querySelector('[data-test=restore-verdict]').dataset.verdict`)
		reason := Eval[string](t, b, `(document.querySelector('[data-test=restore-reason]') || {}).textContent || ''`)
		confirm := Eval[bool](t, b, `!!document.querySelector('[data-test=restore-confirm]')`)
		want := `User "ui-viewer" cannot create resource "restores"`
		if verdict != "refused" || !strings.Contains(reason, want) || confirm {
			t.Errorf("the viewer's restore: verdict %q, reason %q, a confirm button: %t; want refused with kube-apiserver's %q", verdict, reason, confirm, want)
		}
	})
	t.Run("inert-payloads", func(t *testing.T) { checkUIInert(t, b, s, o) })

	t.Run("restore-done", func(t *testing.T) {
		s := c.StartUI(t, editor.Kubeconfig)
		b := NewBrowser(t)
		b.Do(t, "the restore preview as the editor",
			chromedp.Navigate(s.URL+objectRoute(o.key, o.blue, "restore")),
			WaitFor(`document.querySelector('[data-test=restore-verdict]')`))
		verdict := Eval[string](t, b, `document.querySelector('[data-test=restore-verdict]').dataset.verdict`)
		reason := Eval[string](t, b, `document.querySelector('[data-test=restore-verdict]').textContent`)
		if verdict != "accepted" {
			t.Fatalf("the editor's restore preview: %q %q, want accepted", verdict, reason)
		}
		b.Screenshot(t, "ui-restore")
		b.Do(t, "confirm the restore",
			chromedp.Click(`[data-test=restore-confirm]`),
			WaitFor(`document.querySelector('[data-test=restore-done]') || document.querySelector('[data-test=restore-result] [data-test=restore-verdict]')`))
		newRev := Eval[string](t, b, `(document.querySelector('[data-test=restore-done]') || {dataset: {}}).dataset.newRevision || document.querySelector('[data-test=restore-result]').textContent`)
		if n, err := strconv.ParseInt(newRev, 10, 64); err != nil || n <= o.red {
			t.Fatalf("the restore from the page: %q, want a new revision past %d", newRev, o.red)
		}
		cm, err := c.Kube.CoreV1().ConfigMaps(o.ns).Get(c.Ctx(t), "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["color"] != "blue" || string(cm.UID) != o.uid {
			t.Errorf("after the page's restore: color %q uid %s, want blue and the uid it had, %s", cm.Data["color"], cm.UID, o.uid)
		}
	})
}

// objectRoute is the page's route to key at rev (from the revision
// before, a), in view ("" the diff).
func objectRoute(key string, rev int64, view string) string {
	r := "#/object?key=" + key + "&rev=" + strconv.FormatInt(rev, 10)
	if view != "" {
		r += "&view=" + view
	}
	return r
}

// checkUITimeline: the viewer's timeline of the window holds exactly the
// changes kubectl quanty changes lists for them: nothing of the Secret
// nor of the other namespace.
func checkUITimeline(t *testing.T, c *Cluster, b *Browser, s *UISession, viewer *User, o uiObjects) {
	out := c.Shell(t, viewer.Kubeconfig, "", "quanty", "changes", "-A", "--since", iso(o.from), "--until", iso(o.to), "-o", "json")
	if out.Code != 0 {
		t.Fatalf("kubectl quanty changes as the viewer: %s", out)
	}
	var listed struct {
		Changes []struct {
			Revision int64  `json:"revision"`
			Type     string `json:"type"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out.Stdout), &listed); err != nil {
		t.Fatalf("kubectl quanty changes -o json: %v\n%s", err, out.Stdout)
	}
	var want []string
	for _, ch := range listed.Changes {
		want = append(want, strconv.FormatInt(ch.Revision, 10))
	}
	slices.Sort(want)
	for _, r := range []int64{o.blue, o.red} {
		if !slices.Contains(want, strconv.FormatInt(r, 10)) {
			t.Fatalf("kubectl quanty changes as the viewer does not list revision %d of the ConfigMap:\n%s", r, out.Stdout)
		}
	}
	b.Do(t, "the timeline",
		chromedp.Navigate(s.URL+"#/timeline?from="+iso(o.from)+"&to="+iso(o.to)),
		WaitFor(`(() => { const s = document.querySelector('[data-test=timeline-status]');
			return document.querySelector('[data-test=error]') || (s && /changes?$/.test(s.textContent)); })()`))
	errs := texts(t, b, `[data-test=error]`)
	got := Eval[[]string](t, b, `[...document.querySelectorAll('[data-test=timeline-entry]')].map(e => e.dataset.revision)`)
	objects := texts(t, b, `[data-test=timeline-object]`)
	if len(errs) > 0 {
		t.Fatalf("the timeline shows errors: %q", errs)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the viewer's timeline shows revisions %v, kubectl quanty changes %v", got, want)
	}
	for _, r := range []int64{o.secretRev, o.elseRev} {
		if slices.Contains(got, strconv.FormatInt(r, 10)) {
			t.Errorf("the viewer's timeline shows revision %d (the Secret, or the other namespace)", r)
		}
	}
	for _, obj := range objects {
		if strings.HasPrefix(obj, "secret/") {
			t.Errorf("the viewer's timeline shows %s", obj)
		}
	}
	b.Screenshot(t, "ui-timeline")
}

// checkUIDiffBlame: the diff of the edited ConfigMap marks data.color
// changed (and size not), and its blame names ops-bot for it.
func checkUIDiffBlame(t *testing.T, b *Browser, s *UISession, o uiObjects) {
	b.Do(t, "the diff",
		chromedp.Navigate(s.URL+objectRoute(o.key, o.red, "")+"&a="+strconv.FormatInt(o.blue, 10)),
		WaitFor(`document.querySelector('[data-test=diff-row]') || document.querySelector('[data-test=error]')`))
	changed := Eval[[]string](t, b, `[...document.querySelectorAll('[data-test=diff-row][data-changed=true]')].map(e => e.dataset.field)`)
	same := Eval[[]string](t, b, `[...document.querySelectorAll('[data-test=diff-row][data-changed=false]')].map(e => e.dataset.field)`)
	if !slices.ContainsFunc(changed, func(f string) bool { return strings.HasSuffix(f, "color") }) ||
		slices.ContainsFunc(changed, func(f string) bool { return strings.HasSuffix(f, "size") }) {
		t.Errorf("the diff of revisions %d and %d marks %q changed (and %q not), want data.color and not data.size", o.blue, o.red, changed, same)
	}
	b.Screenshot(t, "ui-diff")
	b.Do(t, "the blame",
		chromedp.Navigate(s.URL+objectRoute(o.key, o.red, "blame")),
		WaitFor(`document.querySelector('[data-test=blame-row]') || document.querySelector('[data-test=error]')`))
	fields := Eval[[]string](t, b, `[...document.querySelectorAll('[data-test=blame-row]')].map(e => e.dataset.field)`)
	managers := texts(t, b, `[data-test=blame-row] [data-test=blame-manager]`)
	i := slices.IndexFunc(fields, func(f string) bool { return strings.HasSuffix(f, "color") })
	if i < 0 || i >= len(managers) || strings.TrimSpace(managers[i]) != "ops-bot" {
		t.Errorf("the blame's fields %q and managers %q: want data.color set by ops-bot", fields, managers)
	}
	j := slices.IndexFunc(fields, func(f string) bool { return strings.HasSuffix(f, "size") })
	if j < 0 || j >= len(managers) || strings.TrimSpace(managers[j]) != "ui-setup" {
		t.Errorf("the blame's fields %q and managers %q: want data.size set by ui-setup", fields, managers)
	}
}

// checkUIInert: the payloads show as text in the timeline, the object and
// its blame; no dialog opens and nothing is requested but from the proxy.
func checkUIInert(t *testing.T, b *Browser, s *UISession, o uiObjects) {
	before := len(b.Requests())
	for _, view := range []string{"#/timeline?from=" + iso(o.from) + "&to=" + iso(o.to), "#/object?key=" + o.xssKey, "#/object?key=" + o.xssKey + "&view=blame"} {
		b.Do(t, "the payloads in "+view,
			chromedp.Navigate(s.URL+view),
			WaitFor(`document.body.innerText.includes('onerror=alert') || document.querySelector('[data-test=error]')`))
		if n := Eval[int](t, b, `document.querySelectorAll('a[href^="javascript:" i], [onerror], [onclick]').length`); n != 0 {
			t.Errorf("%s: %d elements with a javascript: link or an event attribute", view, n)
		}
		imgs := Eval[int](t, b, `document.querySelectorAll('img').length`)
		scripts := Eval[int](t, b, `document.querySelectorAll('script').length`)
		if errs := texts(t, b, `[data-test=error]`); len(errs) > 0 {
			t.Errorf("%s shows errors: %q", view, errs)
		}
		if imgs != 0 || scripts != 1 {
			t.Errorf("%s: %d img and %d script elements, want none but the page's one script", view, imgs, scripts)
		}
	}
	if d := b.Dialogs(); len(d) != 0 {
		t.Errorf("the payloads opened dialogs: %q", d)
	}
	for _, r := range b.Requests()[before:] {
		_, u, _ := strings.Cut(r, " ")
		// The proxy, its session's paths or (the browser's own favicon.ico)
		// its 404.
		if !strings.HasPrefix(u, s.Origin+"/") {
			t.Errorf("the page requested %s, not from the proxy", r)
		}
	}
}

// checkUIProxy: the page's answer carries its Content-Security-Policy; a
// request without the token, or from another origin, is refused, and so
// is a script of another origin in the same browser.
func checkUIProxy(t *testing.T, s *UISession) {
	get := func(method, url string, h ...string) (int, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header
	}
	code, h := get("GET", s.URL)
	csp := h.Get("Content-Security-Policy")
	if code != 200 || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("the page: %d, Content-Security-Policy %q; want 200 with the page's own scripts only", code, csp)
	}
	restores := s.Origin + "/s/" + s.Token + apiBase + "/restores"
	for _, c := range []struct {
		what, method, url string
		h                 []string
		want              int
	}{
		{"without the token", "GET", s.Origin + apiBase + "/ui/", nil, 404},
		{"with another token", "GET", strings.Replace(s.URL, s.Token, strings.Repeat("x", len(s.Token)), 1), nil, 404},
		{"from another origin", "GET", s.URL, []string{"Origin", "http://evil.example"}, 403},
		{"a restore from another origin", "POST", restores, []string{"Origin", "http://evil.example", "X-Quanty-UI", "1"}, 403},
		{"a restore without the page's header", "POST", restores, []string{"Origin", s.Origin}, 403},
		{"outside the group", "GET", s.Origin + "/s/" + s.Token + "/api/v1/secrets", nil, 403},
	} {
		if code, _ := get(c.method, c.url, c.h...); code != c.want {
			t.Errorf("a request %s: %d, want %d", c.what, code, c.want)
		}
	}
	// A page of another origin in the same browser that knows the URL: its
	// fetch with the page's header needs a preflight, which is refused.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><script>
fetch(%q, {method: 'POST', headers: {'X-Quanty-UI': '1', 'Content-Type': 'application/json'}, body: '{}'})
  .then(r => { document.title = 'sent ' + r.status; }, e => { document.title = 'refused'; });
</script>`, restores)
	}))
	defer other.Close()
	b := NewBrowser(t)
	b.Do(t, "another origin's script",
		chromedp.Navigate(other.URL),
		WaitFor(`document.title !== ''`))
	title := Eval[string](t, b, `document.title`)
	if title != "refused" {
		t.Errorf("another origin's fetch of the proxy: %q, want refused", title)
	}
}
