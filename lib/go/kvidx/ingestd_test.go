// ingestd_test.go — a Go commit through a real kvidx-ingestd: a kvidx-fakepod publishes a
// slow synthetic workload (so that its pod is connected and fresh, its speculation not
// paused), ingestd indexes it, the Go reader commits a route for fresh keys on that pod and
// must then see them as speculative records expiring one TTL after the commit; an outcome
// report is counted in the pod's counters; the pod's one event stream shows as rank 0; a
// prompt longer than MaxCommitKeys blocks commits its prefix and counts whole in the load.

package kvidx

import (
	"fmt"
	"net"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// eventually polls cond every 2 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestCommitThroughIngestd(t *testing.T) {
	fakepod, ingestd := cBin(t, "kvidx-fakepod"), cBin(t, "kvidx-ingestd")
	name := indexName(t, "ing")
	pub := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	const pod = "10.9.0.1:8000"
	startDaemon(t, fakepod, "--pub", pub, "--pod", pod, "--model", "m", "--workload",
		"--rate", "50", "--duration", "60s", "--linger-ms", "0")
	startDaemon(t, ingestd, "--name", name, "--capacity", "4096", "--ttl", "20s", "--stale-limit", "60s",
		"--pod", pub+",name="+pod)
	var r *Reader
	eventually(t, "the index", func() bool {
		var err error
		r, err = Open(name)
		return err == nil
	})
	defer r.Close()
	p := -1
	connected, paused := PodCounterIndex("connected"), PodCounterIndex("spec_paused")
	eventually(t, "the pod, connected and fresh", func() bool {
		if _, err := r.Info(); err != nil { // follows generation switches
			return false
		}
		if p < 0 {
			p, _ = r.PodIndex(pod)
		}
		if p < 0 {
			return false
		}
		c, _ := r.PodCounter(p, connected)
		s, _ := r.PodCounter(p, paused)
		return c == 1 && s == 0
	})
	// One event stream: rank 0 alone is in use, connected, and has seen the pod's batches.
	eventually(t, "rank 0's health", func() bool {
		hs, err := r.PodRanks(p, nil)
		n, _ := r.PodCounter(p, PodCounterIndex("ranks"))
		return err == nil && n == 1 && len(hs) == 1 && hs[0].Rank == 0 && hs[0].Connected() &&
			!hs[0].Replaying() && hs[0].Batches > 0 && hs[0].Events > 0 && hs[0].LastEventNs > 0 &&
			hs[0].LastEventNs <= NowNs()
	})
	keys := []uint64{0xfeed0001, 0xfeed0002, 0xfeed0003, 0xfeed0004, 0xfeed0005, 0xfeed0006, 0xfeed0007}
	t0 := NowNs()
	if err := r.Commit(&Route{CorrID: 4242, Pod: p, Keys: keys}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the speculative records", func() bool {
		rows, err := r.Score(keys, []int{p}, nil, nil)
		return err == nil && len(rows) == 1 && rows[0].Blocks == uint32(len(keys)) &&
			rows[0].SpecBlocks == uint32(len(keys))
	})
	recs, err := r.Lookup(keys[6], nil)
	if err != nil || len(recs) != 1 {
		t.Fatalf("lookup: %v %+v", err, recs)
	}
	rec := recs[0]
	if !rec.Speculative || int(rec.Pod) != p || rec.TNs < t0 || rec.TNs > NowNs() ||
		rec.ExpiresNs != rec.TNs+20000*1e6 {
		t.Errorf("record %+v (commit at %d, TTL 20 s)", rec, t0)
	}
	outcomes := PodCounterIndex("outcomes")
	before, _ := r.PodCounter(p, outcomes)
	if err := r.ReportOutcome(4242, p, 0, 7*16); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the outcome counted", func() bool {
		n, _ := r.PodCounter(p, outcomes)
		return n == before+1
	})
	if n, _ := r.Stat("route_commits"); n != 1 {
		t.Errorf("route_commits %d", n)
	}
	if n, _ := r.Stat("route_bad"); n != 0 {
		t.Errorf("route_bad %d", n)
	}
	commitLongPrompt(t, r, p)
}

// A prompt of more blocks than MaxCommitKeys (issue 22, item 6) is not refused: its first
// MaxCommitKeys keys are committed and predicted, the rest not, and the pod's load counts the
// whole prompt (3000 blocks of 16 tokens, PromptTokens left 0). Commit returned ErrTooBig.
func commitLongPrompt(t *testing.T, r *Reader, p int) {
	keys := make([]uint64, 3000)
	for i := range keys {
		keys[i] = 0x10ad0000 + uint64(i)
	}
	if err := r.Commit(&Route{CorrID: 4343, Pod: p, Keys: keys}); err != nil {
		t.Fatalf("a commit of %d keys: %v", len(keys), err)
	}
	eventually(t, "the long prompt's prefix predicted", func() bool {
		rows, err := r.Score(keys[:MaxCommitKeys], []int{p}, nil, nil)
		return err == nil && len(rows) == 1 && rows[0].SpecBlocks == MaxCommitKeys
	})
	if recs, err := r.Lookup(keys[MaxCommitKeys], nil); err != nil || len(recs) != 0 {
		t.Errorf("key %d of the long prompt: %v %+v (only the first %d are sent)",
			MaxCommitKeys, err, recs, MaxCommitKeys)
	}
	eventually(t, "the long prompt in the pod's load", func() bool {
		l, err := r.PodLoad(p)
		return err == nil && l.Inflight == 1 && l.PrefillTokens == 3000*16
	})
}
