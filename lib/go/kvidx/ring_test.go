// ring_test.go — route commits and outcomes from Go, read by the C consumer: tests/gohelper.c
// "drain" runs kvidx_drain() and prints every accepted message; what it prints must be what
// Go sent, whole, in order, with a CLOCK_MONOTONIC stamp and nothing counted as bad. A full
// ring drops whole commits and counts them, and a commit's 1 + ceil(n/6) messages never
// straddle what the consumer sees.

package kvidx

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRingCommitsReachCWriter(t *testing.T) {
	c, r, _ := helperReader(t, "drain", "ring")
	var want []string
	for i, nk := range []int{0, 1, 5, 6, 7, 12, 13, 40} {
		keys := make([]uint64, nk)
		for j := range keys {
			keys[j] = uint64(0x1000*i + j + 1)
		}
		prefill := NoPod
		if i%2 == 1 {
			prefill = SomePod(7 - i%8)
		}
		rt := Route{CorrID: uint64(100 + i), Pod: i % 8, Prefill: prefill, Keys: keys,
			MatchedBlocks: uint32(i), MatchedSpec: uint32(i / 2), PromptTokens: uint32(7 * i)}
		if err := r.Commit(&rt); err != nil {
			t.Fatal(err)
		}
		ks := make([]string, nk)
		for j, k := range keys {
			ks[j] = fmt.Sprintf("0x%x", k)
		}
		list := strings.Join(ks, ",")
		if nk == 0 {
			list = "-"
		}
		pp := -1
		if i, ok := prefill.Get(); ok {
			pp = i
		}
		want = append(want, fmt.Sprintf("R %d %d %d %d %d %d %d %s t-ok", rt.CorrID, rt.Pod, pp,
			rt.MatchedBlocks, rt.MatchedSpec, rt.PromptTokens, nk, list))
		if i%3 == 0 {
			if err := r.ReportOutcome(uint64(500+i), i%8, uint32(16*i), 4096); err != nil {
				t.Fatal(err)
			}
			want = append(want, fmt.Sprintf("O %d %d %d 4096 t-ok", 500+i, i%8, 16*i))
		}
		// Wait for each to be drained: the ring has 64 messages.
		for len(want) > 0 {
			l := c.next(10 * time.Second)
			if l != want[0] {
				t.Fatalf("C drained %q, Go sent %q", l, want[0])
			}
			want = want[1:]
		}
	}
	// Bad arguments are refused before anything is written.
	for _, rt := range []Route{{Pod: -1}, {Pod: MaxPods}, {Pod: 0, Prefill: SomePod(-2)},
		{Pod: 0, Prefill: SomePod(MaxPods)}} {
		if err := r.Commit(&rt); err == nil {
			t.Errorf("commit %+v accepted", rt)
		}
	}
	if r.ReportOutcome(1, -1, 0, 0) == nil {
		t.Error("outcome for pod -1 accepted")
	}
	rest := c.stop()
	for _, l := range rest {
		if strings.HasPrefix(l, "BAD") || strings.HasPrefix(l, "R") || strings.HasPrefix(l, "O") {
			t.Errorf("unexpected after the last commit: %s", l)
		}
	}
}

// A ring nobody drains fills up: commits that do not fit are dropped whole and counted in
// rs_dropped; what fitted is consumed intact afterwards.
func TestRingFullDropsWholeCommits(t *testing.T) {
	c, r, _ := helperReader(t, "drain", "ringfull")
	// Stop the drainer from keeping up: take the slot's ring over by filling it faster than
	// 1 ms. 64 messages: commits of 13 keys take 4 each, so at most 16 fit.
	keys := make([]uint64, 13)
	sent, dropped := 0, 0
	for i := 0; i < 40; i++ {
		err := r.Commit(&Route{CorrID: uint64(i), Pod: 1, Keys: keys})
		if err == ErrRingFull {
			dropped++
		} else if err != nil {
			t.Fatal(err)
		} else {
			sent++
		}
	}
	if got := r.c.m.ld64(r.me + rsDropped); got != uint64(dropped) {
		t.Errorf("rs_dropped %d, drops %d", got, dropped)
	}
	for i := 0; i < sent; i++ {
		l := c.next(10 * time.Second)
		if !strings.HasPrefix(l, "R ") || !strings.Contains(l, " 13 0x0,") {
			t.Fatalf("drained %q", l)
		}
	}
	t.Logf("%d sent, %d dropped", sent, dropped)
	for _, l := range c.stop() {
		if strings.HasPrefix(l, "BAD") {
			t.Error(l)
		}
	}
}
