package get

// kubectl get's columns, computed from a stored object: kube-apiserver
// prints a table from the live object (k8s.io/kubernetes' printers, and
// a CustomResourceDefinition's additionalPrinterColumns), and the past has
// no API server to ask, so the plugin computes the same columns itself
// for the types people list most, from the fields kubectl's printers
// read. Every other type gets NAME and AGE, as kubectl prints a type
// without columns of its own.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/util/jsonpath"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// column is one column after NAME.
type column struct {
	name  string
	value func(obj map[string]any, then time.Time) string
}

// field is a column of one field's value, "<none>" when unset.
func field(name string, path ...string) column {
	return column{name, func(obj map[string]any, _ time.Time) string { return str(obj, path...) }}
}

func str(obj map[string]any, path ...string) string {
	v, ok, _ := unstructured.NestedFieldNoCopy(obj, path...)
	if !ok || v == nil {
		return "<none>"
	}
	return fmt.Sprint(v)
}

// num is an integer field, 0 when unset (as kubectl prints replicas).
func num(obj map[string]any, path ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(obj, path...)
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

func count(name string, path ...string) column {
	return column{name, func(obj map[string]any, _ time.Time) string { return fmt.Sprint(num(obj, path...)) }}
}

// ageColumn is how old the object was then.
var ageColumn = column{"AGE", func(obj map[string]any, then time.Time) string {
	return ageAt(str(obj, "metadata", "creationTimestamp"), then)
}}

func ageAt(ts string, then time.Time) string {
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return "<unknown>"
	}
	return duration.HumanDuration(then.Sub(t))
}

// ratio is "a/b" of two integer fields.
func ratio(name string, a, b []string) column {
	return column{name, func(obj map[string]any, _ time.Time) string {
		return fmt.Sprintf("%d/%d", num(obj, a...), num(obj, b...))
	}}
}

// containers are the template's (or the Pod's) containers' names and
// images, comma-separated, as kubectl -o wide prints them.
func containers(name, what string, path ...string) column {
	return column{name, func(obj map[string]any, _ time.Time) string {
		list, _, _ := unstructured.NestedSlice(obj, path...)
		var out []string
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				s, _ := m[what].(string)
				out = append(out, s)
			}
		}
		return strings.Join(out, ",")
	}}
}

// selectorColumn is a workload's spec.selector.matchLabels as k=v,...
var selectorColumn = column{"SELECTOR", func(obj map[string]any, _ time.Time) string {
	m, _, _ := unstructured.NestedStringMap(obj, "spec", "selector", "matchLabels")
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	if len(out) == 0 {
		return "<none>"
	}
	return strings.Join(out, ",")
}}

var templateContainers = []string{"spec", "template", "spec", "containers"}

