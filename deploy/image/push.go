package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("layout", "dist/quantykube-image", "the OCI image layout make image wrote")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quantykube-image push [--layout DIR] REGISTRY/REPOSITORY:TAG\n\nPushes every platform of the layout's image, with the credentials of docker login or podman login.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("push takes one reference, the repository and tag to push to")
	}
	d, err := push(ctx, *dir, fs.Arg(0), authn.DefaultKeychain)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, d)
	return nil
}

// push writes the layout's image index (every platform, every blob) to
// ref and returns the reference by digest to pin: the index's digest,
// the same as make image printed.
func push(ctx context.Context, dir, ref string, keys authn.Keychain) (name.Digest, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("reference %q: %w", ref, err)
	}
	idx, err := layoutIndex(dir)
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(keys)); err != nil {
		return name.Digest{}, fmt.Errorf("push to %s: %w", r, err)
	}
	h, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return r.Context().Digest(h.String()), nil
}

// layoutIndex is the one image index a layout make image wrote holds.
func layoutIndex(dir string) (v1.ImageIndex, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("OCI layout %s: want one image index in index.json, as make image writes, found %d entries", dir, len(m.Manifests))
	}
	return root.ImageIndex(m.Manifests[0].Digest)
}
