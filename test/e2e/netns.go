package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Netns is a network namespace the test makes, joined to the host by a
// veth pair: QuantyKube runs inside it, on NSIP, because kube-apiserver
// refuses EndpointSlices with loopback addresses, and an aggregated API is
// reached through one. kube-apiserver listens on HostIP, the host end, so
// that QuantyKube can ask it about its callers. Both addresses are the
// test's own (10.213.x.1 and .2, a /30), never another host's.
type Netns struct {
	Name           string
	HostIP, NSIP   net.IP
	hostLink, nsLk string
}

// NewNetns makes the namespace and its link, and removes them when t
// ends. It needs root and iproute2; without them t fails (the check is
// part of the suite, not optional).
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("e2e: the aggregated API's checks put QuantyKube in a network namespace of their own, which needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("e2e: `ip` (iproute2) is needed to make a network namespace")
	}
	id := fmt.Sprintf("%06x", rand.IntN(1<<24))
	subnet := rand.IntN(64) * 4 // 10.213.0.<subnet>/30 .. : a /30 of the test's own
	third := rand.IntN(256)
	n := &Netns{
		Name:     "qke2e-" + id,
		HostIP:   net.IPv4(10, 213, byte(third), byte(subnet+1)),
		NSIP:     net.IPv4(10, 213, byte(third), byte(subnet+2)),
		hostLink: "qkh" + id,
		nsLk:     "qkn" + id,
	}
	t.Cleanup(func() {
		// Deleting the namespace deletes the veth pair with it.
		_ = ip("netns", "del", n.Name)
		_ = ip("link", "del", n.hostLink)
	})
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.hostLink, "type", "veth", "peer", "name", n.nsLk},
		{"link", "set", n.nsLk, "netns", n.Name},
		{"addr", "add", n.HostIP.String() + "/30", "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
		{"netns", "exec", n.Name, "ip", "addr", "add", n.NSIP.String() + "/30", "dev", n.nsLk},
		{"netns", "exec", n.Name, "ip", "link", "set", n.nsLk, "up"},
		{"netns", "exec", n.Name, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			t.Fatalf("network namespace: %v", err)
		}
	}
	return n
}

func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
