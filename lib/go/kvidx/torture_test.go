// torture_test.go — Go readers under a churning C writer (tests/gohelper.c "churn": a tiny
// table, stores, removals, predictions, clears, pod removal and reuse, pauses, a tick every
// millisecond, stall limit 100 ms).
//
// Oracle (shared with gohelper.c): ALWAYS keys are held by pod 0 only, confirmed, forever;
// CHURN keys only by pods 1..7; NEVER keys by nobody; every record's tier and the low 10
// bits of its timestamp derive from (key, pod), so a torn record, another key's record or
// one read from reused memory shows. Any answer outside that, returned without ErrRetry, is
// a violation.
//
// TestExpulsionRetry stalls a reader inside a read-side section (a test hook) until the
// writer has expelled it: the call must return ErrRetry, the next one must succeed.
// TestTortureReaderProcesses runs reader processes (this test binary re-executed) that
// commit routes too; the supervisor SIGKILLs and replaces them, and makes them SIGSTOP
// themselves inside a section past the stall limit: resumed, that call must return ErrRetry
// and the reader must recover by itself; the writer must free the dead readers' slots,
// keep reclaiming, and see no malformed ring message. KVIDX_TORTURE_SECS sets the length
// (default 3; make stress runs it longer).

package kvidx

import (
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func smix(x uint64) uint64 {
	x ^= x >> 31
	x *= 0x7fb5d329728ea185
	x ^= x >> 27
	x *= 0x81dadef4bc2dd44d
	x ^= x >> 33
	return x
}

func tagOf(key uint64, pod uint32) uint64 { return smix(key^(0x5bd1e995*uint64(pod+1))) & 1023 }
func tierOf(key uint64, pod uint32) uint8 { return 1 << (smix(key+uint64(pod)) % 3) }

const nAlways, nChurn, nNever = 64, 256, 64

func alwaysKey(i int) uint64 { return smix(1000 + uint64(i)) }
func churnKey(i int) uint64  { return smix(2000 + uint64(i)) }
func neverKey(i int) uint64  { return smix(3000 + uint64(i)) }

// checkRecs returns what is wrong with key's records (class 0 ALWAYS, 1 CHURN, 2 NEVER).
func checkRecs(key uint64, class int, recs []Rec) string {
	switch class {
	case 0:
		if len(recs) != 1 || recs[0].Pod != 0 || recs[0].Speculative ||
			recs[0].Tiers != tierOf(key, 0) || recs[0].TNs&1023 != tagOf(key, 0) {
			return fmt.Sprintf("ALWAYS key %#x: %+v", key, recs)
		}
	case 1:
		seen := 0
		for _, r := range recs {
			p := uint32(r.Pod)
			bad := p < 1 || p > 7 || seen&(1<<p) != 0 || r.TNs&1023 != tagOf(key, p)
			if r.Speculative {
				ttl := r.ExpiresNs - r.TNs
				bad = bad || r.Tiers != TierGPU || ttl < 5e6 || ttl > 54e6
			} else {
				bad = bad || r.Tiers != tierOf(key, p) || r.ExpiresNs != 0
			}
			if bad {
				return fmt.Sprintf("CHURN key %#x: %+v", key, recs)
			}
			seen |= 1 << p
		}
	case 2:
		if len(recs) != 0 {
			return fmt.Sprintf("NEVER key %#x: %+v", key, recs)
		}
	}
	return ""
}

// readerStats is what one reader loop did.
type readerStats struct {
	ops, retries, commits, stallsRetried int
}

// readerLoop runs lookups, scores and commits until stop, returning the first violation.
func readerLoop(r *Reader, rng *rand.Rand, stop func() bool, st *readerStats, stalled func() bool) string {
	var recs []Rec
	var rows []Score
	prompt := make([]uint64, nAlways)
	for i := range prompt {
		prompt[i] = alwaysKey(i)
	}
	for !stop() {
		var err error
		var bad string
		st.ops++
		switch op := rng.Intn(10); {
		case op < 7:
			class := rng.Intn(3)
			var key uint64
			switch class {
			case 0:
				key = alwaysKey(rng.Intn(nAlways))
			case 1:
				key = churnKey(rng.Intn(nChurn))
			default:
				key = neverKey(rng.Intn(nNever))
			}
			recs, err = r.Lookup(key, recs[:0])
			if err == nil {
				bad = checkRecs(key, class, recs)
			}
		case op < 9:
			n := 1 + rng.Intn(nAlways)
			rows, err = r.Score(prompt[:n], nil, nil, rows[:0])
			if err == nil && (len(rows) != 1 || rows[0].Pod != 0 || rows[0].Blocks != uint32(n) ||
				rows[0].SpecBlocks != 0 || rows[0].Score != rowsScore(prompt[:n]) ||
				rows[0].Run != rowsRuns(prompt[:n]) || rows[0].SpecRun != 0) {
				bad = fmt.Sprintf("score of %d ALWAYS blocks: %+v", n, rows)
			}
		default:
			keys := make([]uint64, 1+rng.Intn(20))
			for i := range keys {
				keys[i] = churnKey(rng.Intn(nChurn))
			}
			err = r.Commit(&Route{CorrID: uint64(st.ops), Pod: 1 + rng.Intn(7), Prefill: randPrefill(rng), Keys: keys})
			if err == ErrRingFull {
				err = nil
			}
			st.commits++
		}
		wasStalled := stalled != nil && stalled()
		if err == ErrRetry {
			st.retries++
			if wasStalled {
				st.stallsRetried++
				fmt.Println("RETRIED")
			}
			continue
		}
		if err != nil {
			return "error: " + err.Error()
		}
		if wasStalled {
			return "a call stalled past the stall limit inside its section returned no ErrRetry"
		}
		if bad != "" {
			return bad
		}
	}
	return ""
}

func bitIndex(t uint8) int {
	for i := 0; i < 4; i++ {
		if t == 1<<i {
			return i
		}
	}
	return 0
}

// rowsScore is the score pod 0 must have over ALWAYS keys: each block weighs its tier.
func rowsScore(keys []uint64) float64 {
	s := 0.0
	for _, k := range keys {
		s += DefaultWeights.Tier[bitIndex(tierOf(k, 0))]
	}
	return s
}

// rowsRuns are the per-tier runs pod 0 must have over ALWAYS keys: each key is on one tier.
func rowsRuns(keys []uint64) [4]uint32 {
	var run [4]uint32
	for i, k := range keys {
		t := bitIndex(tierOf(k, 0))
		if run[t] == uint32(i) {
			run[t]++
		}
	}
	return run
}

func startChurn(t *testing.T, name string) *child {
	c := startChild(t, cBin(t, "kvidx-gohelper"), "churn", name, "7", "100")
	c.waitFor("READY", 10*time.Second)
	return c
}

func parseStats(t *testing.T, lines []string) map[string]uint64 {
	for _, l := range lines {
		if strings.HasPrefix(l, "STATS ") {
			m := map[string]uint64{}
			for _, f := range strings.Fields(l)[1:] {
				kv := strings.SplitN(f, "=", 2)
				m[kv[0]], _ = strconv.ParseUint(kv[1], 10, 64)
			}
			return m
		}
	}
	t.Fatalf("no STATS in %q", lines)
	return nil
}

func TestExpulsionRetry(t *testing.T) {
	name := indexName(t, "expel")
	w := startChurn(t, name)
	r, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stalls := 0
	testHookEnter = func(r *Reader) {
		if stalls > 0 {
			return
		}
		stalls++
		// Stall inside the section until the writer has expelled this reader.
		deadline := time.Now().Add(10 * time.Second)
		for r.c.m.ld64(r.me+rsState) == r.state && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { testHookEnter = nil }()
	before := r.state
	if _, err := r.Lookup(alwaysKey(1), nil); err != ErrRetry {
		t.Fatalf("stalled lookup: %v, want ErrRetry", err)
	}
	if st := r.c.m.ld64(r.me + rsState); st&0xff != rsExpelled || rsGen(st) != rsGen(before) {
		t.Fatalf("slot state %#x after expulsion (was %#x)", st, before)
	}
	// The next call re-registers by itself and answers; so do many more under churn.
	recs, err := r.Lookup(alwaysKey(1), nil)
	if err != nil {
		t.Fatalf("after expulsion: %v", err)
	}
	if bad := checkRecs(alwaysKey(1), 0, recs); bad != "" {
		t.Fatal(bad)
	}
	if r.state&0xff != rsActive || rsGen(r.state) != rsGen(before)+1 {
		t.Errorf("re-registered state %#x (was %#x)", r.state, before)
	}
	var st readerStats
	stop := time.Now().Add(300 * time.Millisecond)
	if bad := readerLoop(r, rand.New(rand.NewSource(1)), func() bool { return time.Now().After(stop) }, &st, nil); bad != "" {
		t.Fatal(bad)
	}
	t.Logf("%d operations after the expulsion, %d retries", st.ops, st.retries)
	stats := parseStats(t, w.stop())
	if stats["expelled"] < 1 || stats["route_bad"] != 0 {
		t.Errorf("writer stats %v", stats)
	}
}

// ---- reader processes ----

const childEnv = "KVIDX_GO_TORTURE_CHILD"

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(tortureChild(name))
	}
	os.Exit(m.Run())
}

