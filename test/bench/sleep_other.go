//go:build !linux

package main

import "time"

// fineSleeper is time.Sleep where there is no timerfd: waits shorter than a
// millisecond take about a millisecond (see sleep_linux.go).
type fineSleeper struct{}

func newFineSleeper() (*fineSleeper, error) { return &fineSleeper{}, nil }

func (*fineSleeper) sleep(d time.Duration) error { time.Sleep(d); return nil }

func (*fineSleeper) close() {}
