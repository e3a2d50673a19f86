package ui_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/ui"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
)

// upstream stands in for kube-apiserver: it records each request it gets
// and answers with a challenge and a cookie the proxy must not pass on.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, r)
		u.body = append(u.body, string(b))
		u.mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/hangup") {
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="kubernetes"`)
		w.Header().Set("Set-Cookie", "a=b")
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.reqs...)
}

// kubeconfig names server, whose certificate is ca's (client-go sends
// credentials over TLS only), with a bearer token.
func kubeconfig(t *testing.T, server string, ca *x509.Certificate) string {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "s3cret"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// lockedBuffer is standard error, written by the proxy's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// session is a running kubectl quanty ui.
type session struct {
	url    *url.URL
	token  string
	errOut *lockedBuffer
	stop   func() int
}

// fakeBrowser puts an xdg-open first on PATH that records its arguments
// in the file it returns and exits with code.
func fakeBrowser(t *testing.T, code string) string {
	if runtime.GOOS != "linux" {
		t.Skip("the browser is opened by xdg-open on Linux only")
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "opened")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + rec + ".tmp && mv " + rec + ".tmp " + rec + "\nexit " + code + "\n"
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return rec
}

// start runs kubectl quanty ui ARGS until the test ends, and reads the URL
// it prints.
func start(t *testing.T, args ...string) *session {
	t.Helper()
	pr, pw := io.Pipe()
	errOut := &lockedBuffer{}
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: pw, ErrOut: errOut}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- util.Execute(ctx, cmd.NewCmdQuanty(util.NewFactory(), streams, "test"), append([]string{"ui"}, args...))
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("kubectl quanty ui printed no URL (%v); stderr:\n%s", err, errOut)
	}
	go io.Copy(io.Discard, pr)
	u, err := url.Parse(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("kubectl quanty ui printed %q: %v", line, err)
	}
	token, ok := strings.CutPrefix(u.Path, "/s/")
	token, page, _ := strings.Cut(token, "/")
	if !ok || "/"+page != ui.Page || u.Hostname() != "127.0.0.1" {
		t.Fatalf("kubectl quanty ui printed %q, want http://127.0.0.1:PORT/s/TOKEN%s", line, ui.Page)
	}
	s := &session{url: u, token: token, errOut: errOut}
	var once sync.Once
	var code int
	s.stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	t.Cleanup(func() { s.stop() })
	return s
}

// do sends method path (after the host) with Host host and headers.
func (s *session) do(t *testing.T, method, path, host string, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.url.Host+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestProxyForwardsWithTheKubeconfigsCredentials(t *testing.T) {
	up := newUpstream(t)
	opened := fakeBrowser(t, "0")
	s := start(t, "--kubeconfig", kubeconfig(t, up.URL+"/prefix", up.Certificate()), "--as", "alice")

	page := "/s/" + s.token + ui.Page + "changes?since=1h"
	code, h, body := s.do(t, "GET", page, "", "", "Cookie", "session=browser", "Authorization", "Bearer browser",
		"Impersonate-User", "admin", "Referer", s.url.String(), "Accept", "text/html")
	if code != 200 || body != "upstream /prefix"+ui.Page+"changes" {
		t.Fatalf("GET the page: %d %q, want 200 from kube-apiserver at /prefix%schanges", code, body, ui.Page)
	}
	for _, k := range []string{"WWW-Authenticate", "Set-Cookie"} {
		if h.Get(k) != "" {
			t.Errorf("kube-apiserver's %s reached the browser: %q", k, h.Get(k))
		}
	}
	if h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" {
		t.Errorf("the proxy's answer has Referrer-Policy %q, X-Frame-Options %q", h.Get("Referrer-Policy"), h.Get("X-Frame-Options"))
	}
	r := up.requests()[0]
	if got := r.Header.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("forwarded Authorization %q, want the kubeconfig's token", got)
	}
	if got := r.Header.Values("Impersonate-User"); len(got) != 1 || got[0] != "alice" {
		t.Errorf("forwarded Impersonate-User %q, want --as's alice alone", got)
	}
	for _, k := range []string{"Cookie", "Referer", "Origin", ui.Header} {
		if r.Header.Get(k) != "" {
			t.Errorf("the browser's %s was forwarded: %q", k, r.Header.Get(k))
		}
	}
	if r.URL.RawQuery != "since=1h" || r.Header.Get("Accept") != "text/html" {
		t.Errorf("forwarded query %q, Accept %q", r.URL.RawQuery, r.Header.Get("Accept"))
	}

	// The browser was opened on the URL printed.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, err := os.ReadFile(opened)
		if err == nil {
			if strings.TrimSpace(string(got)) != s.url.String() {
				t.Errorf("xdg-open was given %q, want %q", got, s.url)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("xdg-open was not run")
		}
	}

	// Each loopback name of the proxy, with the proxy's own origin on a
	// POST that carries the page's header.
	_, port, _ := net.SplitHostPort(s.url.Host)
	for _, host := range []string{"localhost:" + port, "[::1]:" + port, "LOCALHOST:" + port} {
		if code, _, body := s.do(t, "GET", page, host, ""); code != 200 {
			t.Errorf("GET with Host %s: %d %s", host, code, body)
		}
	}
	if code, _, body := s.do(t, "POST", "/s/"+s.token+ui.Group+"v1alpha1/restores", "", "{}", ui.Header, "1", "Origin", "http://"+s.url.Host); code != 200 {
		t.Errorf("POST with the header from the proxy's origin: %d %s", code, body)
	}
	if got := up.body[len(up.body)-1]; got != "{}" {
		t.Errorf("the POST's body reached kube-apiserver as %q", got)
	}

	// kube-apiserver that hangs up: a 502 and a message without the token.
	if code, _, _ := s.do(t, "GET", "/s/"+s.token+ui.Group+"hangup", "", ""); code != http.StatusBadGateway {
		t.Errorf("kube-apiserver hung up: %d, want 502", code)
	}
	if code := s.stop(); code != 0 {
		t.Errorf("kubectl quanty ui ended with %d at the interrupt; stderr:\n%s", code, s.errOut)
	}
	if strings.Contains(s.errOut.String(), s.token) {
		t.Errorf("the token is on standard error:\n%s", s.errOut)
	}
}

func TestProxyRefuses(t *testing.T) {
	up := newUpstream(t)
	fakeBrowser(t, "0")
	s := start(t, "--kubeconfig", kubeconfig(t, up.URL, up.Certificate()), "--no-browser")
	_, port, _ := net.SplitHostPort(s.url.Host)
	other := strings.Repeat("A", len(s.token))
	in := "/s/" + s.token
	for _, c := range []struct {
		name, method, path, host string
		code                     int
		headers                  []string
	}{
		{"no token", "GET", ui.Page, "", 404, nil},
		{"another token", "GET", "/s/" + other + ui.Page, "", 404, nil},
		{"the token's prefix", "GET", "/s/" + s.token[:20] + ui.Page, "", 404, nil},
		{"the token in a query", "GET", ui.Page + "?s=" + s.token, "", 404, nil},
		{"another site's name (DNS rebinding)", "GET", in + ui.Page, "evil.example:" + port, 403, nil},
		{"another port", "GET", in + ui.Page, "127.0.0.1:1", 403, nil},
		{"no Host", "GET", in + ui.Page, " ", 403, nil},
		{"a foreign Origin", "GET", in + ui.Page, "", 403, []string{"Origin", "http://evil.example"}},
		{"an Origin of another port", "GET", in + ui.Page, "", 403, []string{"Origin", "http://127.0.0.1:1"}},
		{"the proxy's name but another scheme", "GET", in + ui.Page, "", 403, []string{"Origin", "https://" + s.url.Host}},
		{"a POST without the header", "POST", in + ui.Group + "v1alpha1/restores", "", 403, nil},
		{"a POST with another value", "POST", in + ui.Group + "v1alpha1/restores", "", 403, []string{ui.Header, "0"}},
		{"a DELETE without the header", "DELETE", in + ui.Page, "", 403, nil},
		{"a POST from a foreign Origin", "POST", in + ui.Group + "v1alpha1/restores", "", 403, []string{ui.Header, "1", "Origin", "http://evil.example"}},
		{"a preflight", "OPTIONS", in + ui.Group + "v1alpha1/restores", "", 403, []string{"Origin", "http://evil.example"}},
		{"the core API", "GET", in + "/api/v1/secrets", "", 403, nil},
		{"another group", "GET", in + "/apis/apps/v1/deployments", "", 403, nil},
		{"a group named alike", "GET", in + "/apis/quanty.quantyroot.io.evil/v1", "", 403, nil},
		{"the group's root", "GET", in + "/apis/quanty.quantyroot.io", "", 403, nil},
		{"out by ..", "GET", in + ui.Group + "../../api/v1/secrets", "", 403, nil},
		{"out by an escaped ..", "GET", in + ui.Group + "%2e%2e/%2E%2E/api/v1/secrets", "", 403, nil},
		{"out by an escaped slash", "GET", in + ui.Group + "..%2F..%2Fapi/v1/secrets", "", 403, nil},
		{"an empty segment", "GET", in + ui.Group + "/v1alpha1", "", 403, nil},
		{"a protocol upgrade", "GET", in + ui.Page, "", 403, []string{"Connection", "Upgrade", "Upgrade", "websocket"}},
	} {
		host := c.host
		code, _, body := s.do(t, c.method, c.path, host, "", c.headers...)
		if code != c.code {
			t.Errorf("%s: %d %q, want %d", c.name, code, body, c.code)
		}
		if strings.Contains(body, s.token) {
			t.Errorf("%s: the answer holds the token: %q", c.name, body)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("%d refused requests reached kube-apiserver: %v", n, up.requests()[0].URL)
	}
}

func TestBrowserFailureIsAMessage(t *testing.T) {
	up := newUpstream(t)
	opened := fakeBrowser(t, "3")
	s := start(t, "--kubeconfig", kubeconfig(t, up.URL, up.Certificate()))
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(s.errOut.String(), "Could not open a browser"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no message that the browser failed; stderr:\n%s", s.errOut)
		}
	}
	if _, err := os.Stat(opened); err != nil {
		t.Errorf("xdg-open was not run: %v", err)
	}
	if code, _, _ := s.do(t, "GET", "/s/"+s.token+ui.Page, "", ""); code != 200 {
		t.Errorf("after the browser failed, the page answers %d", code)
	}
	if code := s.stop(); code != 0 {
		t.Errorf("kubectl quanty ui ended with %d; stderr:\n%s", code, s.errOut)
	}
}

func TestFlagsRefused(t *testing.T) {
	kc := kubeconfig(t, "https://127.0.0.1:1", newUpstream(t).Certificate())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--address", "0.0.0.0"}, `--address "0.0.0.0": not a loopback address`},
		{[]string{"--address", "192.0.2.1"}, `--address "192.0.2.1": not a loopback address`},
		{[]string{"--address", "example.com"}, `not a loopback address`},
		{[]string{"--port", "70000"}, "--port 70000: not a port"},
		{[]string{"extra"}, `unknown command "extra"`},
	} {
		var out, errOut bytes.Buffer
		streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
		code := util.Execute(context.Background(), cmd.NewCmdQuanty(util.NewFactory(), streams, "test"), append([]string{"ui", "--kubeconfig", kc}, c.args...))
		if code == 0 || !strings.Contains(errOut.String(), c.want) || out.Len() != 0 {
			t.Errorf("ui %q: exit %d, stdout %q, stderr %q; want a failure saying %q", c.args, code, out.String(), errOut.String(), c.want)
		}
	}
}

func TestTokens(t *testing.T) {
	a, err := ui.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ui.NewToken()
	if len(a) != 43 || a == b || strings.ContainsAny(a, "+/=") {
		t.Errorf("tokens %q and %q: want two different 43-character URL-safe base64 strings of 32 bytes", a, b)
	}
}
