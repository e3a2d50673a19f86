package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every bad command line gets an error that says what to give.
func TestBuildFlags(t *testing.T) {
	base := []string{"build", "--version", "v1", "--revision", "abc", "--source-date-epoch", "1700000000", "--tar", "x.tar"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"build", "--revision", "abc", "--source-date-epoch", "1", "--tar", "x"}, "--version is required"},
		{[]string{"build", "--version", "v1", "--source-date-epoch", "1", "--tar", "x"}, "--revision is required"},
		{[]string{"build", "--version", "v1", "--revision", "abc", "--source-date-epoch", "", "--tar", "x"}, "SOURCE_DATE_EPOCH"},
		{[]string{"build", "--version", "v1", "--revision", "abc", "--source-date-epoch", "1"}, "nothing to write"},
		{[]string{"build", "--version", "v1", "--revision", "abc", "--source-date-epoch", "yesterday", "--tar", "x"}, "whole seconds"},
		{append(base, "--binary", "linux/amd64"), "want OS/ARCH[/VARIANT]=PATH"},
		{append(base, "--binary", "darwin/arm64=q"), "linux only"},
		{append(base, "--binary", "linux=q"), "want os/arch"},
		{append(base, "--tar-platform", "linux/s390x/z/z"), "--tar-platform"},
		{append(base, "--binary", "linux/amd64=q", "extra"), "takes no arguments"},
		{[]string{"push"}, "one reference"},
		{[]string{"push", "--layout", t.TempDir(), "Not A Reference"}, "reference"},
		{[]string{"push", "--layout", t.TempDir(), "localhost:1/q:v1"}, "OCI layout"},
	} {
		var out, errs bytes.Buffer
		err := run(t.Context(), c.args, &out, &errs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

func TestRecogniseLicense(t *testing.T) {
	for text, want := range map[string]string{
		"                                 Apache License\n                           Version 2.0, January 2004":   "Apache-2.0",
		"MIT License\n\nPermission is hereby granted, free of charge, to any person":                              "MIT",
		"Mozilla Public License Version 2.0\n==================================":                                  "MPL-2.0",
		"Redistribution and use in source and binary forms, with or without\nmodification... Neither the name of": "BSD-3-Clause",
		"Redistribution and use in source and binary forms, with or without modification":                         "BSD-2-Clause",
		"All rights reserved.": "",
	} {
		if got := recogniseLicense(text); got != want {
			t.Errorf("%.30q: %q, want %q", text, got, want)
		}
	}
}
