package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A paced request waits for its token: with five tokens and no more, the
// clients send five requests, however many they are and however many the
// run allows.
func TestDrivePacedWaitsForTokens(t *testing.T) {
	pace := make(chan struct{}, 5)
	for range 5 {
		pace <- struct{}{}
	}
	var sent atomic.Int64
	st := drivePaced(context.Background(), []*clientv3.Client{nil}, 3, 100, 300*time.Millisecond, time.Second, pace,
		func(context.Context, *clientv3.Client, int) error {
			sent.Add(1)
			return nil
		})
	if sent.Load() != 5 || st.ops != 5 {
		t.Fatalf("sent %d requests, %d counted; want 5 of each", sent.Load(), st.ops)
	}
}
