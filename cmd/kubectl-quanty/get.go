package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var getCmd = &command{
	name:  "get",
	usage: "TYPE/NAME (--rev N | --at TIME) [-n NS] [-o yaml|json|name] [--show-secrets]",
	short: "Show an object as it was at a revision or a time",
	long: `Prints the object as it was at revision N, or at TIME (the newest revision
committed then), as kubectl get -o yaml prints it: metadata.resourceVersion
is the revision, managedFields are left out unless asked for. A value
encrypted at rest is never printed: only kube-apiserver can decrypt it.

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
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		key := keyFlag(fs)
		var at point
		at.register(fs, "to show")
		managed := fs.Bool("show-managed-fields", false, "keep metadata.managedFields (as kubectl get)")
		showSecrets := showSecretsFlag(fs, "in every output format")
		out := outputFlag(fs, "yaml", "json", "name")
		return func(ctx context.Context, s *session, args []string) error {
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
