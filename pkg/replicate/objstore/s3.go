package objstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// s3Store keeps each object under one bucket's key prefix, through
// aws-sdk-go-v2 (ADR-045). A Put is a single PutObject when the object
// fits in one part, else a multipart upload, which S3 shows only once it
// is completed; either way at most one part is in memory.
type s3Store struct {
	client *s3.Client
	bucket string
	prefix string // "" or ending in "/"
	desc   string // String(): the URL without anything secret
}

// partSize is a multipart upload's part: the memory a Put holds, and with
// S3's 10,000 parts the largest object it can write (78 GiB).
const (
	partSize = 8 << 20
	maxParts = 10000
	// abortTimeout bounds aborting a failed multipart upload.
	abortTimeout = 30 * time.Second
)

// s3Params are the URL's query parameters, named as Litestream names them.
var s3Params = map[string]bool{
	"endpoint": true, "region": true, "force-path-style": true,
	"skip-verify": true, "ca-file": true,
}

// openS3 opens s3://BUCKET[/PREFIX]?endpoint=URL&region=R&force-path-style=BOOL&skip-verify=BOOL&ca-file=PATH.
//
// endpoint: an S3-compatible service's URL (http:// or https://; a bare
// host:port is https); absent: AWS. region: absent, the AWS configuration's
// (AWS_REGION, the profile's), else us-east-1. force-path-style: requests
// name the bucket in the path rather than the host name; the default is
// true with an endpoint, false on AWS. skip-verify: do not verify the
// endpoint's certificate. ca-file: a PEM file of CAs to verify it with
// (or Options.CAFile, not both).
//
// Credentials are found as the AWS SDK finds them: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the shared
// files (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, AWS_PROFILE), web
// identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), the container's
// or instance's role. With an endpoint and none of those configured,
// requests are anonymous.
func openS3(ctx context.Context, u *url.URL, caFile string, stall time.Duration) (Store, error) {
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("object store URL %s: %s", redacted(u), fmt.Sprintf(format, a...))
	}
	bucket := u.Host
	if bucket == "" {
		return nil, bad("no bucket: want s3://BUCKET/PREFIX")
	}
	if u.Opaque != "" || u.Fragment != "" {
		return nil, bad("want s3://BUCKET/PREFIX?PARAMETERS")
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := checkName(prefix); err != nil {
			return nil, bad("prefix: %v", err)
		}
		prefix += "/"
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, bad("query: %v", err)
	}
	for k, v := range q {
		if !s3Params[k] {
			return nil, bad("unknown parameter %q: want endpoint, region, force-path-style, skip-verify or ca-file", k)
		}
		if len(v) != 1 {
			return nil, bad("parameter %q given %d times", k, len(v))
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		if !strings.Contains(endpoint, "://") {
			endpoint = "https://" + endpoint
		}
		eu, err := url.Parse(endpoint)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || eu.User != nil || eu.RawQuery != "" {
			return nil, bad("endpoint: want http://HOST[:PORT] or https://HOST[:PORT], without user information")
		}
	}
	pathStyle := endpoint != ""
	if v := q.Get("force-path-style"); v != "" {
		if pathStyle, err = strconv.ParseBool(v); err != nil {
			return nil, bad("force-path-style=%q: want true or false", v)
		}
	}
	skipVerify := false
	if v := q.Get("skip-verify"); v != "" {
		if skipVerify, err = strconv.ParseBool(v); err != nil {
			return nil, bad("skip-verify=%q: want true or false", v)
		}
	}
	if v := q.Get("ca-file"); v != "" {
		if caFile != "" {
			return nil, bad("a CA file given twice, in the URL (ca-file) and apart")
		}
		caFile = v
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skipVerify}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, bad("CA file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, bad("CA file %s: no PEM certificate in it", caFile)
		}
		tlsConf.RootCAs = pool
	}
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.TLSClientConfig = tlsConf
		dial := tr.DialContext
		if dial == nil {
			dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &stallConn{Conn: c, timeout: stall}, nil
		}
	})

	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		// S3-compatible services do not all take the checksums the SDK
		// now adds by default; SigV4 signs the payload's hash anyway.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if r := q.Get("region"); r != "" {
		loadOpts = append(loadOpts, config.WithRegion(r))
	} else {
		loadOpts = append(loadOpts, config.WithDefaultRegion("us-east-1"))
	}
	if endpoint != "" && !credentialsConfigured() {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, bad("AWS configuration: %v", err)
	}
	if src := webIdentity(); src != "" {
		cfg.Credentials = namedCredentials{CredentialsProvider: cfg.Credentials, source: src}
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
	})
	return &s3Store{client: client, bucket: bucket, prefix: prefix, desc: redacted(u)}, nil
}

