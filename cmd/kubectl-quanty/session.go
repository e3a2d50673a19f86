package main

// What every command shares: turning TYPE/NAME or --key into a storage
// key, reading points in history (--rev, --at), printing and asking.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/pkg/timearg"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// session is one command's connection to the cluster.
type session struct {
	*plugin
	k    *kubectl
	api  *historyAPI
	disc *discovery
	keys *storagekey.Table
	ns   string // the namespace, once known
	// answers reads standard input, one line an answer.
	answers *bufio.Reader
}

func (s *session) table() *storagekey.Table {
	if s.keys == nil {
		s.keys = storagekey.New(s.etcdPrefix)
	}
	return s.keys
}

// namespace is -n, or the context's namespace as kubectl would use it.
func (s *session) namespace(ctx context.Context) (string, error) {
	if s.ns != "" {
		return s.ns, nil
	}
	if ns := s.kubectlOptions.namespace(); ns != "" {
		s.ns = ns
		return ns, nil
	}
	ns, err := s.k.contextNamespace(ctx)
	s.ns = ns
	return ns, err
}

// target is what a command's arguments name: an object, or a raw key.
type target struct {
	res apiResource // zero for --key
	obj storagekey.Object
	key string
}

// String names the target for people: kubectl's TYPE/NAME, with the
// namespace, or the raw key.
func (t target) String() string {
	if t.res.Kind == "" {
		return fmt.Sprintf("key %q", t.key)
	}
	if t.obj.Namespace == "" {
		return t.res.typeName() + "/" + t.obj.Name
	}
	return fmt.Sprintf("%s/%s in namespace %s", t.res.typeName(), t.obj.Name, t.obj.Namespace)
}

// nameOnly is -o name's line.
func (t target) nameOnly() string {
	if t.res.Kind == "" {
		return t.key
	}
	return t.res.typeName() + "/" + t.obj.Name
}

// keyFlag is --key, for every command that names one object.
func keyFlag(fs *pflag.FlagSet) *string {
	return fs.String("key", "", "a raw storage key (such as /registry/configmaps/default/web) instead of TYPE/NAME")
}

// target resolves TYPE/NAME (or TYPE NAME) through discovery, or takes
// --key as it is.
func (s *session) target(ctx context.Context, args []string, key string) (target, error) {
	if key != "" {
		if len(args) > 0 {
			return target{}, errors.New("give either TYPE/NAME or --key, not both")
		}
		t := target{key: key}
		if o, ok := s.table().Parse([]byte(key)); ok {
			t.obj = o
		}
		return t, nil
	}
	var typ, name string
	switch {
	case len(args) == 1 && strings.Count(args[0], "/") == 1:
		typ, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2 && !strings.Contains(args[0], "/"):
		typ, name = args[0], args[1]
	default:
		return target{}, errors.New("want one object: TYPE/NAME (or TYPE NAME), or --key KEY")
	}
	if typ == "" || name == "" {
		return target{}, fmt.Errorf("%q: want TYPE/NAME", strings.Join(args, " "))
	}
	res, err := s.disc.resolve(ctx, typ)
	if err != nil {
		return target{}, err
	}
	return s.targetOf(ctx, res, name)
}

// targetOf is the object name of res, in the command's namespace if res
// is namespaced.
func (s *session) targetOf(ctx context.Context, res apiResource, name string) (target, error) {
	ns := ""
	if res.Namespaced {
		var err error
		if ns, err = s.namespace(ctx); err != nil {
			return target{}, err
		}
	}
	return targetIn(s.table(), res, name, ns)
}

// targetIn is the object name of res, in namespace ns if res is
// namespaced.
func targetIn(tab *storagekey.Table, res apiResource, name, ns string) (target, error) {
	o := storagekey.Object{Resource: res.Resource, Name: name}
	if res.Namespaced {
		o.Namespace = ns
	}
	key, err := tab.Key(o)
	if err != nil {
		return target{}, err
	}
	return target{res: res, obj: o, key: key}, nil
}