// tortureChild is one reader process: it loops until stdin closes, stopping itself inside a
// section when sent SIGUSR1, and prints "STATS ..." or "VIOLATION ...".
func tortureChild(name string) int {
	r, err := Open(name)
	if err != nil {
		fmt.Println("VIOLATION open:", err)
		return 1
	}
	var stopFlag, stallReq, stalledNow atomic.Bool
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for range sig {
			stallReq.Store(true)
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := os.Stdin.Read(buf); err != nil {
				stopFlag.Store(true)
				return
			}
		}
	}()
	testHookEnter = func(r *Reader) {
		if stallReq.Swap(false) {
			stalledNow.Store(true)
			// Stop the whole process from this thread: a SIGSTOP sent to the thread itself
			// is taken on the way out of the system call, before the section goes on (one
			// sent to the process may be taken by another thread, a little later).
			runtime.LockOSThread()
			_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
			runtime.UnlockOSThread() // the supervisor has resumed us
		}
	}
	fmt.Printf("READY %d\n", r.Slot())
	var st readerStats
	rng := rand.New(rand.NewSource(int64(os.Getpid())))
	bad := readerLoop(r, rng, stopFlag.Load, &st, func() bool { return stalledNow.Swap(false) })
	if bad != "" {
		fmt.Println("VIOLATION", bad)
		return 1
	}
	r.Close()
	fmt.Printf("STATS ops=%d retries=%d commits=%d stalls_retried=%d\n", st.ops, st.retries, st.commits, st.stallsRetried)
	return 0
}

