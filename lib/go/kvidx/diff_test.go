// diff_test.go — the differential test: random indexes built through the C writer
// (tests/gohelper.c "build": stores, removals, clears, pod removal and reuse, live and
// expired predictions, paused pods), and for every key and a few hundred random prompts the
// C reader's answer next to the question; the Go reader must give the same text.

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
		fmt.Fprintf(&b, " %d,%d,%d,%s", s.Pod, s.Blocks, s.SpecBlocks, strconv.FormatFloat(s.Score, 'g', 17, 64))
	}
	return b.String()
}

// cG17 turns C's %.17g into Go's 'g' 17 spelling where they differ (exponents).
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
	var nL, nS, nRec, nSpec, nRows, nMiss int
	for _, l := range lines {
		f := strings.Fields(l)
		var got string
		switch f[0] {
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
	if nL < 1000 || nS < 100 || nRec < 500 || nSpec < 10 || nRows < 100 || nMiss == 0 {
		t.Errorf("too little coverage: %d lookups %d records (%d speculative), %d scores %d rows %d empty",
			nL, nRec, nSpec, nS, nRows, nMiss)
	}
	t.Logf("%d lookups (%d records, %d speculative), %d scores (%d rows)", nL, nRec, nSpec, nS, nRows)
	c.stop()
}
