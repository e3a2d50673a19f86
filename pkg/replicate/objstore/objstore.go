// Package objstore is where replication writes: a flat namespace of
// objects under one URL's prefix, on object storage (s3://, any
// S3-compatible service) or a mounted disk (file://), optionally
// encrypted client-side. Every backend keeps the same promises, so the
// replication engine (pkg/replicate) and its restore see one behaviour
// whatever the URL names.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"strings"
	"time"
)

// ErrNotExist is wrapped by the error of Get for an absent object.
var ErrNotExist = errors.New("object does not exist")

// Object is one entry of a listing.
type Object struct {
	// Name is the object's name relative to the store's prefix.
	Name string
	// Size is the size stored, in bytes: the ciphertext's when encrypted.
	Size int64
	// ModTime is when the object was written, as the backend records it.
	ModTime time.Time
}

// Store is a flat namespace of objects under one URL's prefix. Names are
// slash-separated relative paths ("bases/...", "segments/...").
type Store interface {
	// Put writes the object whole from r (size -1 when unknown): once Put
	// returns nil, Get and List see all of it; a failed Put leaves nothing
	// visible under name.
	Put(ctx context.Context, name string, r io.Reader, size int64) error
	// Get opens the object; an absent object is an error wrapping ErrNotExist.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// List returns the objects whose names begin with prefix, sorted by name.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes the object; deleting an absent one is not an error.
	Delete(ctx context.Context, name string) error
	// String names the store for logs and errors, without credentials.
	String() string
}

// Options are what Open needs besides the URL.
type Options struct {
	// CAFile is a PEM file of the CAs that verify an s3:// endpoint's
	// certificate, in place of the system's; the URL's ca-file parameter
	// gives the same, and both at once are refused. Empty: the system's.
	CAFile string
	// EncryptionKeyFile, when set, names a file holding a 256-bit key
	// (32 raw bytes, or 64 hexadecimal characters and an optional
	// newline): every object is then encrypted client-side with
	// AES-256-GCM (crypt.go) before it leaves the process.
	EncryptionKeyFile string
	// StallTimeout bounds how long an s3:// connection may make no
	// progress, reading or writing, before it fails (0: DefaultStallTimeout).
	StallTimeout time.Duration
}

// DefaultStallTimeout is Options.StallTimeout's default: an object store
// that stops answering without closing the connection (a black hole, a
// dead load balancer) would otherwise hold a PUT until TCP gives up,
// about 15 minutes on Linux, and replication behind it. The failed
// request is retried, as any failure is; an idle pooled connection is
// closed after it, and the next request dials again.
const DefaultStallTimeout = time.Minute

// maxNameLen bounds a name: S3 keys are at most 1024 bytes, prefix included.
const maxNameLen = 900

// Open returns the store rawURL names:
//
//	file:///path                   a directory on a mounted disk
//	s3://BUCKET[/PREFIX][?...]     an S3-compatible bucket (s3.go for the parameters)
//
// Credentials never go in the URL (s3.go says where they come from), and
// no error of Open repeats the URL's query or user information.
func Open(ctx context.Context, rawURL string, opts Options) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, credentials included
		}
		return nil, fmt.Errorf("object store URL: %w", err)
	}
	if u.User != nil {
		return nil, fmt.Errorf("object store URL %s: holds user information; credentials come from the environment or the AWS shared files, never the URL", redacted(u))
	}
	var st Store
	switch u.Scheme {
	case "file":
		if opts.CAFile != "" {
			return nil, fmt.Errorf("object store URL %s: a CA file applies to s3:// only", redacted(u))
		}
		st, err = openFile(u)
	case "s3":
		st, err = openS3(ctx, u, opts.CAFile, opts.StallTimeout)
	case "":
		return nil, fmt.Errorf("object store URL %q: no scheme: want s3://BUCKET/PREFIX or file:///path", redacted(u))
	default:
		return nil, fmt.Errorf("object store URL %s: scheme %q not supported: want s3:// or file://", redacted(u), u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	if opts.EncryptionKeyFile != "" {
		key, err := readKeyFile(opts.EncryptionKeyFile)
		if err != nil {
			return nil, err
		}
		st = newEncrypted(st, key)
	}
	return st, nil
}

// redacted is u without its user information and with its query's values
// hidden but for the parameters known to be harmless.
func redacted(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		q := c.Query()
		for k, v := range q {
			if !harmlessParam[k] || strings.Contains(strings.Join(v, ""), "@") {
				q[k] = []string{"REDACTED"} // or a user:password@ inside it
			}
		}
		// Readable in logs: ':' and '/' of an endpoint left as they are.
		c.RawQuery = strings.NewReplacer("%3A", ":", "%2F", "/").Replace(q.Encode())
	}
	return c.String()
}

var harmlessParam = map[string]bool{
	"endpoint": true, "region": true, "force-path-style": true,
	"skip-verify": true, "ca-file": true,
}

// checkName refuses a name that is not a clean relative slash-separated
// path, or whose element begins with "." (file:// keeps its temporary
// files there), so that every backend accepts the same names.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("object name is empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("object name %.40q...: longer than %d bytes", name, maxNameLen)
	case !fs.ValidPath(name):
		return fmt.Errorf("object name %q: want a relative slash-separated path without empty, . or .. elements", name)
	case strings.Contains(name, "\\"):
		return fmt.Errorf("object name %q: holds a backslash", name)
	}
	for _, e := range strings.Split(name, "/") {
		if strings.HasPrefix(e, ".") {
			return fmt.Errorf("object name %q: an element begins with '.'", name)
		}
	}
	return nil
}

// checkPrefix refuses a listing prefix that could reach outside the
// store: its elements but the last, which may be partial, follow
// checkName's rule.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		if err := checkName(prefix[:i]); err != nil {
			return fmt.Errorf("list prefix %q: %w", prefix, err)
		}
	}
	if strings.HasPrefix(prefix, "/") || len(prefix) > maxNameLen || strings.Contains(prefix, "\\") {
		return fmt.Errorf("list prefix %q: want the beginning of a relative object name", prefix)
	}
	return nil
}

// ctxReader stops a copy once its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
