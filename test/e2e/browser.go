package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium, which .ci/run installs; QUANTY_CHROMIUM
// names another.
func chromiumPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("QUANTY_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(p); err != nil {
		t.Fatalf("the web page's checks need Chromium: %s: %v (apt-get install chromium; .ci/run installs it)", p, err)
	}
	return p
}

// docUI is docs/KUBECTL-QUANTY.md's command line of the web page, which
// StartUI runs.
const docUI = "kubectl quanty ui --no-browser"

// UISession is kubectl quanty ui --no-browser, run as a user through
// kubectl as a person runs it, until the check ends.
type UISession struct {
	// URL is the page's URL it printed; Origin the proxy's.
	URL, Origin, Token string
	stderr             *lockedBuf
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartUI runs kubectl quanty ui --no-browser (docs/KUBECTL-QUANTY.md's
// command line) with kubeconfig (the admin's when empty) and reads the
// URL it prints. At the end of the check it is interrupted, as Ctrl+C
// does, and must end with status 0 and without the token on its standard
// error.
func (c *Cluster) StartUI(t *testing.T, kubeconfig string) *UISession {
	t.Helper()
	cmd := exec.Command(c.kubectl, strings.Fields(strings.TrimPrefix(docUI, "kubectl "))...)
	cmd.Env = c.shellEnv(t, kubeconfig)
	s := &UISession{stderr: &lockedBuf{}}
	cmd.Stderr = s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubectl quanty ui: %v", err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	done := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("kubectl quanty ui ended with %v after SIGINT; stderr:\n%s", err, s.stderr)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("kubectl quanty ui did not end within 30 s of SIGINT; stderr:\n%s", s.stderr)
		}
		if s.Token != "" && strings.Contains(s.stderr.String(), s.Token) {
			t.Errorf("kubectl quanty ui wrote its token on standard error:\n%s", s.stderr)
		}
	})
	select {
	case s.URL = <-line:
	case <-time.After(time.Minute):
		t.Fatalf("kubectl quanty ui printed no URL within a minute; stderr:\n%s", s.stderr)
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.Scheme != "http" || !strings.HasPrefix(u.Path, "/s/") || !strings.HasSuffix(u.Path, apiBase+"/ui/") {
		t.Fatalf("kubectl quanty ui printed %q, want http://127.0.0.1:PORT/s/TOKEN%s/ui/; stderr:\n%s", s.URL, apiBase, s.stderr)
	}
	s.Origin = u.Scheme + "://" + u.Host
	s.Token, _, _ = strings.Cut(strings.TrimPrefix(u.Path, "/s/"), "/")
	return s
}

// Browser is a headless Chromium tab that records every request it sends
// and every JavaScript dialog a page opens (and dismisses it).
type Browser struct {
	ctx      context.Context
	mu       sync.Mutex
	requests []string
	dialogs  []string
}

// NewBrowser starts Debian's Chromium headless, as root may run it: no
// sandbox, and none of its background connections (updates, sync, Google's
// hosts), which this machine's closed network refuses. It ends with the
// check.
func NewBrowser(t *testing.T) *Browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium")),
		chromedp.WindowSize(1280, 860),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &Browser{}
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.mu.Lock()
			b.requests = append(b.requests, ev.Request.Method+" "+ev.Request.URL)
			b.mu.Unlock()
		case *page.EventJavascriptDialogOpening:
			b.mu.Lock()
			b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
			b.mu.Unlock()
			go func() {
				_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		}
	}))
	b.ctx = ctx
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium (%s): %v", chromiumPath(t), err)
	}
	return b
}

// Do runs steps in the tab, bounded; a failure fails t with what the page
// shows.
func (b *Browser) Do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v\nthe page shows:\n%s", what, err, Eval[string](t, b, `document.body ? document.body.innerText : ''`))
	}
}

// Eval is the value of a JavaScript expression in the tab.
func Eval[T any](t *testing.T, b *Browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Requests and Dialogs are what the tab sent and opened so far.
func (b *Browser) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// WaitFor polls until the JavaScript expression cond is true.
func WaitFor(cond string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[any](cond, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, tg)
		return chromedp.Void{}, err
	}
}

// Screenshot writes the tab's page as dir/name.png when
// QUANTY_UI_SCREENSHOTS names dir (the docs' pictures: docs/images).
func (b *Browser) Screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("QUANTY_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

// texts is the text of every element that matches sel.
func texts(t *testing.T, b *Browser, sel string) []string {
	t.Helper()
	return Eval[[]string](t, b, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(e => e.textContent)`, sel))
}