// builtinColumns are kubectl's columns of the types it lists most, and
// with -o wide the wide ones, by resource.
var builtinColumns = map[string]struct{ cols, wide []column }{
	"pods": {[]column{podReady, podStatus, podRestarts, ageColumn},
		[]column{field("IP", "status", "podIP"), field("NODE", "spec", "nodeName")}},
	"deployments.apps": {[]column{ratio("READY", []string{"status", "readyReplicas"}, []string{"spec", "replicas"}),
		count("UP-TO-DATE", "status", "updatedReplicas"), count("AVAILABLE", "status", "availableReplicas"), ageColumn},
		[]column{containers("CONTAINERS", "name", templateContainers...), containers("IMAGES", "image", templateContainers...), selectorColumn}},
	"replicasets.apps": {[]column{count("DESIRED", "spec", "replicas"), count("CURRENT", "status", "replicas"),
		count("READY", "status", "readyReplicas"), ageColumn},
		[]column{containers("CONTAINERS", "name", templateContainers...), containers("IMAGES", "image", templateContainers...), selectorColumn}},
	"statefulsets.apps": {[]column{ratio("READY", []string{"status", "readyReplicas"}, []string{"spec", "replicas"}), ageColumn},
		[]column{containers("CONTAINERS", "name", templateContainers...), containers("IMAGES", "image", templateContainers...)}},
	"daemonsets.apps": {[]column{count("DESIRED", "status", "desiredNumberScheduled"), count("CURRENT", "status", "currentNumberScheduled"),
		count("READY", "status", "numberReady"), count("UP-TO-DATE", "status", "updatedNumberScheduled"),
		count("AVAILABLE", "status", "numberAvailable"), ageColumn}, nil},
	"jobs.batch": {[]column{ratio("COMPLETIONS", []string{"status", "succeeded"}, []string{"spec", "completions"}), ageColumn}, nil},
	"services": {[]column{field("TYPE", "spec", "type"), field("CLUSTER-IP", "spec", "clusterIP"), externalIP, servicePorts, ageColumn},
		[]column{selectorMap}},
	"configmaps": {[]column{{"DATA", func(obj map[string]any, _ time.Time) string {
		d, _, _ := unstructured.NestedMap(obj, "data")
		b, _, _ := unstructured.NestedMap(obj, "binaryData")
		return fmt.Sprint(len(d) + len(b))
	}}, ageColumn}, nil},
	"secrets": {[]column{field("TYPE", "type"), {"DATA", func(obj map[string]any, _ time.Time) string {
		d, _, _ := unstructured.NestedMap(obj, "data")
		return fmt.Sprint(len(d))
	}}, ageColumn}, nil},
	"namespaces": {[]column{field("STATUS", "status", "phase"), ageColumn}, nil},
}

