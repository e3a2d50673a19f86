package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var getCmd = &command{
	name:  "get",
	usage: "(TYPE/NAME | TYPE [-A] [-l SELECTOR]) (--rev N | --at TIME) [-n NS] [-o wide|yaml|json|name] [--show-secrets]",
	short: "Show an object, or every object of a type, as it was at a revision or a time",
	long: `Prints the object as it was at revision N, or at TIME (the newest revision
committed then), as kubectl get -o yaml prints it: metadata.resourceVersion
is the revision, managedFields are left out unless asked for. A value
encrypted at rest is never printed: only kube-apiserver can decrypt it.

With a TYPE alone, it lists the objects of that type that existed then,
in the namespace (every namespace with -A), in kubectl get's columns for
the type where they can be computed from the stored object: NAME, the
type's own columns (a Pod's READY, STATUS and RESTARTS, a Deployment's
READY, UP-TO-DATE and AVAILABLE, a custom resource's
additionalPrinterColumns from its CustomResourceDefinition as it was
then), AGE (as old as each was then; with --rev, now), and NOW: same,
changed since, deleted since, or replaced (another object of that name
now). -l matches the labels they had then; -o yaml and -o json print
them as a List.

A Secret's values (data, stringData, and those in kubectl apply's
last-applied-configuration annotation) are printed as "***", in -o yaml
and -o json too, unless --show-secrets: then as stored, as kubectl get
prints them, for a script that needs them.
`,
	examples: `
  # The ConfigMap as it was at revision 1234 (revisions come from kubectl quanty log)
  kubectl quanty get configmap/web --rev 1234

  # A Deployment as it was an hour ago, as JSON
  kubectl quanty get deployments.apps/web -n shop --at -1h -o json

  # As it was at a given time
  kubectl quanty get cm/web --at 2026-05-01T12:00:00Z

  # The Pods that were running an hour ago, and which are gone since
  kubectl quanty get pods -n shop --at -1h
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		key := keyFlag(fs)
		var at point
		at.register(fs, "to show")
		managed := fs.Bool("show-managed-fields", false, "keep metadata.managedFields (as kubectl get)")
		showSecrets := showSecretsFlag(fs, "in every output format")
		all := fs.BoolP("all-namespaces", "A", false, "with TYPE alone: every namespace")
		selector := fs.StringP("selector", "l", "", "with TYPE alone: only objects whose labels matched (as kubectl -l) then")
		// -o's default is the form's: YAML for one object, the table for
		// a type.
		out := &output{formats: []string{"", "yaml", "json", "name", "wide"}}
		fs.StringVarP(&out.format, "output", "o", "", "output format: yaml, json, name (default yaml); for a TYPE alone, wide too (default a table)")
		return func(ctx context.Context, s *session, args []string) error {
			if *key == "" && len(args) == 1 && !strings.Contains(args[0], "/") {
				o := listOpts{all: *all, selector: *selector, format: out.format, managed: *managed, showSecrets: *showSecrets}
				return s.getList(ctx, args[0], &at, o)
			}
			if *all || *selector != "" || out.format == "wide" {
				return errors.New("-A, -l and -o wide list a type: kubectl quanty get TYPE (without a name)")
			}
			if out.format == "" {
				out.format = "yaml"
			}
			t, rev, kv, err := s.stateAt(ctx, args, *key, &at, out)
			if err != nil {
				return err
			}
			if kv == nil {
				return fmt.Errorf("%s did not exist at revision %d (kubectl quanty log lists its revisions)", t, rev)
			}
			if out.format == "name" {
				_, err := fmt.Fprintln(s.out, t.nameOnly())
				return err
			}
			v := decodeValue(kv.Value)
			if v.Object == nil {
				return fmt.Errorf("%s at revision %d: %s", t, kv.ModRevision, v.describe())
			}
			obj := v.shown(kv.ModRevision, *managed)
			if !*showSecrets {
				maskSecrets(obj, nil)
			}
			b, err := render(obj, out.format)
			if err != nil {
				return err
			}
			_, err = s.out.Write(b)
			return err
		}
	},
}

// state is the key of req as it was: the revision read, and its value
// then (nil when it did not exist).
func (s *session) state(ctx context.Context, req *historypb.Request) (int64, *mvccpb.KeyValue, error) {
	resp, err := s.api.get(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	return resp.GetRevision(), resp.GetKv(), nil
}