// credentialsConfigured says whether any source of credentials the SDK
// reads is configured, short of the instance's role: for an S3-compatible
// endpoint, asking the cloud's metadata service makes no sense, and
// anonymous requests are what is meant.
func credentialsConfigured() bool {
	for _, v := range []string{
		"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI",
	} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	for env, def := range map[string]string{
		"AWS_SHARED_CREDENTIALS_FILE": config.DefaultSharedCredentialsFilename(),
		"AWS_CONFIG_FILE":             config.DefaultSharedConfigFilename(),
	} {
		f := os.Getenv(env)
		if f == "" {
			f = def
		}
		if fi, err := os.Stat(f); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// webIdentity names the web identity the SDK assumes a role with (IRSA:
// AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, which EKS injects), or is
// "" when the SDK takes its credentials elsewhere: from keys in the
// environment or a profile named, which come first in its chain.
func webIdentity() string {
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"} {
		if os.Getenv(v) != "" {
			return ""
		}
	}
	f := os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE")
	if f == "" {
		return ""
	}
	return fmt.Sprintf("web identity (AWS_ROLE_ARN=%s, AWS_WEB_IDENTITY_TOKEN_FILE=%s)", os.Getenv("AWS_ROLE_ARN"), f)
}

// namedCredentials names its source in the error of a failed retrieval:
// the SDK's error names the STS call, not the role or the token's file an
// operator has to check. Neither the SDK nor STS puts the token in it.
type namedCredentials struct {
	aws.CredentialsProvider
	source string
}

func (c namedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	creds, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return creds, fmt.Errorf("credentials from %s: %w", c.source, err)
	}
	return creds, nil
}

func (s *s3Store) String() string { return s.desc }

func (s *s3Store) errorf(name string, err error) error {
	return fmt.Errorf("%s: object %s: %w", s, name, err)
}

func (s *s3Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%s: put: %w", s, err)
	}
	key := s.prefix + name
	// An object already in memory (the replicator's segments) goes as it
	// is: the SDK seeks it back for a retry, and a copy would be one more
	// allocation a second for the garbage collector.
	if br, ok := r.(*bytes.Reader); ok && size >= 0 && size < partSize {
		if int64(br.Len()) != size {
			return s.errorf(name, fmt.Errorf("have %d bytes, want %d", br.Len(), size))
		}
		return s.putObject(ctx, name, key, br, size)
	}
	// An object of a known size below a part is read into a buffer of its
	// size and one byte more (which shows a reader longer than it said):
	// a second's segment is far smaller than a part, and allocating and
	// zeroing a whole part for each cost the server 4% of its CPU at 500
	// updates/s (make bench-replicate's profile).
	bufSize := int64(partSize)
	if size >= 0 && size < bufSize {
		bufSize = size + 1
	}
	buf := make([]byte, bufSize)
	n, err := io.ReadFull(r, buf)
	total := int64(n)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return s.errorf(name, fmt.Errorf("read: %w", err))
	}
	if err == nil && bufSize < partSize {
		return s.errorf(name, fmt.Errorf("read more than the %d bytes given", size))
	}
	if err != nil { // the whole object fits in one part
		if size >= 0 && total != size {
			return s.errorf(name, fmt.Errorf("read %d bytes, want %d", total, size))
		}
		return s.putObject(ctx, name, key, bytes.NewReader(buf[:n]), total)
	}
	return s.putMultipart(ctx, name, key, r, size, buf)
}

