// Package objstoretest starts a real S3-compatible server for tests:
// SeaweedFS (`weed server -s3`) on loopback, in a temporary directory,
// with a bucket made. Only tests import it: it adds nothing to a binary.
package objstoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// WeedEnv names the variable holding the path of SeaweedFS's weed binary,
// which the Makefile and .ci/run set from scripts/seaweedfs.sh.
const WeedEnv = "QUANTY_WEED"

// The identity the server knows besides anonymous requests, which it
// takes too.
const (
	AccessKey = "QUANTYTESTACCESSKEY"
	SecretKey = "quanty-test-secret-key-not-for-production"
	Bucket    = "quanty-test"
)

// Server is one running `weed server -s3`.
type Server struct {
	t     testing.TB
	bin   string
	dir   string
	ports [4]int // master, volume, filer, s3: each also +10000 for gRPC
	log   *os.File

	// iamConfig is the path of SeaweedFS's advanced IAM configuration
	// (STS, OIDC providers, roles), or "": see StartIAM.
	iamConfig string

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	bucketMade bool
}

// Weed returns the weed binary: $QUANTY_WEED, else the one
// scripts/seaweedfs.sh has cached. Without one the test is skipped, or
// fails under CI=true, where every skip is a failure.
func Weed(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(WeedEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", WeedEnv, p, err)
		}
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "../../../..")
	cached, _ := filepath.Glob(filepath.Join(root, ".cache/seaweedfs/*/bin/weed"))
	if len(cached) > 0 {
		return cached[len(cached)-1]
	}
	msg := fmt.Sprintf("SEAWEEDFS TESTS NOT RUN: no weed binary: set %s or run scripts/seaweedfs.sh (a few minutes, once)", WeedEnv)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Start starts SeaweedFS with its S3 gateway on free loopback ports and
// makes Bucket; the server stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, "")
}

// StartIAM starts SeaweedFS as Start does, but with the advanced IAM
// configuration iamConfig (JSON: "sts", "providers", "policies", "roles";
// weed/s3api's loadIAMManagerFromConfig reads it), which also serves STS
// (AssumeRoleWithWebIdentity) on the S3 port. Anonymous requests are
// refused: only AccessKey and the sessions STS issues are let in.
func StartIAM(t testing.TB, iamConfig string) *Server {
	t.Helper()
	return start(t, iamConfig)
}

func start(t testing.TB, iamConfig string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Weed(t), dir: t.TempDir()}
	s.ports = freePorts(t)
	anonymous := `{"name": "anonymous", "actions": ["Read", "Write", "List", "Tagging"]},`
	if iamConfig != "" {
		anonymous = ""
		s.iamConfig = filepath.Join(s.dir, "iam.json")
		if err := os.WriteFile(s.iamConfig, []byte(iamConfig), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`{"identities": [%s
  {"name": "quanty", "credentials": [{"accessKey": %q, "secretKey": %q}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
]}`, anonymous, AccessKey, SecretKey)
	if err := os.WriteFile(filepath.Join(s.dir, "s3.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(s.dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.log = log
	t.Cleanup(func() {
		s.Stop()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("weed server's log (its end):\n%s", b)
		}
	})
	s.Restart()
	s.makeBucket()
	return s
}

// freePorts picks four ports below 45535 that are free, with their gRPC
// ports (+10000).
func freePorts(t testing.TB) [4]int {
	var out [4]int
	used := map[int]bool{}
	for i := 0; i < len(out); {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p >= 45535 {
			p = 20000 + p%25000
		}
		if used[p] || used[p+10000] || !free(p) || !free(p+10000) {
			continue
		}
		used[p], used[p+10000] = true, true
		out[i] = p
		i++
	}
	return out
}

func free(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Endpoint is the S3 gateway's URL.
func (s *Server) Endpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", s.ports[3]) }

// URL is the objstore URL of prefix in Bucket.
func (s *Server) URL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1&force-path-style=true", Bucket, prefix, s.Endpoint())
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s), keeping its
// data for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Restart starts the server again on the same ports and data, and waits
// until its S3 gateway answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("objstoretest: Restart of a running server")
	}
	p := s.ports
	args := []string{"server",
		"-dir=" + s.dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		fmt.Sprintf("-master.port=%d", p[0]), fmt.Sprintf("-volume.port=%d", p[1]),
		fmt.Sprintf("-filer.port=%d", p[2]), fmt.Sprintf("-s3.port=%d", p[3]),
		"-filer", "-s3", "-s3.config=" + filepath.Join(s.dir, "s3.json"),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.localSocket=" + filepath.Join(s.dir, "s3.sock"),
		"-master.telemetry=false", "-master.volumeSizeLimitMB=256", "-volume.max=16",
	}
	if s.iamConfig != "" {
		args = append(args, "-s3.iam.config="+s.iamConfig)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("objstoretest: start %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	// Ready once an anonymous request reaches the gateway's handler and,
	// once the bucket is made, an object can be written: the master takes
	// a while to load its topology again after a restart.
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint() + "/")
		if err == nil {
			resp.Body.Close()
			if !s.bucketMade || s.probe() {
				return
			}
			err = fmt.Errorf("an anonymous PUT into %s fails", Bucket)
		}
		select {
		case <-done:
			s.t.Fatalf("objstoretest: weed server exited at start (%v); its log is %s", cmd.ProcessState, s.log.Name())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("objstoretest: weed server's S3 gateway not answering after 90s: %v", err)
		}
	}
}

// makeBucket makes Bucket with `weed shell`, retrying while the filer
// starts, and waits until the gateway takes an object in it.
func (s *Server) makeBucket() {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, s.bin, "shell",
			fmt.Sprintf("-master=127.0.0.1:%d", s.ports[0]),
			fmt.Sprintf("-filer=127.0.0.1:%d", s.ports[2]))
		cmd.Stdin = strings.NewReader("s3.bucket.create -name " + Bucket + "\nexit\n")
		out, err := cmd.CombinedOutput()
		cancel()
		last = fmt.Sprintf("%v: %s", err, out)
		if err == nil && s.probe() {
			s.bucketMade = true
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.t.Fatalf("objstoretest: could not make bucket %s: %s", Bucket, last)
}

// probe writes and deletes an object: anonymously, or signed with
// AccessKey where anonymous requests are refused (StartIAM).
func (s *Server) probe() bool {
	u := s.Endpoint() + "/" + Bucket + "/objstoretest-probe"
	for _, m := range []struct {
		method string
		body   []byte
	}{{http.MethodPut, []byte("probe")}, {http.MethodDelete, nil}} {
		req, _ := http.NewRequest(m.method, u, bytes.NewReader(m.body))
		if s.iamConfig != "" {
			sum := sha256.Sum256(m.body)
			hash := hex.EncodeToString(sum[:])
			req.Header.Set("X-Amz-Content-Sha256", hash)
			creds := aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}
			if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, "s3", "us-east-1", time.Now()); err != nil {
				return false
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return false
		}
	}
	return true
}

// SetCredentials points the AWS SDK's credential chain at the server's
// identity through the environment, for the rest of t, and away from any
// shared files or metadata service of the machine.
func SetCredentials(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	Isolate(t)
}

// Isolate keeps the AWS SDK from the machine's shared files, profile and
// metadata service for the rest of t: credentials come from what the test
// sets, or none.
func Isolate(t testing.TB) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_REGION", "AWS_ENDPOINT_URL"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}
