package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The limit is the tightest of the process's cgroup and its ancestors, in
// cgroup v2's and v1's layouts; "max", v1's "no limit" and a missing file
// are no limit.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name    string
		cgroup  string
		files   map[string]string
		want    int64
		wantDir string
	}{
		{name: "v2, the service's own limit", cgroup: "0::/system.slice/qk.service\n",
			files: map[string]string{"system.slice/qk.service/memory.max": "1073741824\n", "system.slice/memory.max": "max\n"},
			want:  1 << 30, wantDir: "system.slice/qk.service"},
		{name: "v2, a parent's tighter limit", cgroup: "0::/kubepods/pod1/c1\n",
			files: map[string]string{"kubepods/pod1/c1/memory.max": "max\n", "kubepods/pod1/memory.max": "536870912\n", "kubepods/memory.max": "8589934592\n"},
			want:  512 << 20, wantDir: "kubepods/pod1"},
		{name: "v2 in a cgroup namespace", cgroup: "0::/\n",
			files: map[string]string{"memory.max": "268435456\n"},
			want:  256 << 20, wantDir: ""},
		{name: "v2 without a limit", cgroup: "0::/user.slice\n",
			files: map[string]string{"user.slice/memory.max": "max\n"}},
		{name: "v1", cgroup: "12:cpu,cpuacct:/x\n11:memory:/docker/abc\n",
			files: map[string]string{"memory/docker/abc/memory.limit_in_bytes": "209715200\n", "memory/memory.limit_in_bytes": "9223372036854771712\n"},
			want:  200 << 20, wantDir: "memory/docker/abc"},
		{name: "v1 without a limit", cgroup: "11:memory:/\n",
			files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range c.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			proc := filepath.Join(t.TempDir(), "cgroup")
			if err := os.WriteFile(proc, []byte(c.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			got, dir, err := cgroupMemoryLimit(proc, root)
			if err != nil {
				t.Fatal(err)
			}
			wantDir := ""
			if c.want != 0 {
				wantDir = filepath.Join(root, c.wantDir)
			}
			if got != c.want || dir != wantDir {
				t.Errorf("limit %d in %q, want %d in %q", got, dir, c.want, wantDir)
			}
		})
	}
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "memory.max"), []byte("lots\n"), 0o644)
	proc := filepath.Join(t.TempDir(), "cgroup")
	os.WriteFile(proc, []byte("0::/\n"), 0o644)
	if _, _, err := cgroupMemoryLimit(proc, root); err == nil {
		t.Error("a memory.max of \"lots\" read as a limit")
	}
}