// putObject puts body, of size bytes, in one request.
func (s *s3Store) putObject(ctx context.Context, name, key string, body *bytes.Reader, size int64) error {
	if err := ctx.Err(); err != nil {
		return s.errorf(name, err)
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size),
	})
	if err != nil {
		return s.errorf(name, s3Error(err))
	}
	return nil
}

// putMultipart uploads the object in parts, buf holding the first, full
// one; a failure aborts the upload, so nothing of it stays.
func (s *s3Store) putMultipart(ctx context.Context, name, key string, r io.Reader, size int64, buf []byte) (err error) {
	up, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return s.errorf(name, s3Error(err))
	}
	defer func() {
		if err == nil {
			return
		}
		// Abort even when ctx has ended, or the parts stay billed.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		if _, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: &s.bucket, Key: &key, UploadId: up.UploadId,
		}); aerr != nil {
			err = fmt.Errorf("%w (and aborting the multipart upload: %v)", err, s3Error(aerr))
		}
	}()
	var parts []types.CompletedPart
	n, total := len(buf), int64(0)
	for num := int32(1); ; num++ {
		if num > maxParts {
			return s.errorf(name, fmt.Errorf("larger than %d parts of %d bytes", maxParts, partSize))
		}
		total += int64(n)
		if size >= 0 && total > size {
			return s.errorf(name, fmt.Errorf("read more than %d bytes, the size given", size))
		}
		if err := ctx.Err(); err != nil {
			return s.errorf(name, err)
		}
		out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: &s.bucket, Key: &key, UploadId: up.UploadId, PartNumber: aws.Int32(num),
			Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return s.errorf(name, fmt.Errorf("part %d: %w", num, s3Error(err)))
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		var rerr error
		n, rerr = io.ReadFull(r, buf)
		if rerr == io.EOF {
			break
		}
		if rerr != nil && rerr != io.ErrUnexpectedEOF {
			return s.errorf(name, fmt.Errorf("read: %w", rerr))
		}
	}
	if size >= 0 && total != size {
		return s.errorf(name, fmt.Errorf("read %d bytes, want %d", total, size))
	}
	if err := ctx.Err(); err != nil {
		return s.errorf(name, err)
	}
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &s.bucket, Key: &key, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return s.errorf(name, s3Error(err))
	}
	return nil
}

func (s *s3Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("%s: get: %w", s, err)
	}
	key := s.prefix + name
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return nil, s.errorf(name, s3Error(err))
	}
	return &s3Body{ReadCloser: out.Body, s: s, name: name}, nil
}

// s3Body names the object in an error met while reading it.
type s3Body struct {
	io.ReadCloser
	s    *s3Store
	name string
}

func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = b.s.errorf(b.name, fmt.Errorf("read: %w", err))
	}
	return n, err
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix),
	})
	var out []Object
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: list %q: %w", s, prefix, s3Error(err))
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if name == "" || strings.HasSuffix(name, "/") {
				continue // a folder marker some tools write, not an object
			}
			out = append(out, Object{Name: name, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *s3Store) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%s: delete: %w", s, err)
	}
	key := s.prefix + name
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
		err = s3Error(err)
		if errors.Is(err, ErrNotExist) {
			return nil
		}
		return s.errorf(name, err)
	}
	return nil
}

// s3Error shortens the SDK's error to the service's code and message (or
// the transport's failure), and wraps ErrNotExist for an absent object.
// Neither the SDK's nor the service's errors carry the secret key.
func s3Error(err error) error {
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return ErrNotExist
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket" {
			return fmt.Errorf("no such bucket: %w", err)
		}
		return fmt.Errorf("%w (HTTP 404)", ErrNotExist)
	}
	return err
}

// stallConn fails a read or a write that makes no progress within
// timeout (Options.StallTimeout).
type stallConn struct {
	net.Conn
	timeout time.Duration
}

func (c *stallConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *stallConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