// spawnReader starts a reader process and returns it with its registry slot.
func spawnReader(t *testing.T, name string) (*child, int) {
	c := startChildEnv(t, []string{childEnv + "=" + name}, os.Args[0])
	var slot int
	if _, err := fmt.Sscanf(c.next(10*time.Second), "READY %d", &slot); err != nil {
		t.Fatal("reader process did not start")
	}
	return c, slot
}

func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

func TestTortureReaderProcesses(t *testing.T) {
	secs := 3
	if s, err := strconv.Atoi(os.Getenv("KVIDX_TORTURE_SECS")); err == nil && s > 0 {
		secs = s
	}
	name := indexName(t, "tort")
	w := startChurn(t, name)
	type rproc struct {
		c    *child
		slot int
	}
	var procs []rproc
	for i := 0; i < 3; i++ {
		c, slot := spawnReader(t, name)
		procs = append(procs, rproc{c, slot})
	}
	// The supervisor's own handle, to watch the readers' slots (it never enters a section).
	sup, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	rng := rand.New(rand.NewSource(3))
	kills, stops := 0, 0
	var total readerStats
	collect := func(c *child, killed bool) {
		for _, l := range c.stop() {
			if strings.HasPrefix(l, "VIOLATION") {
				t.Error(l)
			}
			var st readerStats
			if _, err := fmt.Sscanf(l, "STATS ops=%d retries=%d commits=%d", &st.ops, &st.retries, &st.commits); err == nil {
				total.ops += st.ops
				total.retries += st.retries
				total.commits += st.commits
			} else if !killed && l != "RETRIED" {
				t.Errorf("reader process said %q", l)
			}
		}
		if err := c.cmd.Wait(); !killed && err != nil && !strings.Contains(err.Error(), "Wait was already called") {
			t.Errorf("reader process: %v", err)
		}
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(100+rng.Intn(200)) * time.Millisecond)
		i := rng.Intn(len(procs))
		p := procs[i]
		if rng.Intn(2) == 0 {
			_ = p.c.cmd.Process.Kill()
			collect(p.c, true)
			kills++
			c, slot := spawnReader(t, name)
			procs[i] = rproc{c, slot}
			continue
		}
		// Make it stop itself inside a section; resume it once the writer has expelled it
		// (stall limit 100 ms). The stalled call must then return ErrRetry.
		_ = p.c.cmd.Process.Signal(syscall.SIGUSR1)
		deadline := time.Now().Add(10 * time.Second)
		for procState(p.c.cmd.Process.Pid) != 'T' {
			if time.Now().After(deadline) {
				t.Fatalf("reader process never stopped itself (state %c): %q", procState(p.c.cmd.Process.Pid), p.c.stop())
			}
			time.Sleep(time.Millisecond)
		}
		for sup.c.m.ld64(sup.c.slotOff(uint32(p.slot))+rsState)&0xff != rsExpelled {
			if time.Now().After(deadline) {
				st := sup.c.m.ld64(sup.c.slotOff(uint32(p.slot)) + rsState)
				ctr := sup.c.m.ld64(sup.c.slotOff(uint32(p.slot)) + rsCtr)
				t.Fatalf("a reader stopped inside its section was never expelled: slot %d state %#x ctr %d epoch %d writer %v pid %d sup slot %d",
					p.slot, st, ctr, sup.ih.m.ld64(ihEpoch), w.cmd.ProcessState, p.c.cmd.Process.Pid, sup.slot)
			}
			time.Sleep(time.Millisecond)
		}
		_ = p.c.cmd.Process.Signal(syscall.SIGCONT)
		if l := p.c.next(10 * time.Second); l != "RETRIED" {
			t.Fatalf("resumed reader said %q", l)
		}
		// It re-registered by itself: its slot is ACTIVE again, with the next claim
		// generation, once it has made its next call.
		for sup.c.m.ld64(sup.c.slotOff(uint32(p.slot))+rsState)&0xff != rsActive {
			if time.Now().After(deadline) {
				t.Fatal("a resumed reader did not re-register")
			}
			time.Sleep(time.Millisecond)
		}
		stops++
	}
	for _, p := range procs {
		collect(p.c, false)
	}
	stats := parseStats(t, w.stop())
	t.Logf("%d s: %d kills, %d stops (each retried); readers: %+v; writer %v", secs, kills, stops, total, stats)
	if stops > 0 && stats["expelled"] < 1 {
		t.Errorf("no reader was expelled after %d stops", stops)
	}
	if kills > 0 && stats["dead"] < 1 {
		t.Errorf("no dead reader's slot freed after %d kills", kills)
	}
	if stats["reclaimed"] == 0 || stats["route_bad"] != 0 || stats["route_commits"] == 0 {
		t.Errorf("writer: %v", stats)
	}
}

// randPrefill: no prefill pod half the time, else one of pods 1..7.
func randPrefill(rng *rand.Rand) OptPod {
	if rng.Intn(2) == 0 {
		return NoPod
	}
	return SomePod(1 + rng.Intn(7))
}
