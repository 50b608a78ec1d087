package precise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvidx.dev/kvidx"
)

// drainer starts tests/gohelper.c "drain" (a C writer with pods p0..p7 that drains the
// rings) on a fresh index and returns the index name and the helper's output lines.
func drainer(t *testing.T, tag string, args ...string) (string, func() string) {
	dir := os.Getenv("KVIDX_BIN")
	bin := filepath.Join(dir, "kvidx-gohelper")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("KVIDX_REQUIRE_C") != "" {
			t.Fatal(err)
		}
		t.Skip("kvidx-gohelper not found: set KVIDX_BIN")
	}
	name := fmt.Sprintf("t-goprecise%s-%d", tag, os.Getpid())
	cmd := exec.Command(bin, append([]string{"drain", name}, args...)...)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(outp)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("gohelper silent")
		}
		return ""
	}
	if l := next(); l != "READY" {
		t.Fatal(l)
	}
	return name, next
}

func prompt() []uint32 {
	toks := make([]uint32, 100)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	return toks
}

// Nothing is held, so every known endpoint matches 0 of the prompt's blocks and an unknown
// one gets an entry too; the commit reaches the writer with the primary and prefill pods and
// exactly the keys Score computed.
func TestScoreAndCommit(t *testing.T) {
	name, next := drainer(t, "")
	s, err := New(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	toks := prompt()
	res, err := s.Score(ctx, toks, "m", nil, []string{"p1", "p2", "10.9.9.9:80"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Keys) != 6 || len(res.Matches) != 3 || res.Matches["p1"].TotalBlocks != 6 ||
		res.Matches["p1"].MatchedBlocks != 0 {
		t.Fatalf("result %+v", res)
	}
	want := kvidx.KeyChain(nil, kvidx.AlgoCborFnv, kvidx.KeyRoot(kvidx.AlgoCborFnv, "", "m"), toks, 16)
	if fmt.Sprint(want) != fmt.Sprint(res.Keys) {
		t.Fatalf("keys %x, want %x", res.Keys, want)
	}
	if err := s.Commit(ctx, res, 77, "p1", "p2"); err != nil {
		t.Fatal(err)
	}
	l := next()
	ks := make([]string, len(want))
	for i, k := range want {
		ks[i] = fmt.Sprintf("0x%x", k)
	}
	if exp := fmt.Sprintf("R 77 1 2 0 0 0 6 %s t-ok", strings.Join(ks, ",")); l != exp {
		t.Fatalf("drained %q, want %q", l, exp)
	}
	if !errors.Is(s.Commit(ctx, res, 78, "10.9.9.9:80", ""), ErrUnknownEndpoint) {
		t.Error("commit to an unknown endpoint accepted")
	}
}

// The writer holds the prompt (gohelper "drain NAME m"): p1 on cpu for blocks 0-5 and on gpu
// for 0-3 and 5, p2 on gpu for 0-1 then by prediction for 2-4, p5 by prediction for 0-2,
// p6 nothing. The per-tier matches are the runs from block 0, from one Score call; scores
// weigh each block by its best tier (block 4 of p1 is on cpu only, 0.8).
func TestScorePerTier(t *testing.T) {
	name, _ := drainer(t, "tiers", "m")
	s, err := New(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	res, err := s.Score(ctx, prompt(), "m", nil, []string{"p1", "p2", "p5", "p6", "10.9.9.9:80"})
	if err != nil {
		t.Fatal(err)
	}
	tiers := func(gpu, cpu, disk, other int) map[string]int {
		return map[string]int{"gpu": gpu, "cpu": cpu, "disk": disk, "other": other}
	}
	want := map[string]MatchInfo{
		"p1":          {MatchedBlocks: 6, TotalBlocks: 6, TierBlocks: tiers(4, 6, 0, 0), Score: 4 + 0.8 + 1},
		"p2":          {MatchedBlocks: 5, TotalBlocks: 6, SpecBlocks: 3, TierBlocks: tiers(2, 0, 0, 0), Score: 5},
		"p5":          {MatchedBlocks: 3, TotalBlocks: 6, SpecBlocks: 3, SpecRun: 3, TierBlocks: tiers(0, 0, 0, 0), Score: 3},
		"p6":          {TotalBlocks: 6, TierBlocks: tiers(0, 0, 0, 0)},
		"10.9.9.9:80": {TotalBlocks: 6, TierBlocks: map[string]int{}},
	}
	for ep, w := range want {
		if got := res.Matches[ep]; fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: %+v, want %+v", ep, got, w)
		}
	}
	if len(res.Matches) != len(want) {
		t.Errorf("%d matches, want %d", len(res.Matches), len(want))
	}
}

// The llm-d-shaped Index on the same held prompt as TestScorePerTier: the longest prefix any
// pod holds (p1: all six blocks), filtered by a pod set (p5, p6: p5's three predicted blocks),
// and Add/Evict refused.
func TestIndexLookupLikeLlmd(t *testing.T) {
	name, _ := drainer(t, "index", "m")
	x, err := NewIndex(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	chain := kvidx.KeyChain(nil, kvidx.AlgoCborFnv, kvidx.KeyRoot(kvidx.AlgoCborFnv, "", "m"), prompt(), 16)
	keys := make([]Key, len(chain))
	for i, k := range chain {
		keys[i] = Key{ModelName: "m", ChunkHash: k}
	}
	hit, pods, err := x.Lookup(ctx, keys, nil)
	if err != nil || len(hit) != 6 || fmt.Sprint(pods[keys[0]]) != "[p1 p2 p5]" ||
		fmt.Sprint(pods[keys[5]]) != "[p1]" {
		t.Fatalf("Lookup(all pods) = %v %v %v", hit, pods, err)
	}
	hit, pods, err = x.Lookup(ctx, keys, map[string]struct{}{"p5": {}, "p6": {}})
	if err != nil || len(hit) != 3 || fmt.Sprint(pods[keys[2]]) != "[p5]" {
		t.Fatalf("Lookup(p5, p6) = %v %v %v", hit, pods, err)
	}
	if x.Add(ctx, keys, nil) != ErrReadOnly || x.Evict(ctx, keys[0], nil) != ErrReadOnly {
		t.Error("Add or Evict accepted")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	r, _ := x.pool.Get(ctx)
	if _, _, err := x.Lookup(done, keys, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup with no free handle and ctx done = %v", err)
	}
	x.pool.Put(r)
}
