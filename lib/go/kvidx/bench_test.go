// bench_test.go — Go Score against C kvidx_score on one index in the same run: gohelper
// "bench" fills it (default 8 Mi keys in chains of 2048, one of 64 pods per chain), times
// kvidx_score() on prompts of 512 keys, then this test times Score on prompts drawn the
// same way from the same index. Only with KVIDX_BENCH_KEYS set (make go-bench); a timing
// report, never a pass/fail threshold.

package kvidx

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

func TestBenchScoreVsC(t *testing.T) {
	nkeys, err := strconv.ParseUint(os.Getenv("KVIDX_BENCH_KEYS"), 0, 64)
	if err != nil || nkeys < 4096 {
		t.Skip("set KVIDX_BENCH_KEYS (make go-bench)")
	}
	const prompts, plen, chain = 20000, 512, 2048
	name := indexName(t, "bench")
	c := startChild(t, cBin(t, "kvidx-gohelper"), "bench", name, fmt.Sprint(nkeys), fmt.Sprint(prompts))
	cline := c.waitFor("C ", 30*time.Minute)
	c.waitFor("READY", time.Minute)
	r, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	nchains := nkeys / chain
	keys := make([]uint64, plen)
	rows := make([]Score, 0, 4)
	rng := rand.New(rand.NewSource(99))
	ts := make([]time.Duration, prompts)
	var sum time.Duration
	for q := range ts {
		ch, off := uint64(rng.Int63n(int64(nchains))), uint64(rng.Intn(chain-plen))
		for i := range keys {
			keys[i] = smix(0x9000000000 + ch*chain + off + uint64(i))
		}
		t0 := time.Now()
		rows, err = r.Score(keys, nil, nil, rows[:0])
		ts[q] = time.Since(t0)
		if err != nil || len(rows) != 1 || rows[0].Blocks != plen {
			t.Fatalf("score: %v %+v", err, rows)
		}
		sum += ts[q]
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	var cmed, cmean float64
	fmt.Sscanf(cline, "C %f %f", &cmed, &cmean)
	gmed := float64(ts[prompts/2].Nanoseconds()) / plen
	gmean := float64(sum.Nanoseconds()) / prompts / plen
	fmt.Printf("score %d keys/prompt, %d keys, %d prompts: C kvidx_score median %.2f mean %.2f ns/key; "+
		"Go Score median %.2f mean %.2f ns/key (Go/C median %.2fx)\n", plen, nkeys, prompts, cmed, cmean,
		gmed, gmean, gmed/cmed)
	c.stop()
}
