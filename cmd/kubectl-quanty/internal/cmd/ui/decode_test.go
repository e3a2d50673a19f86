package ui_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/ui"
	apiui "github.com/quantyroot/quantykube/pkg/apiagg/ui"
)

// The server sends values as stored (ADR-047); the proxy decodes them on
// their way to the page: each undecoded value becomes its object, or why
// it is none, whatever compression the browser asked for; other fields,
// answers of other types and values the server did not mark are passed
// on as they came.
func TestProxyDecodesValues(t *testing.T) {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}, Data: map[string]string{"color": "blue"}}
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(cm, &pb); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	answer := fmt.Sprintf(`{"entries":[`+
		`{"revision":9007199254740993,"unixMs":1,"kv":{"key":"/registry/configmaps/ns/a","modRevision":9007199254740993,"value":%q,"problem":%q,"size":%d},"prevKv":{"key":"/plain","value":%q,"problem":%q,"size":5}},`+
		`{"revision":2,"kv":{"key":"/bad","value":"not base64!","problem":%q,"size":1}},`+
		`{"revision":3,"kv":{"key":"/other","value":"aGk=","problem":"something else","size":2}}],"headerRevision":5}`,
		b64(pb.Bytes()), apiui.UndecodedProblem, pb.Len(), b64([]byte("plain")), apiui.UndecodedProblem, apiui.UndecodedProblem)

	var gotEncoding []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotEncoding = append(gotEncoding, r.Header.Get("Accept-Encoding"))
		if strings.Contains(r.Header.Get("Accept"), "as=decoded") {
			w.Header().Set("Content-Type", apiui.JSONType)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, answer)
			zw.Close()
			return
		}
		io.WriteString(w, answer)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	var log bytes.Buffer
	srv := &http.Server{Handler: ui.NewProxy("tok", target, http.DefaultTransport.(*http.Transport).Clone(), "127.0.0.1", port, &log)}
	go srv.Serve(ln)
	defer srv.Close()

	get := func(accept string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/s/tok"+ui.Group+"v1alpha1/changes", nil)
		req.Header.Set("Accept", accept)
		req.Header.Set("Accept-Encoding", "gzip, br")
		// Without the transport's own gzip: what the browser asked for.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET as %s: %d %s (log: %s)", accept, resp.StatusCode, b, log.String())
		}
		return string(b), resp.Header.Get("Content-Encoding")
	}

	body, enc := get(apiui.JSONType)
	if enc != "" {
		t.Errorf("decoded answer in Content-Encoding %q", enc)
	}
	if !strings.Contains(body, `"revision":9007199254740993`) {
		t.Errorf("a revision past 2^53 was not kept exactly: %s", body)
	}
	type jsonKV struct {
		Object  map[string]any `json:"object"`
		Value   *string        `json:"value"`
		Problem string         `json:"problem"`
		Size    int            `json:"size"`
	}
	var got struct {
		Entries []struct {
			KV     *jsonKV `json:"kv"`
			PrevKV *jsonKV `json:"prevKv"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Entries) != 3 {
		t.Fatalf("the proxy's answer: %v\n%s", err, body)
	}
	kv := got.Entries[0].KV
	if data, _ := kv.Object["data"].(map[string]any); kv.Value != nil || kv.Problem != "" || kv.Object["kind"] != "ConfigMap" || data["color"] != "blue" || kv.Size != pb.Len() {
		t.Errorf("the ConfigMap's value: %+v, want its object alone", kv)
	}
	if p := got.Entries[0].PrevKV; p.Value != nil || p.Problem != "not a Kubernetes object" {
		t.Errorf("a value that is no object: %+v, want the reason alone", p)
	}
	if p := got.Entries[1].KV; p.Value != nil || !strings.HasPrefix(p.Problem, "a value that is not base64") {
		t.Errorf("a value that is not base64: %+v", p)
	}
	if p := got.Entries[2].KV; p.Value == nil || *p.Value != "aGk=" || p.Problem != "something else" {
		t.Errorf("a value the server did not mark undecoded was changed: %+v", p)
	}

	// protobuf or plain JSON (kubectl get --raw): passed on as it came,
	// in the encoding the browser asked for.
	raw, enc := get("application/json, */*")
	if enc != "gzip" {
		t.Errorf("an answer the proxy does not decode came in Content-Encoding %q, want the browser's gzip", enc)
	}
	zr, err := gzip.NewReader(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); string(b) != answer {
		t.Errorf("an answer the proxy does not decode was changed:\n%s\nwant\n%s", b, answer)
	}
	if len(gotEncoding) != 2 || gotEncoding[1] != "gzip, br" {
		t.Errorf("Accept-Encoding upstream %q, want the browser's forwarded where the proxy does not decode", gotEncoding)
	}
}
