package apiagg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantyroot/quantykube/pkg/history"
)

// A Service holds addresses and ports that kube-apiserver allocates when
// it creates one: its ClusterIPs, its NodePorts and its health-check
// NodePort. A restore that brings a deleted Service back writes them
// without kube-apiserver allocating anything, and until its repair loops
// catch up (an IPAddress within moments, NodePorts every 3 minutes in
// v1.37) another Service could be given the same. So a re-created
// Service comes back with allocations kube-apiserver holds, or not at all
// (ADR-036):
//   - each ClusterIP is held first, as kube-apiserver v1.37 holds one: an
//     IPAddress object naming the Service (Cluster.HoldIP); one held by
//     another object refuses the restore;
//   - its NodePorts are set in kube-apiserver's NodePort allocation
//     (the RangeAllocation at PREFIX/ranges/servicenodeports) in the same
//     transaction as the Service, conditional on the allocation being as
//     read: a port allocated since refuses the restore, and
//     kube-apiserver's allocator, which writes that key with the same
//     condition, sees the ports taken.

// serviceAllocations is what a stored Service holds.
type serviceAllocations struct {
	clusterIPs []string
	nodePorts  []int
}

// Service field numbers (k8s.io/api core/v1 generated.proto).
const (
	serviceSpecField        protowire.Number = 2
	specPortsField          protowire.Number = 1
	specClusterIPField      protowire.Number = 3
	specHealthCheckField    protowire.Number = 12
	specClusterIPsField     protowire.Number = 18
	portNodePortField       protowire.Number = 5
	rangeAllocRangeField    protowire.Number = 2
	rangeAllocDataField     protowire.Number = 3
	serviceNodePortsKeyPath                  = "/ranges/servicenodeports"
)

