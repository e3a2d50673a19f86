package apiagg

// Values as kube-apiserver stores them, decoded only as far as a restore's
// checks need: the object's apiVersion and kind, its metadata, and a body
// that kube-apiserver accepts back as a request. Built-in types are stored
// as Kubernetes protobuf (the "k8s\x00" envelope, the very bytes of a
// protobuf request), custom resources as JSON, either as CBOR where that
// storage feature is on, and any of them encrypted at rest ("k8s:enc:"),
// which only kube-apiserver can read. The store links no API types: the
// protobuf envelope and ObjectMeta are apimachinery's own, and every
// top-level Kubernetes type carries its ObjectMeta as field 1.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
)

var (
	protobufMagic = []byte("k8s\x00")
	cborMagic     = []byte{0xd9, 0xd9, 0xf7} // self-described CBOR, as kube-apiserver writes it
	encPrefix     = []byte("k8s:enc:")
)

const (
	protobufContentType = "application/vnd.kubernetes.protobuf"
	jsonContentType     = "application/json"
	// metadataField is ObjectMeta's field number in every top-level
	// Kubernetes type's protobuf message.
	metadataField protowire.Number = 1
)

// storedObject is a Kubernetes object as kube-apiserver stored it.
type storedObject struct {
	APIVersion, Kind string
	Meta             metav1.ObjectMeta
	// envelope and fields hold a protobuf value: its envelope, and the
	// object's top-level fields but metadata, in their order (metaAt is
	// where metadata stood among them, metaRaw the field as stored).
	envelope *runtime.Unknown
	fields   [][]byte
	metaAt   int
	metaRaw  []byte
	// object holds a JSON (or CBOR, cbor set) value.
	object map[string]any
	cbor   bool
}

// errNotAnObject says why a value cannot be handed to kube-apiserver as an
// object.
type errNotAnObject struct{ why string }

func (e errNotAnObject) Error() string { return e.why }

// decodeObject reads a stored value; an errNotAnObject says why it holds
// nothing kube-apiserver could take back as a request.
func decodeObject(b []byte) (*storedObject, error) {
	switch {
	case bytes.HasPrefix(b, encPrefix):
		provider, _, _ := strings.Cut(string(b[len(encPrefix):min(len(b), len(encPrefix)+64)]), ":")
		return nil, errNotAnObject{fmt.Sprintf("the value is encrypted at rest by kube-apiserver (provider %q), which alone can read it", provider)}
	case bytes.HasPrefix(b, protobufMagic):
		return decodeProtobuf(b[len(protobufMagic):])
	case bytes.HasPrefix(b, cborMagic):
		var m map[string]any
		if err := direct.Unmarshal(b, &m); err != nil {
			return nil, errNotAnObject{"the value is CBOR that does not decode: " + err.Error()}
		}
		o, err := fromMap(m)
		if o != nil {
			o.cbor = true
		}
		return o, err
	case len(bytes.TrimSpace(b)) > 0 && bytes.TrimSpace(b)[0] == '{':
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // integers past 2^53 stay exact
		if err := dec.Decode(&m); err != nil {
			return nil, errNotAnObject{"the value is not a JSON object: " + err.Error()}
		}
		return fromMap(m)
	}
	return nil, errNotAnObject{"the value is not a Kubernetes object in any encoding kube-apiserver stores (protobuf, JSON, CBOR)"}
}

func decodeProtobuf(b []byte) (*storedObject, error) {
	env := &runtime.Unknown{}
	if err := env.Unmarshal(b); err != nil {
		return nil, errNotAnObject{"the value is not a Kubernetes protobuf envelope: " + err.Error()}
	}
	o := &storedObject{APIVersion: env.APIVersion, Kind: env.Kind, envelope: env, metaAt: -1}
	if o.APIVersion == "" || o.Kind == "" {
		return nil, errNotAnObject{"the protobuf envelope names no apiVersion and kind"}
	}
	raw := env.Raw
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return nil, errNotAnObject{"the object's protobuf is malformed: " + protowire.ParseError(n).Error()}
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			return nil, errNotAnObject{"the object's protobuf is malformed: " + protowire.ParseError(m).Error()}
		}
		field := raw[:n+m]
		raw = raw[n+m:]
		if num != metadataField || typ != protowire.BytesType || o.metaAt >= 0 {
			o.fields = append(o.fields, field)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		if err := o.Meta.Unmarshal(v); err != nil {
			return nil, errNotAnObject{"the object's metadata does not decode: " + err.Error()}
		}
		o.metaAt, o.metaRaw = len(o.fields), field
	}
	if o.metaAt < 0 {
		return nil, errNotAnObject{"the object has no metadata"}
	}
	return o, nil
}

