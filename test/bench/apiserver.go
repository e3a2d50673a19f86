package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// kube-apiserver on a target, for the idle workload's -idle-apiserver mode
// and the scale workload. Only what it needs to start and serve /readyz: a
// service-account key (the one file it cannot do without) and its own
// self-signed serving certificate (--cert-dir). The idle workload makes no
// request but the anonymous /readyz, which the bootstrap RBAC policy allows
// (system:public-info-viewer); the scale workload lists as an admin, with a
// bearer token in system:masters from a static token file (one file, no
// client PKI). test/e2e starts a full cluster with its own PKI; none of
// that is needed here.

type apiserver struct {
	pid    int
	base   string // https://127.0.0.1:PORT
	readyz string
	token  string // the admin's bearer token; "" without one
	client *http.Client
	exited chan struct{}
	log    string
	stop   func()
}

// apiserverArgs are kube-apiserver's flags on etcdURL; the rest are its
// defaults, as a cluster would run it: the watch cache, compaction every 5
// minutes, its identity lease renewed every 10 s. Two differ from a
// cluster's: Node and RBAC authorization are named (as kubeadm does), and
// the endpoint reconciler is off, because it refuses a loopback address and
// the harness advertises no other (its master lease, a write every 10 s,
// is missing from the load).
func apiserverArgs(etcdURL string, port int, dir, saKey string) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC",
		"--endpoint-reconciler-type=none",
		"--v=1",
	}
}

// startAPIServer runs bin against the etcd API at etcdURL, with dir (which
// it creates) for its files and log, and waits until /readyz answers; with
// admin, a.token authenticates as a member of system:masters.
func startAPIServer(ctx context.Context, bin, etcdURL, dir string, admin bool) (*apiserver, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	saKey, err := writeServiceAccountKey(filepath.Join(dir, "sa.key"))
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	args := apiserverArgs(etcdURL, port, dir, saKey)
	var token string
	if admin {
		var file string
		if token, file, err = writeTokenFile(filepath.Join(dir, "tokens.csv")); err != nil {
			return nil, err
		}
		args = append(args, "--token-auth-file="+file)
	}
	sctx, cancel := context.WithCancel(ctx)
	cmd, err := command(sctx, dir, bin, args...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start kube-apiserver %s: %w", bin, err)
	}
	a := &apiserver{
		pid:    cmd.Process.Pid,
		base:   fmt.Sprintf("https://127.0.0.1:%d", port),
		readyz: fmt.Sprintf("https://127.0.0.1:%d/readyz", port),
		token:  token,
		exited: make(chan struct{}),
		log:    filepath.Join(dir, "server.log"),
	}
	go func() { cmd.Wait(); close(a.exited) }()
	a.stop = func() {
		cancel() // SIGTERM, then SIGKILL after command's WaitDelay
		<-a.exited
		if a.client != nil {
			a.client.CloseIdleConnections()
		}
	}
	if err := a.waitReady(ctx, filepath.Join(dir, "certs", "apiserver.crt"), 3*time.Minute); err != nil {
		a.stop()
		return nil, fmt.Errorf("kube-apiserver: %w; log: %s", err, tail(a.log))
	}
	return a, nil
}

// writeServiceAccountKey writes a new ECDSA key as PEM: kube-apiserver
// signs service-account tokens with it and takes the public half from it to
// verify them.
func writeServiceAccountKey(path string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("service-account key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", fmt.Errorf("service-account key: %w", err)
	}
	return path, nil
}

// writeTokenFile writes a static token file (--token-auth-file: token,
// user, uid, groups) with one random token for an admin in system:masters.
func writeTokenFile(path string) (token, file string, err error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	token = hex.EncodeToString(b)
	line := token + ",bench-admin,bench-admin,\"system:masters\"\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	return token, path, nil
}

// waitReady polls /readyz until it answers 200. The serving certificate is
// the one kube-apiserver generates into certFile at its start (followed by
// the CA that signed it), so the client trusts that file once it exists.
func (a *apiserver) waitReady(ctx context.Context, certFile string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if a.client == nil {
			if b, err := os.ReadFile(certFile); err == nil {
				roots := x509.NewCertPool()
				if !roots.AppendCertsFromPEM(b) {
					return fmt.Errorf("%s: no certificate", certFile)
				}
				a.client = &http.Client{Timeout: 5 * time.Second,
					Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
			} else {
				last = err
			}
		}
		if a.client != nil {
			if last = a.ready(ctx); last == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, last)
		}
		select {
		case <-a.exited:
			return errors.New("exited while starting")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ready asks /readyz once.
func (a *apiserver) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.readyz, nil)
	if err != nil {
		return err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /readyz: %s", resp.Status)
	}
	return nil
}
