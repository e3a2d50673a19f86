package util

// Shell completion (cobra's, for bash, zsh, fish and PowerShell; through
// kubectl_complete-quanty for kubectl quanty <TAB>): types from the
// discovery documents, names from the history, as the command line so far
// names the cluster (its -n, --context, ...). A completion that cannot
// reach the cluster completes nothing, and never a file name.

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// completionLogPages bounds the history a completion reads for the names
// of deleted objects: a TAB must answer at once.
const completionLogPages = 2

const noFiles = cobra.ShellCompDirectiveNoFileComp

// CompleteObject completes TYPE/NAME (or TYPE NAME): the types, then the
// names of the type's objects in the namespace, those that exist and
// those deleted within the retention window.
func CompleteObject(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return completeObject(f, cmd, args, toComplete, "/")
	}
}

// CompleteObjectOrType is CompleteObject, where a TYPE alone is complete
// too (get TYPE lists it).
func CompleteObjectOrType(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return completeObject(f, cmd, args, toComplete, "")
	}
}

func completeObject(f *Factory, cmd *cobra.Command, args []string, toComplete, typeSuffix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if key, _ := cmd.Flags().GetString("key"); key != "" {
		return nil, noFiles
	}
	c, err := f.Cluster()
	if err != nil {
		return nil, noFiles
	}
	ctx := cmd.Context()
	switch {
	case len(args) == 0 && strings.Contains(toComplete, "/"):
		typ, _, _ := strings.Cut(toComplete, "/")
		var out []cobra.Completion
		for _, n := range c.names(ctx, typ) {
			out = append(out, typ+"/"+n)
		}
		return filter(out, toComplete), noFiles
	case len(args) == 0:
		names, err := c.typeNames(ctx)
		if err != nil {
			return nil, noFiles
		}
		for i := range names {
			names[i] += typeSuffix
		}
		return filter(names, toComplete), noFiles | cobra.ShellCompDirectiveNoSpace
	case len(args) == 1 && !strings.Contains(args[0], "/"):
		return filter(c.names(ctx, args[0]), toComplete), noFiles
	}
	return nil, noFiles
}

// CompleteTypes completes TYPE[,TYPE...] arguments, at most max of them
// (-1: any number).
func CompleteTypes(f *Factory, max int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if max >= 0 && len(args) >= max {
			return nil, noFiles
		}
		c, err := f.Cluster()
		if err != nil {
			return nil, noFiles
		}
		names, err := c.typeNames(cmd.Context())
		if err != nil {
			return nil, noFiles
		}
		// After a comma, the next type of the list.
		done := ""
		if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
			done = toComplete[:i+1]
		}
		for i := range names {
			names[i] = done + names[i]
		}
		return filter(names, toComplete), noFiles
	}
}

// CompleteDeletedNamespace completes undelete's "namespace NAME": NAME among
// the namespaces deleted within the retention window and still gone.
func CompleteDeletedNamespace(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return filter([]cobra.Completion{"namespace"}, toComplete), noFiles
		case 1:
			c, err := f.Cluster()
			if err != nil {
				return nil, noFiles
			}
			_, gone := c.objectNames(cmd.Context(), "namespaces")
			return filter(gone, toComplete), noFiles
		}
		return nil, noFiles
	}
}

// CompleteNamespace completes -n: the namespaces that exist.
func CompleteNamespace(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := f.Cluster()
		if err != nil {
			return nil, noFiles
		}
		live, _ := c.objectNames(cmd.Context(), "namespaces")
		return filter(live, toComplete), noFiles
	}
}

// typeNames are the resources that hold objects, as kubectl api-resources
// -o name names them (configmaps, deployments.apps).
func (c *Cluster) typeNames(ctx context.Context) ([]string, error) {
	all, err := c.Discovery.All(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range all {
		if n := r.Resource.String(); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// names are the names of typ's objects, those that exist then those that
// are gone.
func (c *Cluster) names(ctx context.Context, typ string) []string {
	live, gone := c.objectNames(ctx, typ)
	return append(live, gone...)
}

// objectNames are the names of the objects of typ in the command's
// namespace (if typ is namespaced) that exist now, and those deleted
// within the first pages of its retained history and still gone.
func (c *Cluster) objectNames(ctx context.Context, typ string) (live, gone []string) {
	res, err := c.Discovery.Resolve(ctx, typ)
	if err != nil {
		return nil, nil
	}
	sc := Scope{Resource: res}
	if res.Namespaced {
		if sc.Namespace, err = c.Namespace(ctx); err != nil {
			return nil, nil
		}
	}
	prefix, err := sc.Prefix(c.Keys)
	if err != nil {
		return nil, nil
	}
	end := []byte(strings.TrimSuffix(prefix, "/") + "0")
	name := func(key []byte) string {
		o, _ := c.Keys.Parse(key)
		return o.Name
	}
	if _, kvs, err := c.History.Range(ctx, &historypb.Request{Key: []byte(prefix), RangeEnd: end}); err == nil {
		for _, kv := range kvs {
			live = append(live, name(kv.Key))
		}
	}
	entries, _, err := c.History.LogPages(ctx, &historypb.Request{Key: []byte(prefix), RangeEnd: end}, completionLogPages)
	if err != nil {
		return live, nil
	}
	keys, logs := ByKey(entries)
	for _, k := range keys {
		if l := logs[k]; l[len(l)-1].GetDeleted() != 0 {
			if n := name([]byte(k)); !slices.Contains(live, n) && !slices.Contains(gone, n) {
				gone = append(gone, n)
			}
		}
	}
	return live, gone
}

// filter keeps the completions that begin with prefix.
func filter(all []cobra.Completion, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, c := range all {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}