func fromMap(m map[string]any) (*storedObject, error) {
	o := &storedObject{object: m}
	o.APIVersion, _ = m["apiVersion"].(string)
	o.Kind, _ = m["kind"].(string)
	if o.APIVersion == "" || o.Kind == "" {
		return nil, errNotAnObject{"the value names no apiVersion and kind"}
	}
	md, ok := m["metadata"].(map[string]any)
	if !ok {
		return nil, errNotAnObject{"the object has no metadata"}
	}
	b, err := json.Marshal(md)
	if err == nil {
		err = json.Unmarshal(b, &o.Meta)
	}
	if err != nil {
		return nil, errNotAnObject{"the object's metadata does not decode: " + err.Error()}
	}
	return o, nil
}

// statusField is a top-level Kubernetes type's status in protobuf: spec
// and status follow ObjectMeta in every type that has them.
const statusField protowire.Number = 3

// status is the object's status as stored (nil: none), to tell whether a
// restore changes it. In protobuf it is field 3, which is a status only
// where the resource has a status subresource: the caller of status
// learns that from kube-apiserver.
func (o *storedObject) status() []byte {
	if o.envelope == nil {
		st, ok := o.object["status"]
		if !ok {
			return nil
		}
		b, _ := json.Marshal(st)
		return b
	}
	for _, f := range o.fields {
		if num, _, _ := protowire.ConsumeTag(f); num == statusField {
			return f
		}
	}
	return nil
}

// withStatus is the object as stored with its status replaced by st (a
// status() of another state of the object; nil: none), all else as it
// was stored. CBOR is refused: the store writes back only encodings it
// can reproduce exactly as kube-apiserver reads them.
func (o *storedObject) withStatus(st []byte) ([]byte, error) {
	if o.envelope == nil {
		if o.cbor {
			return nil, errNotAnObject{"the object is stored as CBOR, which the store does not write back changed"}
		}
		obj := make(map[string]any, len(o.object))
		for k, v := range o.object {
			obj[k] = v
		}
		delete(obj, "status")
		if st != nil {
			obj["status"] = json.RawMessage(st)
		}
		return json.Marshal(obj)
	}
	var raw []byte
	placed := st == nil
	for i := 0; i <= len(o.fields); i++ {
		if i == o.metaAt {
			raw = append(raw, o.metaRaw...)
		}
		if i == len(o.fields) {
			break
		}
		num, _, _ := protowire.ConsumeTag(o.fields[i])
		if num == statusField {
			continue
		}
		if !placed && num > statusField {
			raw, placed = append(raw, st...), true
		}
		raw = append(raw, o.fields[i]...)
	}
	if !placed {
		raw = append(raw, st...)
	}
	env := *o.envelope
	env.Raw = raw
	b, err := env.Marshal()
	if err != nil {
		return nil, errors.New("encoding the protobuf envelope: " + err.Error())
	}
	return append(append([]byte{}, protobufMagic...), b...), nil
}

// asUpdate is the body of an update of the live object (uid, at
// resourceVersion) to this state's content.
func (o *storedObject) asUpdate(uid types.UID, resourceVersion string) ([]byte, string, error) {
	return o.body(func(m *metav1.ObjectMeta) { m.UID, m.ResourceVersion = uid, resourceVersion })
}

// asCreate is the body of a create of this state: without the identity
// kube-apiserver assigns (uid, resourceVersion, creationTimestamp).
func (o *storedObject) asCreate() ([]byte, string, error) {
	return o.body(func(m *metav1.ObjectMeta) {
		m.UID, m.ResourceVersion, m.CreationTimestamp = "", "", metav1.Time{}
	})
}

// body encodes the object with edit applied to its metadata, in the
// encoding it was stored in (CBOR goes back as JSON, which every
// kube-apiserver accepts).
func (o *storedObject) body(edit func(*metav1.ObjectMeta)) ([]byte, string, error) {
	meta := *o.Meta.DeepCopy()
	edit(&meta)
	if o.envelope == nil {
		obj := make(map[string]any, len(o.object))
		for k, v := range o.object {
			obj[k] = v
		}
		b, err := json.Marshal(&meta)
		var md map[string]any
		if err == nil {
			err = json.Unmarshal(b, &md)
		}
		if err != nil {
			return nil, "", fmt.Errorf("encoding the object's metadata: %w", err)
		}
		obj["metadata"] = md
		b, err = json.Marshal(obj)
		return b, jsonContentType, err
	}
	mb, err := meta.Marshal()
	if err != nil {
		return nil, "", fmt.Errorf("encoding the object's metadata: %w", err)
	}
	var raw []byte
	for i := 0; i <= len(o.fields); i++ {
		if i == o.metaAt {
			raw = protowire.AppendTag(raw, metadataField, protowire.BytesType)
			raw = protowire.AppendBytes(raw, mb)
		}
		if i < len(o.fields) {
			raw = append(raw, o.fields[i]...)
		}
	}
	env := *o.envelope
	env.Raw = raw
	b, err := env.Marshal()
	if err != nil {
		return nil, "", errors.New("encoding the protobuf envelope: " + err.Error())
	}
	return append(append([]byte{}, protobufMagic...), b...), protobufContentType, nil
}
