// Package ui is the web page of the aggregated API (ADR-047): a timeline
// of the cluster's changes, an object's revisions, diffs and blame,
// deleted objects, and restores, served under
// /apis/quanty.quantyroot.io/v1alpha1/ui/ so that kube-apiserver
// authenticates and authorizes whoever opens it. The page is plain ES
// modules and CSS embedded in the binary (no build step, nothing fetched
// from elsewhere); it is a client of the same endpoints the kubectl plugin
// uses, so every answer is filtered as its caller.
package ui

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// CSP allows the page's own scripts, styles and requests and nothing
// else: no inline script or style, no other origin, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Header is the request header the page sends with every state-changing
// request; the server refuses a restore that a browser sent without it.
const Header = "X-Quanty-UI"

// JSONType is the media type the page asks for (Accept): the History
// messages in JSON, each value decoded to its object. Plain
// application/json does not do: kubectl get --raw asks for it (with */*)
// and reads the protobuf it is given.
const JSONType = "application/json;as=decoded"

// UndecodedProblem is the problem the server gives a value it sends as
// stored (base64, in "value"), not decoded: the server links no API type
// (ADR-047), and `kubectl quanty ui`'s proxy decodes such values on their
// way to the page. The page shows it when opened some other way.
const UndecodedProblem = "not decoded: this server sends values as stored, and kubectl quanty ui decodes them; open the page with it"

// file is one asset, read once.
type file struct {
	body        []byte
	contentType string
}

// files maps a name under ui/ to its asset; "" is the page.
var files = func() map[string]file {
	m := map[string]file{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "assets/")
		ct := mime.TypeByExtension(path.Ext(name))
		switch path.Ext(name) {
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		m[name] = file{b, ct}
		return nil
	})
	if err != nil {
		panic("ui: reading the embedded assets: " + err.Error())
	}
	m[""] = m["index.html"]
	delete(m, "index.html")
	return m
}()

// Names lists the assets' names under ui/ ("" is the page), for tests.
func Names() []string {
	var n []string
	for k := range files {
		n = append(n, k)
	}
	return n
}

// Asset is the embedded file served at ui/name.
func Asset(name string) ([]byte, bool) {
	f, ok := files[name]
	return f.body, ok
}

// SetHeaders sets the headers every answer under ui/ carries, errors
// included: the CSP, no MIME sniffing, no Referer (URLs name objects).
func SetHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// Serve answers a GET of ui/name with its asset, or false when there is
// none (no directory is listed: only the embedded files' own names
// answer). The page itself is never cached, so that a new binary's page
// is what the next load gets; its scripts and styles are revalidated
// after an hour, since their names carry no version.
func Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	f, ok := files[name]
	if !ok {
		return false
	}
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Type", f.contentType)
	if name == "" {
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Cache-Control", "private, max-age=3600")
	}
	if r.Method == http.MethodHead {
		return true
	}
	_, _ = w.Write(f.body)
	return true
}
