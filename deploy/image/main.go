// Command quantykube-image builds QuantyKube's OCI image without a
// container daemon, and publishes it (docs/image.md, ADR-042).
//
//	quantykube-image build --binary linux/amd64=PATH ... --deb FILE ... [flags]
//	quantykube-image push [--layout DIR] REFERENCE
//
// build assembles, with go-containerregistry, an image from scratch for
// each platform: the static quantykube binary, Debian's CA certificates
// and time zones, a non-root user, an SPDX SBOM. It writes them as one
// multi-platform OCI image layout and one platform's docker-archive (for
// docker load and podman load). Every input fixes the output: the same
// binaries, packages and SOURCE_DATE_EPOCH give the same digests.
// scripts/image.sh (make image) builds the binaries and fetches the
// packages first.
//
// push copies the layout's index, every platform, to a registry, with the
// credentials docker and podman logins leave (authn.DefaultKeychain).
//
// It is a module of its own (ADR-012, ADR-042): go-containerregistry
// never enters the quantykube binary's module graph.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "quantykube-image: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage:
  quantykube-image build --binary OS/ARCH[/VARIANT]=PATH ... --deb FILE ... [flags]
  quantykube-image push [--layout DIR] REFERENCE
run a command with -h for its flags`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:], stdout, stderr)
	case "push":
		return runPush(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

// multi is a repeatable flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var binaries, debs multi
	fs.Var(&binaries, "binary", "OS/ARCH[/VARIANT]=PATH: the quantykube binary of a platform, static (repeatable; the index lists them in this order)")
	fs.Var(&debs, "deb", "a Debian package to take files from: ca-certificates and tzdata (repeatable)")
	name := fs.String("name", "quantykube", "the image's name (the docker archive's repository)")
	version := fs.String("version", "", "the version: the docker archive's tag, the layout's ref.name, org.opencontainers.image.version (required)")
	revision := fs.String("revision", "", "the commit built, org.opencontainers.image.revision (required)")
	source := fs.String("source", "https://github.com/quantyroot/quantykube", "the repository's URL, org.opencontainers.image.source")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970: every file's time, the config's and org.opencontainers.image.created (default $SOURCE_DATE_EPOCH; required)")
	licenseFile := fs.String("license-file", "", "the repository's LICENSE: copied into the image; its SPDX identifier goes into the labels and the SBOM")
	licenses := fs.String("licenses", "", "the SPDX expression of --license-file (default: recognised from its text)")
	layoutDir := fs.String("layout", "", "write every platform as an OCI image layout in this directory (replaced)")
	tarFile := fs.String("tar", "", "write one platform as a docker-archive tarball (docker load, podman load)")
	hostPlatform := "linux/" + runtime.GOARCH
	if runtime.GOARCH == "arm" {
		hostPlatform += "/v7"
	}
	tarPlatform := fs.String("tar-platform", hostPlatform, "the platform in --tar")
	sbomDir := fs.String("sbom-dir", "", "also write each platform's SBOM here, as NAME-image_OS_ARCH[_VARIANT].spdx.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("build takes no arguments, got %q", fs.Args())
	}
	c := buildConfig{layoutDir: *layoutDir, tarFile: *tarFile, sbomDir: *sbomDir, debs: debs, licenseFile: *licenseFile}
	c.meta = imageMeta{name: *name, version: *version, revision: *revision, source: *source, licenses: *licenses}
	switch {
	case c.meta.version == "":
		return errors.New("--version is required")
	case c.meta.revision == "":
		return errors.New("--revision is required")
	case *epoch == "":
		return errors.New("--source-date-epoch (or SOURCE_DATE_EPOCH) is required: the commit's time, git log -1 --format=%ct")
	case c.layoutDir == "" && c.tarFile == "":
		return errors.New("nothing to write: give --layout, --tar or both")
	}
	sec, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || sec < 0 {
		return fmt.Errorf("source date epoch %q: want whole seconds since 1970", *epoch)
	}
	c.meta.created = time.Unix(sec, 0).UTC()
	if c.tarPlatform, err = parsePlatform(*tarPlatform); err != nil {
		return fmt.Errorf("--tar-platform: %w", err)
	}
	for _, b := range binaries {
		p, path, ok := strings.Cut(b, "=")
		if !ok || path == "" {
			return fmt.Errorf("--binary %q: want OS/ARCH[/VARIANT]=PATH", b)
		}
		pl, err := parsePlatform(p)
		if err != nil {
			return fmt.Errorf("--binary: %w", err)
		}
		c.binaries = append(c.binaries, platformBinary{pl, path})
	}
	if c.licenseFile != "" && c.meta.licenses == "" {
		b, err := os.ReadFile(c.licenseFile)
		if err != nil {
			return fmt.Errorf("--license-file: %w", err)
		}
		if c.meta.licenses = recogniseLicense(string(b)); c.meta.licenses == "" {
			return fmt.Errorf("--license-file %s: not a license this tool recognises; name it with --licenses (an SPDX expression)", c.licenseFile)
		}
	}
	if c.workDir, err = os.MkdirTemp("", "quantykube-image-"); err != nil {
		return err
	}
	defer os.RemoveAll(c.workDir)
	b, err := build(c)
	if err != nil {
		return err
	}
	b.report(stdout, c)
	return nil
}

// recogniseLicense is the SPDX identifier of a few common license texts,
// or "".
func recogniseLicense(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	has := func(s string) bool { return strings.Contains(t, s) }
	switch {
	case has("Apache License") && has("Version 2.0"):
		return "Apache-2.0"
	case has("Mozilla Public License Version 2.0") || has("Mozilla Public License, version 2.0"):
		return "MPL-2.0"
	case has("Permission is hereby granted, free of charge"):
		return "MIT"
	case has("Redistribution and use in source and binary forms") && has("Neither the name"):
		return "BSD-3-Clause"
	case has("Redistribution and use in source and binary forms"):
		return "BSD-2-Clause"
	}
	return ""
}
