// diff_test.go — the differential test: random indexes built through the C writer
// (tests/gohelper.c "build": stores, removals, clears, pod removal and reuse, live and
// expired predictions, paused pods, per-pod counters and rank areas), and for every key, every
// pod's counters and ranks and a few hundred random prompts the C reader's answer next to
// the question; the Go reader must give the same text (scores with their per-tier runs).

package kvidx

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func parseKeys(t *testing.T, s string) []uint64 {
	if s == "-" {
		return []uint64{}
	}
	var ks []uint64
	for _, f := range strings.Split(s, ",") {
		k, err := strconv.ParseUint(f, 0, 64)
		if err != nil {
			t.Fatalf("bad key %q", f)
		}
		ks = append(ks, k)
	}
	return ks
}

func fmtLookup(key uint64, recs []Rec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "L 0x%x :", key)
	for _, r := range recs {
		spec := 0
		if r.Speculative {
			spec = 1
		}
		fmt.Fprintf(&b, " %d,%d,%d,%d,%d", r.Pod, r.Tiers, spec, r.TNs, r.ExpiresNs)
	}
	return b.String()
}

var testWeights = [2]*Weights{nil, {Tier: [4]float64{1.0, 0.25, 0.5, 0.75}, Speculative: 0.375}}

func fmtScore(wi int, cands string, keys string, rows []Score) string {
	var b strings.Builder
	fmt.Fprintf(&b, "S %d %s %s :", wi, cands, keys)
	for _, s := range rows {
		hy := 0
		if s.Hybrid {
			hy = 1
		}
		fmt.Fprintf(&b, " %d,%d,%d,%s,%d,%d,%d,%d,%d,%d,%d", s.Pod, s.Blocks, s.SpecBlocks,
			strconv.FormatFloat(s.Score, 'g', 17, 64), s.Run[0], s.Run[1], s.Run[2], s.Run[3], s.SpecRun,
			s.Hit, hy)
	}
	return b.String()
}

// fmtCounters is gohelper's "C" line: pod's named counters by Go's names.
func fmtCounters(t *testing.T, r *Reader, pod int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "C %d", pod)
	for i, n := range PodCounterNames {
		v, err := r.PodCounter(pod, i)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, " %s=%d", n, v)
	}
	return b.String()
}

// fmtRanks is gohelper's "K" lines: pod's ranks in use, their words in RankCounterNames
// order taken from the RankHealth fields.
func fmtRanks(t *testing.T, r *Reader, pod int) []string {
	hs, err := r.PodRanks(pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("K %d %d %d,%d,%d,%d,%d,%d,%d,%d", pod, h.Rank, h.Flags, h.LastSeq,
			h.LastEventNs, h.Batches, h.Events, h.SeqGaps, h.Restarts, h.Clears))
	}
	return out
}

// runsCover counts rows whose runs are neither 0 nor the whole match (partial tiers), and
// rows with a speculative run.
func runsCover(rows []Score) (partial, spec int) {
	for _, s := range rows {
		for _, n := range s.Run {
			if n > 0 && n < s.Blocks {
				partial++
				break
			}
		}
		if s.SpecRun > 0 {
			spec++
		}
	}
	return
}

// hybridCut counts rows whose hybrid hit is shorter than their run.
func hybridCut(rows []Score) (n int) {
	for _, s := range rows {
		if s.Hit < s.Blocks {
			n++
		}
	}
	return
}
func TestDifferential(t *testing.T) {
	bin := cBin(t, "kvidx-gohelper")
	for _, seed := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { differential(t, bin, seed) })
	}
}

