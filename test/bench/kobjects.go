package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
)

// Kubernetes objects as kube-apiserver stores them, for the scale and
// tenants workloads: core/v1 objects through apimachinery's protobuf
// serializer (the "k8s\x00" envelope, runtime.Unknown around the object),
// under kube-apiserver's keys. Values are what kube-apiserver would read
// back, so it serves them; their data is base64 of random bytes, so that
// no store is flattered by compressing it.

var (
	objScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		if err := corev1.AddToScheme(s); err != nil {
			panic(err)
		}
		return s
	}()
	objCodec = protobuf.NewSerializer(objScheme, objScheme)
)

func configMapKey(ns, name string) string { return "/registry/configmaps/" + ns + "/" + name }
func namespaceKey(ns string) string       { return "/registry/namespaces/" + ns }

// objectTime is every object's creation time: fixed, so that an object's
// size does not depend on when the run started.
var objectTime = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// objectUID is a UUID-shaped uid derived from seed.
func objectUID(seed uint64) types.UID {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], seed)
	binary.BigEndian.PutUint64(b[8:], seed*0x9e3779b97f4a7c15)
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// encodeObject is obj in kube-apiserver's storage encoding.
func encodeObject(obj runtime.Object) ([]byte, error) {
	var b bytes.Buffer
	if err := objCodec.Encode(obj, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeObject reads a stored value back (the tests check the round trip).
func decodeObject(b []byte) (runtime.Object, error) {
	obj, _, err := objCodec.Decode(b, nil, nil)
	return obj, err
}

// namespaceObject is an active namespace as kube-apiserver stores it.
func namespaceObject(ns string, seed uint64) ([]byte, error) {
	return encodeObject(&corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: ns, UID: objectUID(seed), CreationTimestamp: objectTime,
			Labels: map[string]string{"kubernetes.io/metadata.name": ns}},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	})
}

// configMaps encodes ConfigMaps of about size bytes each: the random
// payload is sized from an object's overhead without names, less its
// names' lengths.
type configMaps struct {
	size     int
	overhead int // an object's bytes with empty names and payload
}

func newConfigMaps(size int) (*configMaps, error) {
	c := &configMaps{size: size}
	empty, err := c.encodeSized("", "", 0, 0, 0)
	if err != nil {
		return nil, err
	}
	c.overhead = len(empty)
	return c, nil
}

// payload is the length of ns/name's payload. Two bytes more of length
// prefixes (the payload's and its map entry's) come with a payload of 128
// bytes or more.
func (c *configMaps) payload(ns, name string) int {
	return max(c.size-c.overhead-len(ns)-len(name)-2, 0)
}

// encode is ConfigMap ns/name at its version (0 when created); seed makes
// its uid and, with version, its payload.
func (c *configMaps) encode(ns, name string, seed uint64, version int) ([]byte, error) {
	return c.encodeSized(ns, name, seed, version, c.payload(ns, name))
}

func (c *configMaps) encodeSized(ns, name string, seed uint64, version, payload int) ([]byte, error) {
	return encodeObject(&corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: objectUID(seed), CreationTimestamp: objectTime,
			Labels: map[string]string{"app": "bench-scale"}},
		Data: map[string]string{"payload": randomText(payload, seed, uint64(version))},
	})
}

// randomText is n characters of base64 of random bytes from (seed, stream).
func randomText(n int, seed, stream uint64) string {
	if n == 0 {
		return ""
	}
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], stream)
	raw := make([]byte, n*3/4+3)
	rand.NewChaCha8(key).Read(raw)
	return base64.RawStdEncoding.EncodeToString(raw)[:n]
}

// listAll lists resource (e.g. "/api/v1/configmaps") through kube-apiserver
// in chunks of limit, as `kubectl get -A --chunk-size=N` does (the Table
// form kubectl asks for), and returns the rows and chunks it got.
func (a *apiserver) listAll(ctx context.Context, resource string, limit int, chunkTimeout time.Duration) (rows, chunks int, err error) {
	client := &http.Client{Transport: a.client.Transport}
	cont := ""
	for {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		page, err := a.listChunk(ctx, client, resource+"?"+q.Encode(), chunkTimeout)
		if err != nil {
			return rows, chunks, fmt.Errorf("list %s, chunk %d: %w", resource, chunks+1, err)
		}
		rows += len(page.Rows) + len(page.Items)
		chunks++
		if cont = page.Metadata.Continue; cont == "" {
			return rows, chunks, nil
		}
	}
}

// listPage is what the harness reads of a Table (or, if kube-apiserver
// answers with a plain list, of that).
type listPage struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Rows  []json.RawMessage `json:"rows"`
	Items []json.RawMessage `json:"items"`
}

// tableAccept is kubectl get's Accept header.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

func (a *apiserver) listChunk(ctx context.Context, client *http.Client, path string, timeout time.Duration) (*listPage, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", tableAccept)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		if len(body) > 300 {
			body = body[:300]
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var page listPage
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// rssSampler reads the summed VmRSS of some processes every interval and
// keeps the highest sum of each phase and the last sum read.
type rssSampler struct {
	pids  []int
	mu    sync.Mutex
	phase string
	peaks map[string]int64
	last  int64
	errs  int // readings that failed (a process gone)
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// rssInterval is how often the sampler reads /proc.
const rssInterval = 250 * time.Millisecond

func startSampler(pids []int, phase string) *rssSampler {
	s := &rssSampler{pids: pids, phase: phase, peaks: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

// sample reads the processes' RSS once and returns the sum.
func (s *rssSampler) sample() int64 {
	var sum int64
	failed := false
	for _, pid := range s.pids {
		m, err := readMemory(pid)
		if err != nil {
			failed = true
			continue
		}
		sum += m.rss
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if failed {
		s.errs++
		return sum
	}
	s.peaks[s.phase] = max(s.peaks[s.phase], sum)
	s.last = sum
	return sum
}

// enter starts phase: later samples count toward its peak.
func (s *rssSampler) enter(phase string) {
	s.sample()
	s.mu.Lock()
	s.phase = phase
	s.mu.Unlock()
	s.sample()
}

// peak is phase's highest sum so far.
func (s *rssSampler) peak(phase string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peaks[phase]
}

// finish stops sampling (once) after one last reading, which it returns.
func (s *rssSampler) finish() int64 {
	s.once.Do(func() { close(s.stop); <-s.done })
	return s.sample()
}
