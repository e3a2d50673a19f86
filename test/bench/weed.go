package main

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
)

// The s3:// variant of -replicate runs SeaweedFS as the tests do, through
// objstoretest: one place knows its flags, ports and bucket. objstoretest
// takes a testing.TB; weedTB is the few of its methods objstoretest calls,
// with a failure turned into an error (the embedded TB is nil: any other
// method would panic, and none is called).
type weedTB struct {
	testing.TB
	dir      string
	cleanups []func()
	failed   bool
}

// weedFailure carries a Fatal out of objstoretest to startWeed.
type weedFailure string

func (w *weedTB) Helper() {}
func (w *weedTB) Fatal(args ...any) {
	w.failed = true
	panic(weedFailure(fmt.Sprint(args...)))
}
func (w *weedTB) Fatalf(format string, args ...any) {
	w.failed = true
	panic(weedFailure(fmt.Sprintf(format, args...)))
}
func (w *weedTB) Skip(args ...any)                { w.Fatal(args...) }
func (w *weedTB) Logf(format string, args ...any) { logf("seaweedfs: "+format, args...) }
func (w *weedTB) Failed() bool                    { return w.failed }
func (w *weedTB) Cleanup(f func())                { w.cleanups = append(w.cleanups, f) }
func (w *weedTB) Setenv(key, value string)        { os.Setenv(key, value) }
func (w *weedTB) TempDir() string {
	d, err := os.MkdirTemp(w.dir, "weed")
	if err != nil {
		w.Fatal(err)
	}
	return d
}

// startWeed starts `weed server -s3` (bin) with its data under dir and its
// bucket made, with the AWS SDK's credentials in this process's
// environment (which the servers it starts inherit). It returns the
// replicate URL of a prefix and a stop that ends the server.
func startWeed(bin, dir string) (url func(prefix string) string, stop func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	os.Setenv(objstoretest.WeedEnv, bin)
	tb := &weedTB{dir: dir}
	stop = func() {
		for i := len(tb.cleanups) - 1; i >= 0; i-- {
			tb.cleanups[i]()
		}
		os.RemoveAll(dir)
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(weedFailure)
			if !ok {
				panic(r)
			}
			stop()
			url, stop, err = nil, nil, errors.New(string(f))
		}
	}()
	s := objstoretest.Start(tb)
	objstoretest.SetCredentials(tb)
	return s.URL, stop, nil
}