func differential(t *testing.T, bin string, seed int) {
	name := indexName(t, "diff")
	c := startChild(t, bin, "build", name, fmt.Sprint(seed))
	var lines []string
	for {
		l := c.next(30 * time.Second)
		if l == "END" {
			break
		}
		lines = append(lines, l)
	}
	r, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var nL, nS, nRec, nSpec, nRows, nMiss, nPartial, nSpecRun, nC, nK, nW, nCut int
	// The K lines of a pod, in order, after its C line: compared as one block.
	var ranksWant, ranksGot []string
	for _, l := range lines {
		f := strings.Fields(l)
		var got string
		switch f[0] {
		case "C":
			pod, _ := strconv.Atoi(f[1])
			got = fmtCounters(t, r, pod)
			ranksGot = append(ranksGot, fmtRanks(t, r, pod)...)
			nC++
		case "K":
			ranksWant = append(ranksWant, l)
			nK++
			continue
		case "W":
			pod, _ := strconv.Atoi(f[1])
			ld, err := r.PodLoad(pod)
			for err == ErrRetry {
				ld, err = r.PodLoad(pod)
			}
			if err != nil {
				got = fmt.Sprintf("W %d -", pod)
			} else {
				got = fmt.Sprintf("W %d %d,%d,%d,%d", pod, ld.Inflight, ld.PrefillTokens, ld.UpdatedNs, ld.Lost)
				nW++
			}
		case "I":
			in, err := r.Info()
			if err != nil {
				t.Fatal(err)
			}
			seed := in.Seed
			if seed == "" {
				seed = "-"
			}
			got = fmt.Sprintf("I %s %s %d %d", in.Algo, seed, in.BlockSize, in.Generation)
		case "P":
			pod, _ := strconv.Atoi(f[1])
			n, m, err := r.PodName(pod)
			if err != nil {
				got = fmt.Sprintf("P %d -", pod)
			} else {
				got = fmt.Sprintf("P %d %s|%s", pod, n, m)
			}
		case "L":
			key := parseKeys(t, f[1])[0]
			recs, err := r.Lookup(key, nil)
			if err != nil {
				t.Fatal(err)
			}
			nL++
			nRec += len(recs)
			for _, rc := range recs {
				if rc.Speculative {
					nSpec++
				}
			}
			got = fmtLookup(key, recs)
		case "S":
			wi, _ := strconv.Atoi(f[1])
			var cand []int
			switch f[2] {
			case "*":
			case "-":
				cand = []int{}
			default:
				for _, s := range strings.Split(f[2], ",") {
					p, _ := strconv.Atoi(s)
					cand = append(cand, p)
				}
			}
			rows, err := r.Score(parseKeys(t, f[3]), cand, testWeights[wi], nil)
			if err != nil {
				t.Fatal(err)
			}
			nS++
			nRows += len(rows)
			p, sr := runsCover(rows)
			nPartial += p
			nSpecRun += sr
			nCut += hybridCut(rows)
			if len(rows) == 0 {
				nMiss++
			}
			got = fmtScore(wi, f[2], f[3], rows)
		default:
			t.Fatalf("unknown line %q", l)
		}
		if got != l {
			t.Errorf("C:  %s\nGo: %s", l, got)
		}
	}
	// The comparison means something only if the table has content of every kind.
	if strings.Join(ranksWant, "\n") != strings.Join(ranksGot, "\n") {
		t.Errorf("ranks: C\n%s\nGo\n%s", strings.Join(ranksWant, "\n"), strings.Join(ranksGot, "\n"))
	}
	if nL < 1000 || nS < 100 || nRec < 500 || nSpec < 10 || nRows < 100 || nMiss == 0 ||
		nPartial < 5 || nSpecRun < 5 || nC < 10 || nK < 20 || nW < 5 || nCut < 5 {
		t.Errorf("too little coverage: %d lookups %d records (%d speculative), %d scores %d rows %d empty "+
			"%d partial-tier %d speculative runs, %d pods' counters %d ranks %d load rows %d hybrid cuts",
			nL, nRec, nSpec, nS, nRows, nMiss, nPartial, nSpecRun, nC, nK, nW, nCut)
	}
	t.Logf("%d lookups (%d records, %d speculative), %d scores (%d rows, %d with a partial tier run, "+
		"%d with a speculative run), %d pods' counters and %d ranks", nL, nRec, nSpec, nS, nRows,
		nPartial, nSpecRun, nC, nK)
	c.stop()
}