var podReady = column{"READY", func(obj map[string]any, _ time.Time) string {
	specs, _, _ := unstructured.NestedSlice(obj, "spec", "containers")
	statuses, _, _ := unstructured.NestedSlice(obj, "status", "containerStatuses")
	ready := 0
	for _, c := range statuses {
		if m, ok := c.(map[string]any); ok && m["ready"] == true {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, len(specs))
}}

var podRestarts = column{"RESTARTS", func(obj map[string]any, _ time.Time) string {
	statuses, _, _ := unstructured.NestedSlice(obj, "status", "containerStatuses")
	var n int64
	for _, c := range statuses {
		if m, ok := c.(map[string]any); ok {
			n += num(m, "restartCount")
		}
	}
	return fmt.Sprint(n)
}}

// podStatus is kubectl's STATUS of a Pod, in its main cases: Terminating
// once deletion began, a container's waiting or terminated reason, else
// the reason or phase.
var podStatus = column{"STATUS", func(obj map[string]any, _ time.Time) string {
	if _, ok, _ := unstructured.NestedFieldNoCopy(obj, "metadata", "deletionTimestamp"); ok {
		return "Terminating"
	}
	reason := str(obj, "status", "phase")
	if r, ok, _ := unstructured.NestedString(obj, "status", "reason"); ok && r != "" {
		reason = r
	}
	statuses, _, _ := unstructured.NestedSlice(obj, "status", "containerStatuses")
	for _, c := range statuses {
		m, _ := c.(map[string]any)
		if r, ok, _ := unstructured.NestedString(m, "state", "waiting", "reason"); ok && r != "" {
			return r
		}
		if r, ok, _ := unstructured.NestedString(m, "state", "terminated", "reason"); ok && r != "" {
			return r
		}
	}
	return reason
}}

var externalIP = column{"EXTERNAL-IP", func(obj map[string]any, _ time.Time) string {
	var ips []string
	ing, _, _ := unstructured.NestedSlice(obj, "status", "loadBalancer", "ingress")
	for _, i := range ing {
		if m, ok := i.(map[string]any); ok {
			ips = append(ips, fmt.Sprint(m["ip"]))
		}
	}
	ext, _, _ := unstructured.NestedStringSlice(obj, "spec", "externalIPs")
	ips = append(ips, ext...)
	if len(ips) == 0 {
		if str(obj, "spec", "type") == "LoadBalancer" {
			return "<pending>"
		}
		return "<none>"
	}
	return strings.Join(ips, ",")
}}

var servicePorts = column{"PORT(S)", func(obj map[string]any, _ time.Time) string {
	ports, _, _ := unstructured.NestedSlice(obj, "spec", "ports")
	var out []string
	for _, p := range ports {
		m, _ := p.(map[string]any)
		s := fmt.Sprintf("%d", num(m, "port"))
		if np := num(m, "nodePort"); np != 0 {
			s += fmt.Sprintf(":%d", np)
		}
		proto, _ := m["protocol"].(string)
		out = append(out, s+"/"+proto)
	}
	if len(out) == 0 {
		return "<none>"
	}
	return strings.Join(out, ",")
}}

var selectorMap = column{"SELECTOR", func(obj map[string]any, _ time.Time) string {
	m, _, _ := unstructured.NestedStringMap(obj, "spec", "selector")
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	if len(out) == 0 {
		return "<none>"
	}
	return strings.Join(out, ",")
}}

// columnsOf are the columns of res: kubectl's for a built-in type, a
// custom resource's additionalPrinterColumns from its
// CustomResourceDefinition as it was at the point (kube-apiserver prints
// those in place of AGE, which a CRD lists itself if it wants it), else
// AGE.
func (o *Options) columnsOf(ctx context.Context, res discovery.Resource, at *historypb.Request, wide bool) []column {
	if b, ok := builtinColumns[res.Resource.String()]; ok {
		if wide {
			return append(append([]column(nil), b.cols...), b.wide...)
		}
		return b.cols
	}
	if cols := o.crdColumns(ctx, res, at, wide); cols != nil {
		return cols
	}
	return []column{ageColumn}
}

// crdColumns reads res's CustomResourceDefinition as it was at the point
// and turns the additionalPrinterColumns of res's version into columns;
// nil when there is none to read (a built-in type, or a CRD the caller
// may not get) or it has no columns.
func (o *Options) crdColumns(ctx context.Context, res discovery.Resource, at *historypb.Request, wide bool) []column {
	if !strings.Contains(res.Group, ".") {
		return nil
	}
	key := fmt.Sprintf("%s/apiextensions.k8s.io/customresourcedefinitions/%s.%s", strings.TrimSuffix(o.cluster.EtcdPrefix, "/"), res.Resource.Resource, res.Group)
	_, kv, err := o.cluster.History.State(ctx, &historypb.Request{Key: []byte(key), Revision: at.Revision, UnixMs: at.UnixMs})
	if err != nil || kv == nil {
		return nil
	}
	var cols []column
	for _, c := range objects.CRDColumnsByVersion(kv.Value)[res.Version] {
		if num(c, "priority") > 0 && !wide {
			continue
		}
		if col, ok := jsonPathColumn(c); ok {
			cols = append(cols, col)
		}
	}
	return cols
}

// jsonPathColumn is an additionalPrinterColumn: its name in upper case,
// its jsonPath's value (several joined by commas, as kube-apiserver
// prints them), a date as an age.
func jsonPathColumn(c map[string]any) (column, bool) {
	name, _ := c["name"].(string)
	path, _ := c["jsonPath"].(string)
	typ, _ := c["type"].(string)
	jp := jsonpath.New(name).AllowMissingKeys(true)
	if name == "" || jp.Parse("{"+path+"}") != nil {
		return column{}, false
	}
	return column{strings.ToUpper(name), func(obj map[string]any, then time.Time) string {
		results, err := jp.FindResults(obj)
		if err != nil || len(results) == 0 || len(results[0]) == 0 {
			return "<none>"
		}
		var out []string
		for _, r := range results[0] {
			v := fmt.Sprint(r.Interface())
			if typ == "date" {
				v = ageAt(v, then)
			}
			out = append(out, v)
		}
		return strings.Join(out, ",")
	}}, true
}
