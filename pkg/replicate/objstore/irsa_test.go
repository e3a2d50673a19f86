//go:build seaweedfs

// The web-identity credential path (IRSA on EKS: AWS_ROLE_ARN and
// AWS_WEB_IDENTITY_TOKEN_FILE) against a real STS: SeaweedFS's
// AssumeRoleWithWebIdentity, trusting an OIDC issuer the test serves.

package objstore_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
)

// The names an EKS pod's service account would give.
const (
	irsaRole     = "arn:aws:iam::111122223333:role/quanty-replicate"
	irsaSubject  = "system:serviceaccount:quanty:quantykube"
	irsaAudience = "sts.amazonaws.com"
	irsaProvider = "quanty-oidc"
	irsaKeyID    = "quanty-test-key"
)

// oidcIssuer is an OpenID Connect issuer over TLS on loopback: its
// discovery document and the JWKS of one RSA key, which signs tokens.
type oidcIssuer struct {
	srv    *httptest.Server
	key    *rsa.PrivateKey
	caFile string // the PEM of the server's certificate, for SeaweedFS
}

func startIssuer(t *testing.T) *oidcIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := &oidcIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                iss.srv.URL,
			"jwks_uri":                              iss.srv.URL + "/keys",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "use": "sig", "alg": "RS256", "kid": irsaKeyID,
			"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
		}}})
	})
	iss.srv = httptest.NewTLSServer(mux)
	t.Cleanup(iss.srv.Close)
	iss.caFile = filepath.Join(t.TempDir(), "issuer-ca.pem")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: iss.srv.Certificate().Raw})
	if err := os.WriteFile(iss.caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	return iss
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// token signs a JWT (RS256) for the service account sub with key,
// expiring at exp, as the kubelet's projected token is.
func (iss *oidcIssuer) token(t *testing.T, key *rsa.PrivateKey, sub string, exp time.Time) string {
	t.Helper()
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": irsaKeyID})
	claims, _ := json.Marshal(map[string]any{
		"iss": iss.srv.URL, "sub": sub, "aud": []string{irsaAudience},
		"iat": time.Now().Add(-time.Minute).Unix(), "nbf": time.Now().Add(-time.Minute).Unix(), "exp": exp.Unix(),
	})
	signed := b64(header) + "." + b64(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + b64(sig)
}

// iamConfig trusts the issuer for irsaRole, whose policy allows the
// test bucket and nothing else, for the service account irsaSubject.
func (iss *oidcIssuer) iamConfig(t *testing.T) string {
	t.Helper()
	signingKey := make([]byte, 32)
	rand.Read(signingKey)
	bucket := "arn:aws:s3:::" + objstoretest.Bucket
	cfg := map[string]any{
		"sts": map[string]any{
			"tokenDuration": "1h", "maxSessionLength": "12h",
			"issuer": "seaweedfs-sts", "signingKey": signingKey,
		},
		"policy": map[string]any{"defaultEffect": "Deny", "storeType": "memory"},
		"providers": []any{map[string]any{
			"name": irsaProvider, "type": "oidc", "enabled": true,
			"config": map[string]any{"issuer": iss.srv.URL, "clientId": irsaAudience, "tlsCaCert": iss.caFile},
		}},
		"policies": []any{map[string]any{
			"name": "quanty-replicate",
			"document": map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
				"Effect": "Allow", "Action": []string{"s3:*"}, "Resource": []string{bucket, bucket + "/*"},
			}}},
		}},
		"roles": []any{map[string]any{
			"roleName": "quanty-replicate", "roleArn": irsaRole, "attachedPolicies": []string{"quanty-replicate"},
			"trustPolicy": map[string]any{"Version": "2012-10-17", "Statement": []any{map[string]any{
				"Effect": "Allow", "Principal": map[string]string{"Federated": irsaProvider},
				"Action":    []string{"sts:AssumeRoleWithWebIdentity"},
				"Condition": map[string]any{"StringEquals": map[string]string{"oidc:sub": irsaSubject}},
			}}},
		}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestS3WebIdentity opens the store as `serve --replicate s3://…` does in
// a pod whose only credentials are the ones EKS injects for a service
// account's role (IRSA), with STS pointed at SeaweedFS: the SDK trades the
// token for a session and signs with it. A token STS refuses fails with
// an error naming the credential source, and without the token in it.
func TestS3WebIdentity(t *testing.T) {
	iss := startIssuer(t)
	srv := objstoretest.StartIAM(t, iss.iamConfig(t))
	tokenFile := filepath.Join(t.TempDir(), "token")

	// irsaEnv is what EKS's pod identity webhook sets, and nothing more.
	irsaEnv := func(t *testing.T, token string) {
		t.Helper()
		objstoretest.Isolate(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		os.Unsetenv("AWS_ACCESS_KEY_ID")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		os.Unsetenv("AWS_SECRET_ACCESS_KEY")
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_ROLE_ARN", irsaRole)
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		t.Setenv("AWS_ENDPOINT_URL_STS", srv.Endpoint())
		t.Setenv("AWS_REGION", "us-east-1")
	}
	open := func(t *testing.T) objstore.Store {
		t.Helper()
		st, err := objstore.Open(context.Background(), srv.URL("irsa"), objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("Anonymous", func(t *testing.T) {
		// Without credentials the bucket is closed: what the role's
		// session is let do below, it owes to the token.
		objstoretest.Isolate(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		os.Unsetenv("AWS_ACCESS_KEY_ID")
		err := open(t).Put(context.Background(), "bases/anonymous", strings.NewReader("x"), 1)
		if err == nil || !strings.Contains(err.Error(), "AccessDenied") {
			t.Fatalf("anonymous Put: %v, want AccessDenied", err)
		}
	})
	t.Run("Token", func(t *testing.T) {
		irsaEnv(t, iss.token(t, iss.key, irsaSubject, time.Now().Add(time.Hour)))
		ctx := context.Background()
		st := open(t)
		put(t, st, "bases/irsa", "through the web identity", -1)
		if got := get(t, st, "bases/irsa"); got != "through the web identity" {
			t.Errorf("Get = %q", got)
		}
		objs, err := st.List(ctx, "bases/")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].Name != "bases/irsa" {
			t.Errorf("List = %v, want bases/irsa", objs)
		}
		if err := st.Delete(ctx, "bases/irsa"); err != nil {
			t.Fatal(err)
		}
		if objs, err := st.List(ctx, "bases/"); err != nil || len(objs) != 0 {
			t.Errorf("List after Delete = %v, %v; want none", objs, err)
		}
	})

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"Expired", iss.token(t, iss.key, irsaSubject, time.Now().Add(-time.Minute))},
		{"WrongKey", iss.token(t, other, irsaSubject, time.Now().Add(time.Hour))},
		// A valid token of a service account the role does not trust.
		{"OtherServiceAccount", iss.token(t, iss.key, "system:serviceaccount:quanty:other", time.Now().Add(time.Hour))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			irsaEnv(t, tc.token)
			err := open(t).Put(context.Background(), "bases/refused", strings.NewReader("x"), 1)
			if err == nil {
				t.Fatal("Put with a refused token succeeded")
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			for _, part := range strings.Split(tc.token, ".") {
				if strings.Contains(msg, part) {
					t.Errorf("the error holds the token's %q", part)
				}
			}
			for _, want := range []string{"AssumeRoleWithWebIdentity", "AWS_WEB_IDENTITY_TOKEN_FILE", irsaRole} {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not name the credential source (%s)", want)
				}
			}
		})
	}

	t.Run("Rotated", func(t *testing.T) {
		// The kubelet rewrites the token file; the open store takes the
		// new token at its next session, without being opened again.
		irsaEnv(t, iss.token(t, iss.key, irsaSubject, time.Now().Add(-time.Minute)))
		st := open(t)
		if err := st.Put(context.Background(), "bases/rotated", strings.NewReader("x"), 1); err == nil {
			t.Fatal("Put with an expired token succeeded")
		}
		fresh := iss.token(t, iss.key, irsaSubject, time.Now().Add(time.Hour))
		if err := os.WriteFile(tokenFile, []byte(fresh), 0o600); err != nil {
			t.Fatal(err)
		}
		put(t, st, "bases/rotated", "after the rotation", -1)
		if got := get(t, st, "bases/rotated"); got != "after the rotation" {
			t.Errorf("Get = %q", got)
		}
	})
	t.Run("KeysFirst", func(t *testing.T) {
		// Keys in the environment come before the web identity in the
		// SDK's chain: a refused token is then not even read.
		irsaEnv(t, iss.token(t, other, irsaSubject, time.Now().Add(time.Hour)))
		t.Setenv("AWS_ACCESS_KEY_ID", objstoretest.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", objstoretest.SecretKey)
		put(t, open(t), "bases/keys", "with the keys", -1)
	})
}
