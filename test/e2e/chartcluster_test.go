package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// chartChecks run the chart against the cluster's kube-apiserver:
// chart-profiles on every cluster (server-side dry runs only, nothing
// stays); chart-docs where no aggregated API is registered yet (its
// installs own the APIService and the quanty-* roles while they last),
// and chart-run, which needs PostgreSQL: both on PostgreSQL's cluster.
var chartChecks = []Check{
	{"chart-profiles", checkChartProfiles},
}

var chartInstallChecks = []Check{
	{"chart-docs", checkChartDocs},
	{"chart-run", checkChartRun},
}

// restrictedLabels make a namespace enforce, and warn about, Pod Security's
// restricted profile at the cluster's own version of it.
var restrictedLabels = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
	"pod-security.kubernetes.io/warn":            "restricted",
	"pod-security.kubernetes.io/warn-version":    "latest",
}

// restrictedNamespace is a namespace of t's own that enforces restricted.
func (c *Cluster) restrictedNamespace(t *testing.T) string {
	t.Helper()
	ns := c.Namespace(t)
	obj, err := c.Kube.CoreV1().Namespaces().Get(c.Ctx(t), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	for k, v := range restrictedLabels {
		obj.Labels[k] = v
	}
	if _, err := c.Kube.CoreV1().Namespaces().Update(c.Ctx(t), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// checkChartProfiles: for every ci/*-values.yaml profile, every object
// `helm template` renders is accepted by kube-apiserver's server-side dry
// run in a namespace that enforces Pod Security's restricted profile,
// with no warning (a workload whose pods restricted would refuse is
// accepted with a warning: the pods are refused later, by the
// controller); the pod each workload makes is accepted too, where enforce
// applies. Rendered again as if cert-manager and the Prometheus Operator
// were installed, the profiles that run a store have the serving
// Certificate, the CA injection and the ServiceMonitor (not applied: their
// kinds are not in this cluster).
func checkChartProfiles(t *testing.T, c *Cluster) {
	for _, name := range slices.Concat(chartShapes, chartVariants) {
		t.Run(name, func(t *testing.T) {
			file := chartProfiles(t)[name]
			ns := c.restrictedNamespace(t)
			c.dryRunChart(t, ns, renderChart(t, "quantykube", ns, "-f", file), name != "external")

			with, err := parseObjects(renderChart(t, "quantykube", ns, "-f", file,
				"--api-versions", "cert-manager.io/v1", "--api-versions", "monitoring.coreos.com/v1"))
			if err != nil {
				t.Fatal(err)
			}
			has := func(kind, name string) bool {
				return slices.ContainsFunc(with, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
			}
			if name == "external" {
				if has("Certificate", "quantykube-api") || has("ServiceMonitor", "quantykube") {
					t.Errorf("the external profile runs no store, yet renders %s", kinds(with))
				}
				return
			}
			if !has("Certificate", "quantykube-api") || !has("ServiceMonitor", "quantykube") {
				t.Errorf("with cert-manager and the Prometheus Operator: %s, want the Certificate quantykube-api and the ServiceMonitor", kinds(with))
			}
			for _, o := range with {
				if o.GetKind() != "APIService" {
					continue
				}
				if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != ns+"/quantykube-api" {
					t.Errorf("APIService: cert-manager.io/inject-ca-from %q, want %s/quantykube-api", got, ns)
				}
				if ca, _, _ := unstructured.NestedString(o.Object, "spec", "caBundle"); ca != "" {
					t.Errorf("APIService: a caBundle beside cert-manager's injection")
				}
			}
		})
	}
	// A chart that includes the store's container in its own pod
	// (testdata/chart-include).
	t.Run("sidecar-included", func(t *testing.T) {
		ns := c.restrictedNamespace(t)
		c.dryRunChart(t, ns, renderIncluding(t, "tenant-b", ns), true)
	})
}

// dryRunChart applies rendered objects with kube-apiserver's server-side
// dry run in ns, and fails t on a refusal or a warning; it then asks for
// the pod of each workload (after making the ServiceAccounts they name,
// for real, in ns), where Pod Security's enforce applies. withPods says
// whether the objects must hold a workload.
func (c *Cluster) dryRunChart(t *testing.T, ns string, out []byte, withPods bool) {
	t.Helper()
	objs, err := parseObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := c.kubectlStdin(t, out, "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server (%s): %v\n%s", kinds(objs), err, stderr)
	}
	if strings.TrimSpace(stderr) != "" {
		t.Errorf("kubectl apply --dry-run=server warned:\n%s", stderr)
	}
	if n := strings.Count(stdout, "(server dry run)"); n != len(objs) {
		t.Errorf("kube-apiserver accepted %d of %d objects (%s):\n%s", n, len(objs), kinds(objs), stdout)
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			var sa corev1.ServiceAccount
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &sa); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Kube.CoreV1().ServiceAccounts(ns).Create(c.Ctx(t), &sa, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pods := 0
	for _, o := range objs {
		if pod := podOf(t, o); pod != nil {
			pods++
			_, err := c.Kube.CoreV1().Pods(ns).Create(c.Ctx(t), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Errorf("the pod of %s: %v", objectKey(o), err)
			}
		}
	}
	if (pods > 0) != withPods {
		t.Errorf("%d workloads rendered (%s)", pods, kinds(objs))
	}
}

// podOf is the pod a Deployment or StatefulSet makes (its template, and
// for a StatefulSet the claims of its volumeClaimTemplates for ordinal 0),
// or nil for another kind.
func podOf(t *testing.T, o *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	switch o.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatalf("%s: %v", objectKey(o), err)
		}
		pod.ObjectMeta, pod.Spec = *d.Spec.Template.ObjectMeta.DeepCopy(), d.Spec.Template.Spec
		pod.Name = d.Name + "-e2e"
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
			t.Fatalf("%s: %v", objectKey(o), err)
		}
		pod.ObjectMeta, pod.Spec = *s.Spec.Template.ObjectMeta.DeepCopy(), s.Spec.Template.Spec
		pod.Name = s.Name + "-0"
		for _, pvc := range s.Spec.VolumeClaimTemplates {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: pvc.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name + "-" + s.Name + "-0"},
			}})
		}
	default:
		return nil
	}
	return pod
}

// kubectlStdin runs kubectl against the cluster with stdin, bounded, and
// returns both its outputs (kube-apiserver's warnings are on stderr).
func (c *Cluster) kubectlStdin(t testing.TB, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, c.kubectl, append(c.kubectlFlags(), args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &o, &e
	if err := cmd.Run(); err != nil {
		return o.String(), e.String(), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), nil
}
