package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podTemplate(name string) *corev1.PodTemplate {
	return &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e": "page"}},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/pause:1"}},
		}},
	}
}

func pageName(i int) string { return fmt.Sprintf("page-%02d", i) }

// storageLists counts the LISTs of a resource kube-apiserver has served
// from its storage (etcd3, that is QuantyKube) or from its watch cache.
func storageLists(t *testing.T, c *Cluster, resource, storage string) float64 {
	t.Helper()
	return metric(t, c, "apiserver_storage_list_total", map[string]string{"group": "", "resource": resource, "storage": storage})
}

// checkPagedList pages through podtemplates, the resource kube-apiserver
// serves without a watch cache: there every page is a Range of QuantyKube
// (kube-apiserver's etcd3 storage calls Get with a limit at the revision of
// the continue token), and the checks below prove it with kube-apiserver's
// own count of LISTs served from storage="etcd". A cached resource would
// prove little: kube-apiserver answers its paged lists from the watch
// cache's memory, whatever the datastore's paging and counting do.
//
// What QuantyKube must get right: remainingItemCount is its exact count of
// the keys after the page at that revision; every page after the first
// reads the first page's revision, so an object created after the first
// page is not listed and one deleted after it still is; and a list at an
// exact old resourceVersion is that revision's state.
func checkPagedList(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	pts := c.Kube.CoreV1().PodTemplates(ns)
	const n, limit = 23, 5
	var want []string
	for i := range n {
		if _, err := pts.Create(ctx, podTemplate(pageName(i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", pageName(i), err)
		}
		want = append(want, pageName(i))
	}

	etcdBefore := storageLists(t, c, UncachedResource, "etcd")
	cacheBefore := storageLists(t, c, UncachedResource, "watchcache")
	lateNames := []string{"page-late-1", "page-late-2"}
	var got []string
	var pinned string
	opts := metav1.ListOptions{Limit: limit}
	pages := 0
	for {
		page, err := pts.List(ctx, opts)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		got = append(got, names(page.Items)...)
		if pages == 1 {
			pinned = page.ResourceVersion
			// Between the first page and the others: two new objects
			// after the pinned revision, and the delete of one that a
			// later page lists. Counted now instead of at the pinned
			// revision, the rest of the list would be one longer.
			for _, late := range lateNames {
				if _, err := pts.Create(ctx, podTemplate(late), metav1.CreateOptions{}); err != nil {
					t.Fatalf("create %s: %v", late, err)
				}
			}
			if err := pts.Delete(ctx, pageName(n-1), metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s: %v", pageName(n-1), err)
			}
		} else if page.ResourceVersion != pinned {
			t.Errorf("page %d: resourceVersion %s, want the first page's %s", pages, page.ResourceVersion, pinned)
		}
		remaining := n - len(got)
		switch {
		case remaining > 0 && (page.RemainingItemCount == nil || *page.RemainingItemCount != int64(remaining)):
			t.Errorf("page %d (%d items): remainingItemCount %v, want %d", pages, len(page.Items), ptrString(page.RemainingItemCount), remaining)
		case remaining <= 0 && page.RemainingItemCount != nil:
			t.Errorf("page %d, the last: remainingItemCount %d, want none", pages, *page.RemainingItemCount)
		}
		if page.Continue == "" || pages > n {
			break
		}
		opts.Continue = page.Continue
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged list at revision %s:\n got %v\nwant %v\n(%v were created and %s deleted after the first page)", pinned, got, want, lateNames, pageName(n-1))
	}
	if want := (n + limit - 1) / limit; pages != want {
		t.Errorf("%d pages of %d, want %d", pages, limit, want)
	}
	// Other LISTs may run meanwhile (the namespace controller lists every
	// resource of a namespace it deletes), hence at least.
	if d := storageLists(t, c, UncachedResource, "etcd") - etcdBefore; d < float64(pages) {
		t.Errorf("kube-apiserver served %v LISTs of %s from storage for our %d pages: the pages did not reach QuantyKube", d, UncachedResource, pages)
	}
	if d := storageLists(t, c, UncachedResource, "watchcache") - cacheBefore; d != 0 {
		t.Errorf("kube-apiserver served %v LISTs of %s from its watch cache, which should be off for it", d, UncachedResource)
	}

	exact, err := pts.List(ctx, metav1.ListOptions{ResourceVersion: pinned, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatalf("list at resourceVersion %s (Exact): %v", pinned, err)
	}
	if got := names(exact.Items); !slices.Equal(got, want) {
		t.Errorf("list at resourceVersion %s (Exact):\n got %v\nwant %v", pinned, got, want)
	}

	// Now: the late ones in, the deleted one out; two items after a page
	// of n-1.
	now, err := pts.List(ctx, metav1.ListOptions{Limit: n - 1})
	if err != nil {
		t.Fatalf("list now: %v", err)
	}
	if now.RemainingItemCount == nil || *now.RemainingItemCount != int64(len(lateNames)) || now.Continue == "" {
		t.Errorf("list now, limit %d: remainingItemCount %v, continue %q, want %d and a token",
			n-1, ptrString(now.RemainingItemCount), now.Continue, len(lateNames))
	}
	rest, err := pts.List(ctx, metav1.ListOptions{Limit: n - 1, Continue: now.Continue})
	if err != nil {
		t.Fatalf("list now, second page: %v", err)
	}
	wantNow := append(slices.Clone(want[:n-1]), lateNames...)
	if got := append(names(now.Items), names(rest.Items)...); !slices.Equal(got, wantNow) {
		t.Errorf("list now:\n got %v\nwant %v", got, wantNow)
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// checkKubectlChunkedList: kubectl's own paging (--chunk-size) and
// `kubectl get --raw` of one page, on the uncached resource.
func checkKubectlChunkedList(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	const n = 12
	var want []string
	for i := range n {
		if _, err := c.Kube.CoreV1().PodTemplates(ns).Create(ctx, podTemplate(pageName(i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", pageName(i), err)
		}
		want = append(want, "podtemplate/"+pageName(i))
	}
	out, err := c.Kubectl(t, "-n", ns, "get", "podtemplates", "--chunk-size=5", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		t.Errorf("kubectl get --chunk-size=5:\n got %v\nwant %v", got, want)
	}
	out, err = c.Kubectl(t, "get", "--raw", "/api/v1/namespaces/"+ns+"/podtemplates?limit=5")
	if err != nil {
		t.Fatal(err)
	}
	var page corev1.PodTemplateList
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("kubectl get --raw: %v\n%s", err, out)
	}
	if len(page.Items) != 5 || page.RemainingItemCount == nil || *page.RemainingItemCount != n-5 || page.Continue == "" {
		t.Errorf("kubectl get --raw ?limit=5: %d items, remainingItemCount %s, continue %q; want 5, %d and a token",
			len(page.Items), ptrString(page.RemainingItemCount), page.Continue, n-5)
	}
}
