// Package etcdsnap writes an etcd v3.6 snapshot: the bbolt file `etcdctl
// snapshot save` writes, with its SHA-256 trailer, that `etcdutl snapshot
// restore` accepts (ADR-051). It holds one revision's live state; etcd's
// own types are marshalled here with protowire, so that the program that
// writes one links bbolt alone, not etcd's server.
package etcdsnap

import (
	"encoding/binary"

	"google.golang.org/protobuf/encoding/protowire"
)

// etcd v3.6's backend schema (server/storage/schema): the buckets a
// server opens and the meta keys it reads at startup.
var (
	bucketKey            = []byte("key")
	bucketMeta           = []byte("meta")
	bucketLease          = []byte("lease")
	bucketAlarm          = []byte("alarm")
	bucketCluster        = []byte("cluster")
	bucketMembers        = []byte("members")
	bucketMembersRemoved = []byte("members_removed")
	bucketAuth           = []byte("auth")
	bucketAuthUsers      = []byte("authUsers")
	bucketAuthRoles      = []byte("authRoles")

	// allBuckets is every bucket etcd v3.6 has, in its order.
	allBuckets = [][]byte{bucketKey, bucketMeta, bucketLease, bucketAlarm, bucketCluster,
		bucketMembers, bucketMembersRemoved, bucketAuth, bucketAuthUsers, bucketAuthRoles}

	metaConsistentIndex  = []byte("consistent_index")
	metaTerm             = []byte("term")
	metaStorageVersion   = []byte("storageVersion")
	metaScheduledCompact = []byte("scheduledCompactRev")
	metaFinishedCompact  = []byte("finishedCompactRev")
	clusterVersion       = []byte("clusterVersion")
	authEnabled          = []byte("authEnabled")
	authRevision         = []byte("authRevision")
)

// Version is the etcd version the snapshot's storage and cluster claim:
// etcd v3.6 reads it without migrating, and refuses a newer one.
const Version = "3.6.0"

// revBytesLen is a revision's length as a key of the key bucket: main
// big-endian, '_', sub big-endian (server/storage/mvcc/revision.go).
const revBytesLen = 8 + 1 + 8

// revBytes is the key bucket's key of revision (main, sub).
func revBytes(main, sub int64) []byte {
	b := make([]byte, revBytesLen)
	binary.BigEndian.PutUint64(b, uint64(main))
	b[8] = '_'
	binary.BigEndian.PutUint64(b[9:], uint64(sub))
	return b
}

// uint64Bytes is n big-endian, as etcd stores its indexes and lease IDs.
func uint64Bytes(n uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, n)
}

// KeyValue is one live key: etcd's mvccpb.KeyValue.
type KeyValue struct {
	Key, Value                                  []byte
	CreateRevision, ModRevision, Version, Lease int64
}

// marshalKeyValue is kv as mvccpb.KeyValue's protobuf: key 1,
// create_revision 2, mod_revision 3, version 4, value 5, lease 6, each
// left out at its zero value, as gogoproto's Marshal does.
func marshalKeyValue(kv *KeyValue) []byte {
	b := make([]byte, 0, len(kv.Key)+len(kv.Value)+48)
	if len(kv.Key) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, kv.Key)
	}
	b = appendInt(b, 2, kv.CreateRevision)
	b = appendInt(b, 3, kv.ModRevision)
	b = appendInt(b, 4, kv.Version)
	if len(kv.Value) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, kv.Value)
	}
	return appendInt(b, 6, kv.Lease)
}

// marshalLease is leasepb.Lease's protobuf: ID 1, TTL 2, RemainingTTL 3
// (left out: etcd then grants the lease its whole TTL again when it
// starts, as it does for every lease after a restore).
func marshalLease(id, ttl int64) []byte {
	return appendInt(appendInt(nil, 1, id), 2, ttl)
}

// appendInt appends an int64 field, left out at zero.
func appendInt(b []byte, field protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}
