package robustness

import (
	"context"
	"errors"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/tests/v3/framework/config"
	"go.etcd.io/etcd/tests/v3/framework/e2e"
)

// Cluster describes servers started elsewhere to etcd's traffic and watch
// collectors, which take an e2e.EtcdProcessCluster and use nothing of it
// but each member's client endpoints: one member per endpoint. The
// harness neither starts nor stops them; the caller injects the faults.
func Cluster(endpoints []string) *e2e.EtcdProcessCluster {
	c := &e2e.EtcdProcessCluster{}
	for _, ep := range endpoints {
		c.Procs = append(c.Procs, member{endpoint: ep})
	}
	return c
}

// member is one server known by its endpoint. Only EndpointsGRPC answers:
// what manages a process (start, stop, kill, failpoints, logs) is not the
// harness's, and fails or reports nothing.
type member struct{ endpoint string }

var _ e2e.EtcdProcess = member{}

var errNotManaged = errors.New("the robustness harness does not manage its servers' processes")

func (m member) EndpointsGRPC() []string                       { return []string{m.endpoint} }
func (m member) EndpointsHTTP() []string                       { return []string{m.endpoint} }
func (m member) EndpointsMetrics() []string                    { return nil }
func (m member) Etcdctl(...config.ClientOption) *e2e.EtcdctlV3 { return nil }
func (m member) IsRunning() bool                               { return true }
func (m member) Wait(context.Context) error                    { return errNotManaged }
func (m member) Start(context.Context) error                   { return errNotManaged }
func (m member) Restart(context.Context) error                 { return errNotManaged }
func (m member) Stop() error                                   { return errNotManaged }
func (m member) Close() error                                  { return nil }
func (m member) Config() *e2e.EtcdServerProcessConfig {
	return &e2e.EtcdServerProcessConfig{ClientURL: m.endpoint}
}
func (m member) PeerProxy() proxy.Server           { return nil }
func (m member) Failpoints() *e2e.BinaryFailpoints { return nil }
func (m member) LazyFS() *e2e.LazyFS               { return nil }
func (m member) Logs() e2e.LogsExpect              { return nil }
func (m member) Kill() error                       { return errNotManaged }
func (m member) Pause() error                      { return errNotManaged }
func (m member) Resume() error                     { return errNotManaged }