// allocationsOf reads what a stored Service holds.
func allocationsOf(o *storedObject) (serviceAllocations, error) {
	var a serviceAllocations
	if o.envelope == nil {
		var svc struct {
			Spec struct {
				ClusterIP           string   `json:"clusterIP"`
				ClusterIPs          []string `json:"clusterIPs"`
				HealthCheckNodePort int      `json:"healthCheckNodePort"`
				Ports               []struct {
					NodePort int `json:"nodePort"`
				} `json:"ports"`
			} `json:"spec"`
		}
		b, err := json.Marshal(o.object)
		if err == nil {
			err = json.Unmarshal(b, &svc)
		}
		if err != nil {
			return a, fmt.Errorf("the Service does not decode: %w", err)
		}
		a.clusterIPs = svc.Spec.ClusterIPs
		if len(a.clusterIPs) == 0 && svc.Spec.ClusterIP != "" {
			a.clusterIPs = []string{svc.Spec.ClusterIP}
		}
		for _, p := range svc.Spec.Ports {
			a.nodePorts = append(a.nodePorts, p.NodePort)
		}
		a.nodePorts = append(a.nodePorts, svc.Spec.HealthCheckNodePort)
		return a.clean(), nil
	}
	var single string
	for _, f := range o.fields {
		num, typ, n := protowire.ConsumeTag(f)
		if num != serviceSpecField || typ != protowire.BytesType {
			continue
		}
		spec, _ := protowire.ConsumeBytes(f[n:])
		err := eachField(spec, func(num protowire.Number, v []byte, x uint64) error {
			switch num {
			case specClusterIPField:
				single = string(v)
			case specClusterIPsField:
				a.clusterIPs = append(a.clusterIPs, string(v))
			case specHealthCheckField:
				a.nodePorts = append(a.nodePorts, int(int32(x)))
			case specPortsField:
				return eachField(v, func(num protowire.Number, _ []byte, x uint64) error {
					if num == portNodePortField {
						a.nodePorts = append(a.nodePorts, int(int32(x)))
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return a, fmt.Errorf("the Service's spec does not decode: %w", err)
		}
	}
	if len(a.clusterIPs) == 0 && single != "" {
		a.clusterIPs = []string{single}
	}
	return a.clean(), nil
}

// clean leaves out what holds nothing: a headless Service's "None", and
// ports of 0.
func (a serviceAllocations) clean() serviceAllocations {
	var out serviceAllocations
	for _, ip := range a.clusterIPs {
		if ip != "" && ip != "None" {
			out.clusterIPs = append(out.clusterIPs, ip)
		}
	}
	for _, p := range a.nodePorts {
		if p > 0 {
			out.nodePorts = append(out.nodePorts, p)
		}
	}
	return out
}

// eachField calls f with each field of a protobuf message: the bytes of
// a length-delimited one, the number of a varint.
func eachField(b []byte, f func(num protowire.Number, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v, x); err != nil {
			return err
		}
	}
	return nil
}

// nodePortAllocation is kube-apiserver's RangeAllocation of NodePorts as
// stored: the port range and the bitmap of allocated offsets in it (bit i
// of a big-endian number: port base+i).
type nodePortAllocation struct {
	kv        *mvccpb.KeyValue
	base, max int
	bits      *big.Int
	// envelope and fields hold a protobuf value, all fields but data in
	// their order; json a JSON one.
	envelope *runtime.Unknown
	fields   [][]byte
	json     map[string]any
}

func decodeNodePorts(kv *mvccpb.KeyValue) (*nodePortAllocation, error) {
	a := &nodePortAllocation{kv: kv, bits: new(big.Int)}
	var rangeSpec string
	var data []byte
	b := kv.Value
	switch {
	case len(b) >= len(protobufMagic) && string(b[:len(protobufMagic)]) == string(protobufMagic):
		env := &runtime.Unknown{}
		if err := env.Unmarshal(b[len(protobufMagic):]); err != nil {
			return nil, fmt.Errorf("the NodePort allocation is not a Kubernetes protobuf envelope: %w", err)
		}
		a.envelope = env
		raw := env.Raw
		for len(raw) > 0 {
			num, typ, n := protowire.ConsumeTag(raw)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			m := protowire.ConsumeFieldValue(num, typ, raw[n:])
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			field := raw[:n+m]
			raw = raw[n+m:]
			v, _ := protowire.ConsumeBytes(field[n:])
			switch {
			case num == rangeAllocDataField && typ == protowire.BytesType:
				data = v
				continue
			case num == rangeAllocRangeField && typ == protowire.BytesType:
				rangeSpec = string(v)
			}
			a.fields = append(a.fields, field)
		}
	default:
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("the NodePort allocation is neither protobuf nor JSON: %w", err)
		}
		a.json = m
		rangeSpec, _ = m["range"].(string)
		if d, ok := m["data"].(string); ok {
			var err error
			if data, err = decodeBase64(d); err != nil {
				return nil, err
			}
		}
	}
	lo, hi, ok := strings.Cut(rangeSpec, "-")
	var err1, err2 error
	a.base, err1 = strconv.Atoi(lo)
	a.max, err2 = strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || a.max < a.base {
		return nil, fmt.Errorf("the NodePort allocation's range %q is not BASE-LAST", rangeSpec)
	}
	a.bits.SetBytes(data)
	return a, nil
}

func decodeBase64(s string) ([]byte, error) {
	var b []byte
	if err := json.Unmarshal([]byte(strconv.Quote(s)), &b); err != nil {
		return nil, fmt.Errorf("the NodePort allocation's data is not base64: %w", err)
	}
	return b, nil
}

// take sets ports in the bitmap; a port in the range already set is an
// error naming it (a port outside the range is none of the allocator's).
func (a *nodePortAllocation) take(ports []int) error {
	for _, p := range ports {
		if p < a.base || p > a.max {
			continue
		}
		if a.bits.Bit(p-a.base) == 1 {
			return fmt.Errorf("its NodePort %d is allocated to another Service since", p)
		}
		a.bits.SetBit(a.bits, p-a.base, 1)
	}
	return nil
}

// encode is the allocation as stored, with the bitmap as it is now.
func (a *nodePortAllocation) encode() ([]byte, error) {
	data := a.bits.Bytes()
	if a.envelope == nil {
		m := make(map[string]any, len(a.json))
		for k, v := range a.json {
			m[k] = v
		}
		m["data"] = data
		return json.Marshal(m)
	}
	var raw []byte
	placed := false
	for _, f := range a.fields {
		if num, _, _ := protowire.ConsumeTag(f); !placed && num > rangeAllocDataField {
			raw = protowire.AppendTag(raw, rangeAllocDataField, protowire.BytesType)
			raw, placed = protowire.AppendBytes(raw, data), true
		}
		raw = append(raw, f...)
	}
	if !placed {
		raw = protowire.AppendTag(raw, rangeAllocDataField, protowire.BytesType)
		raw = protowire.AppendBytes(raw, data)
	}
	env := *a.envelope
	env.Raw = raw
	b, err := env.Marshal()
	if err != nil {
		return nil, errors.New("encoding the protobuf envelope: " + err.Error())
	}
	return append(append([]byte{}, protobufMagic...), b...), nil
}

// holdAllocations makes kube-apiserver hold what the Service o (stored as
// obj) holds before it is written back: its ClusterIPs through c, and its
// NodePorts as writes into w, made in the restore's transaction. held
// lists the ClusterIPs held here, for release should the restore not be
// written.
func (s *Server) holdAllocations(ctx context.Context, ns, name string, obj *storedObject, w *history.RestoreWrite) (held []string, err error) {
	a, err := allocationsOf(obj)
	if err != nil {
		return nil, errNotAnObject{err.Error()}
	}
	if len(a.clusterIPs) > 0 && s.cluster == nil {
		return nil, errNotAnObject{"its ClusterIP cannot be held in kube-apiserver's allocator: the store has no credentials for kube-apiserver (--api-kubeconfig)"}
	}
	for _, ip := range a.clusterIPs {
		created, err := s.cluster.HoldIP(ctx, ip, ns, name)
		if err != nil {
			return held, err
		}
		if created {
			held = append(held, ip)
		}
	}
	if len(a.nodePorts) == 0 {
		return held, nil
	}
	key := []byte(s.keys.Prefix() + serviceNodePortsKeyPath)
	kv, _, err := s.svc.Current(ctx, key)
	if err != nil {
		return held, fmt.Errorf("reading the NodePort allocation: %w", err)
	}
	if kv == nil {
		return held, errNotAnObject{fmt.Sprintf("kube-apiserver's NodePort allocation (%s) is not in the store", key)}
	}
	alloc, err := decodeNodePorts(kv)
	if err != nil {
		return held, errNotAnObject{err.Error()}
	}
	if err := alloc.take(a.nodePorts); err != nil {
		return held, errPortTaken{err.Error()}
	}
	value, err := alloc.encode()
	if err != nil {
		return held, err
	}
	w.Also = append(w.Also, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: value}}})
	w.If = append(w.If, &pb.Compare{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: kv.ModRevision}})
	return held, nil
}

// errPortTaken is a NodePort of a re-created Service that kube-apiserver
// has allocated since.
type errPortTaken struct{ why string }

func (e errPortTaken) Error() string { return e.why }