// point is --rev or --at, or neither: now.
type point struct {
	rev int64
	at  string
}

func (p *point) register(fs *pflag.FlagSet, what string) {
	fs.Int64Var(&p.rev, "rev", 0, "the revision "+what)
	fs.StringVar(&p.at, "at", "", "the time "+what+": RFC 3339, a local date-time or relative (-15m)")
}

// request is the history request for key at the point; required says one
// of --rev and --at must be given.
func (p *point) request(key string, now time.Time, required bool) (*historypb.Request, error) {
	req := &historypb.Request{Key: []byte(key)}
	switch {
	case p.rev != 0 && p.at != "":
		return nil, errors.New("--rev and --at exclude each other")
	case p.rev < 0:
		return nil, fmt.Errorf("--rev %d: want a revision > 0", p.rev)
	case p.rev > 0:
		req.Revision = p.rev
	case p.at != "":
		ms, err := parseAt(p.at, now)
		if err != nil {
			return nil, err
		}
		req.UnixMs = ms
	case required:
		return nil, errors.New("want --rev N or --at TIME")
	}
	return req, nil
}

func parseAt(s string, now time.Time) (int64, error) {
	ms, err := timearg.ParseUnixMs(s, now)
	if err != nil {
		return 0, fmt.Errorf("--at: %w", err)
	}
	return ms, nil
}

// parseSince reads --since and --until: a TIME, or a bare duration as
// kubectl logs --since takes it (1h: an hour ago; 2d: two days ago).
func parseSince(flag, s string, now time.Time) (int64, error) {
	ms, err := timearg.SinceUnixMs(s, now)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", flag, err)
	}
	return ms, nil
}

// output is -o: the formats a command prints, the first its default.
type output struct {
	format  string
	formats []string
}

func outputFlag(fs *pflag.FlagSet, formats ...string) *output {
	o := &output{formats: formats}
	fs.StringVarP(&o.format, "output", "o", formats[0], "output format: "+strings.Join(formats, ", "))
	return o
}

func (o *output) check() error {
	if !slices.Contains(o.formats, o.format) {
		return fmt.Errorf("--output %q: want one of %s", o.format, strings.Join(o.formats, ", "))
	}
	return nil
}

// stateAt checks -o, resolves the command's object and reads it at --rev
// or --at (one is required): the target, the revision read, and the value
// then (nil when it did not exist).
func (s *session) stateAt(ctx context.Context, args []string, key string, at *point, out *output) (target, int64, *mvccpb.KeyValue, error) {
	if err := out.check(); err != nil {
		return target{}, 0, nil, err
	}
	t, err := s.target(ctx, args, key)
	if err != nil {
		return target{}, 0, nil, err
	}
	req, err := at.request(t.key, s.now(), true)
	if err != nil {
		return target{}, 0, nil, err
	}
	rev, kv, err := s.state(ctx, req)
	return t, rev, kv, err
}

// confirm asks question on standard error and reads the answer from
// standard input; yes answers for scripts. An empty answer is def.
func (s *session) confirm(question string, def, yes bool) (bool, error) {
	if yes {
		return true, nil
	}
	hint := "[y/N]"
	if def {
		hint = "[Y/n]"
	}
	fmt.Fprintf(s.errOut, "%s %s ", question, hint)
	if s.answers == nil {
		s.answers = bufio.NewReader(s.in)
	}
	line, err := s.answers.ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(s.errOut)
		return false, errors.New("no answer on standard input: pass --yes to go ahead without asking")
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "":
		return def, nil
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// age is how long ago unixMs was, as kubectl prints ages.
func (s *session) age(unixMs int64) string {
	if unixMs == 0 {
		return "<unknown>"
	}
	return duration.HumanDuration(s.now().Sub(time.UnixMilli(unixMs)))
}

// when is a commit time in RFC 3339, in the local zone.
func (s *session) when(unixMs int64) string { return timearg.Format(unixMs, s.loc) }
