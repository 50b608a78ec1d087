// reader.go — the router's half: a Reader attaches to an index (registry read-write, data
// read-only), looks keys up and scores prompts wait-free, with the same results as the C
// library's kvidx_lookup() and kvidx_score() (FORMAT.md 7).

package kvidx

import (
	"errors"
	"fmt"
	"math"
	"regexp"
)

// DefaultName is the index name when Open is given "".
const DefaultName = "kvidx"

// Algo is a request-key algorithm (FORMAT.md 9).
type Algo uint32

func (a Algo) String() string {
	switch a {
	case AlgoCborFnv:
		return "cbor-fnv"
	case AlgoXXH64:
		return "xxh64"
	}
	return "?"
}

// Reader is one attachment to an index, holding one registry slot. A Reader is not safe for
// concurrent use: give each goroutine its own, or share a Pool. Close it to free its slot
// (a process that dies frees its slots by itself: the kernel drops their locks).
type Reader struct {
	name  string
	ih    idx // the index header, read-only
	c     ctl // the registry this Reader is registered in
	slot  uint32
	me    uintptr // offset of our slot in the registry
	state uint64  // the rs_state we own
	v     view

	// Scoring scratch, sized by max_pods.
	rowOfPod []int32
	rows     []row

	// Our slot's route ring (producer side).
	ringOff   uintptr
	ringHead  uint64
	commitSeq uint32
}

type row struct {
	pod          int
	blocks, spec uint32
	score        float64
	run          [4]uint32
	specRun      uint32
	hit          uint32
	fa           uint32 // the pod's full-attention group mask (hybrid.go)
	hybrid       bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,46}$`)

// Open attaches to index name ("": DefaultName): maps the index header read-only, the
// registry it names read-write, claims a slot, maps the current data generation read-only
// and validates it. Objects not owned by the index header's owner are refused (ErrCorrupt). Errors: ErrNotFound,
// ErrVersion, ErrCorrupt, ErrNoSlot, or a system error (e.g. EACCES).
func Open(name string) (*Reader, error) {
	if name == "" {
		name = DefaultName
	}
	if !nameRE.MatchString(name) {
		return nil, ErrInvalid
	}
	r := &Reader{name: name, c: ctl{fd: -1}}
	var err error
	r.ih, err = openIdx(name)
	if err != nil {
		return nil, &IndexError{Name: name, Err: err}
	}
	if err = r.attach(); err == nil {
		err = r.switchGen()
	}
	if err != nil {
		r.Close()
		return nil, &IndexError{Name: name, Err: err}
	}
	return r, nil
}

// Close frees the slot and unmaps everything (an io.Closer: the error is always nil). The
// Reader is unusable afterwards; closing it again does nothing.
func (r *Reader) Close() error {
	if r.ih.m.b == nil {
		return nil
	}
	// A registry the index header no longer names may be truncated: left untouched.
	if r.me != 0 && r.c.m.b != nil && r.ih.m.ld64(ihRegGen) == r.c.regGen {
		r.release()
	}
	r.me = 0
	r.v.unmap()
	r.c.close()
	r.ih.close()
	return nil
}

func (r *Reader) growScratch() {
	if int(r.v.maxPods) <= len(r.rowOfPod) {
		return
	}
	r.rowOfPod = make([]int32, r.v.maxPods)
	for i := range r.rowOfPod {
		r.rowOfPod[i] = -1
	}
	r.rows = make([]row, 0, r.v.maxPods)
}

// Slot is the registry slot this Reader holds.
func (r *Reader) Slot() int { return int(r.slot) }

// Generation is the data generation the Reader maps.
func (r *Reader) Generation() uint64 { return r.v.gen }

// ---- lookups ----

// Rec is one pod's hold on one key (C struct kvidx_rec).
type Rec struct {
	Pod         uint16
	Tiers       uint8  // Tier* bits
	Speculative bool   // predicted by a route, not yet confirmed by an event
	TNs         uint64 // confirmed: stored-at; speculative: created-at
	ExpiresNs   uint64 // speculative: expires-at; confirmed: 0
}

// find returns key's entry unit (0: absent) and its record count (FORMAT.md 7.2).
func (v *view) find(key, m uint64) (uint64, uint32) {
	h, f := home(m, v.nslots), fp(m)
	for p := uint64(0); p < uint64(v.maxProbe); p++ {
		s := v.slot(h + p)
		if s == slotEmpty {
			return 0, 0
		}
		idx := s & 0xffffffff
		if uint32(s>>32) != f || s == slotTomb || idx == 0 || idx >= v.units {
			continue
		}
		if v.word(2*idx) != key {
			continue
		}
		return v.checkEntry(idx)
	}
	return 0, 0
}

// checkEntry bounds-checks entry idx's meta (FORMAT.md 5.8).
func (v *view) checkEntry(idx uint64) (uint64, uint32) {
	meta := v.word(2*idx + 1)
	n, c := uint32(meta&0xff), uint32(meta>>8)&0xff
	if n > c || n > v.ppk || idx+1+uint64(c) > v.units {
		return 0, 0
	}
	return idx, n
}

// visible tells whether record (w0, w1) counts at now (FORMAT.md 5.8).
func (v *view) visible(w0, w1, now uint64) bool {
	pod := recPod(w0)
	if pod >= v.maxPods {
		return false
	}
	pw := v.podWord(pod)
	if podState(pw) != podActive || podGen(pw) != recGen(w0) {
		return false
	}
	if recFlags(w0)&recSpec != 0 {
		return podFlags(pw)&podSpecPaused == 0 && now < w1+recTTL(w0)*1e6
	}
	return true
}

func recOut(w0, w1 uint64) Rec {
	spec := recFlags(w0)&recSpec != 0
	r := Rec{Pod: uint16(recPod(w0)), Tiers: recTiers(w0), Speculative: spec, TNs: w1}
	if spec {
		r.ExpiresNs = w1 + recTTL(w0)*1e6
	}
	return r
}

// Lookup appends key's live records to dst (expired predictions and records of cleared or
// removed pods are left out) and returns it. Wait-free. ErrRetry: call again.
func (r *Reader) Lookup(key uint64, dst []Rec) ([]Rec, error) {
	now := NowNs()
	if err := r.enter(); err != nil {
		return dst, err
	}
	base := len(dst)
	v := &r.v
	if e, np := v.find(key, mix(key)); e != 0 {
		for i := uint64(0); i < uint64(np); i++ {
			w0, w1 := v.word(2*(e+1+i)), v.word(2*(e+1+i)+1)
			if v.visible(w0, w1, now) {
				dst = append(dst, recOut(w0, w1))
			}
		}
	}
	if err := r.exit(); err != nil {
		return dst[:base], err
	}
	return dst, nil
}

// ---- scoring ----

// Weights are the scoring weights: Tier[i] weighs tier bit 1<<i (C struct kvidx_weights).
type Weights struct {
	Tier        [4]float64
	Speculative float64
}

// DefaultWeights: gpu 1.0, cpu 0.8, disk 0.5, other 0.0 (a medium kvidx does not know), speculative 1.0.
var DefaultWeights = Weights{Tier: [4]float64{1.0, 0.8, 0.5, 0.0}, Speculative: 1.0}

// Score is one pod's result of prefix scoring (C struct kvidx_score).
//
// Runs: Run[t] counts the consecutive blocks from block 0 the pod holds confirmed on tier
// bit 1<<t (TierGPU, TierCPU, TierDisk, TierOther; a block held on several tiers counts in
// each), SpecRun the consecutive blocks from block 0 it holds only speculatively. Every run
// is at most Blocks; a run equal to Blocks means the whole matched prefix is on that tier
// (llm-d's per-tier prefix match). Runs do not depend on the weights.
type Score struct {
	Pod        int
	Blocks     uint32    // consecutive blocks from block 0 held by the pod
	SpecBlocks uint32    // of those, held only speculatively
	Score      float64   // sum of per-block weights (best tier; speculative weight)
	Run        [4]uint32 // per tier (gpu, cpu, disk, other): run from block 0, confirmed
	SpecRun    uint32    // run from block 0 held speculatively
	// Hit is the hybrid hit in blocks (C hit): what vLLM's prefix cache gives on a model with
	// sliding-window or Mamba groups (FORMAT.md 7.4); Blocks on a model with one group.
	Hit uint32
	// Hybrid: the pod described groups whose rule can cut the run (C KVIDX_SCORE_HYBRID).
	Hybrid bool
}

type scoreCtx struct {
	r    *Reader
	v    *view
	tw   [16]float64
	spec float64
	now  uint64
	open bool
}

// block scores block i held by entry e (np records); false when no row extended its run.
func (c *scoreCtx) block(e uint64, np uint32, i uint32) bool {
	if e == 0 {
		return false
	}
	r, v := c.r, c.v
	alive := 0
	for k := uint64(0); k < uint64(np); k++ {
		w0, w1 := v.word(2*(e+1+k)), v.word(2*(e+1+k)+1)
		if !v.visible(w0, w1, c.now) {
			continue
		}
		p := recPod(w0)
		ri := r.rowOfPod[p]
		if ri < 0 {
			if !c.open || i != 0 {
				continue
			}
			nr := v.newRow(int(p))
			if !recCounts(w0, nr.fa) {
				continue
			}
			ri = int32(len(r.rows))
			r.rowOfPod[p] = ri
			r.rows = append(r.rows, nr)
		}
		rw := &r.rows[ri]
		if rw.blocks != i || !recCounts(w0, rw.fa) {
			continue
		}
		rw.blocks = i + 1
		if recFlags(w0)&recSpec != 0 {
			rw.spec++
			if rw.specRun == i {
				rw.specRun = i + 1
			}
			rw.score += c.spec
		} else {
			tiers := recTiers(w0)
			for t := range rw.run {
				if tiers&(1<<t) != 0 && rw.run[t] == i {
					rw.run[t] = i + 1
				}
			}
			rw.score += c.tw[tiers&15]
		}
		alive++
	}
	return alive != 0
}

const chunk = 16 // keys resolved together, so that their cache misses overlap

// Score computes, for the block keys of one prompt, per pod the number of consecutive blocks
// from block 0 it holds, and appends the rows (sorted by pod index) to dst. cand restricts
// scoring to those pod indices and gives each a row even at 0 blocks; cand nil scores every
// pod that holds block 0 (a non-nil empty cand scores none). w nil: DefaultWeights. Results
// are those of kvidx_score(). Wait-free. ErrRetry: call again.
func (r *Reader) Score(keys []uint64, cand []int, w *Weights, dst []Score) ([]Score, error) {
	if w == nil {
		w = &DefaultWeights
	}
	c := scoreCtx{r: r, v: &r.v, spec: w.Speculative, now: NowNs(), open: cand == nil}
	for m := 1; m < 16; m++ {
		for t := 0; t < 4; t++ {
			if m&(1<<t) != 0 && w.Tier[t] > c.tw[m] {
				c.tw[m] = w.Tier[t]
			}
		}
	}
	if err := r.enter(); err != nil {
		return dst, err
	}
	v := &r.v
	r.rows = r.rows[:0]
	for _, p := range cand {
		if p < 0 || p >= int(v.maxPods) || r.rowOfPod[p] >= 0 {
			continue
		}
		r.rowOfPod[p] = int32(len(r.rows))
		r.rows = append(r.rows, v.newRow(p))
	}
	r.scoreKeys(&c, keys)
	v.hybridHits(keys, r.rows, c.now)
	err := r.exit()
	// Rows out in pod order; reset the scratch for the next call.
	base := len(dst)
	for p, left := 0, len(r.rows); p < int(v.maxPods) && left > 0; p++ {
		ri := r.rowOfPod[p]
		if ri < 0 {
			continue
		}
		r.rowOfPod[p] = -1
		left--
		rw := &r.rows[ri]
		dst = append(dst, Score{Pod: rw.pod, Blocks: rw.blocks, SpecBlocks: rw.spec, Score: rw.score,
			Run: rw.run, SpecRun: rw.specRun, Hit: rw.hit, Hybrid: rw.hybrid})
	}
	if err != nil {
		return dst[:base], err
	}
	return dst, nil
}

// scoreKeys runs the blocks in chunks: first every key's home slot word is loaded (the loads
// are independent, so their misses overlap), then each key's first candidate entry is
// found and its key word loaded (again independent), then the blocks are verified and
// scored in order, stopping at the first block no row extends. Go has no prefetch
// instruction; independent loads give the memory-level parallelism C gets from prefetching.
func (r *Reader) scoreKeys(c *scoreCtx, keys []uint64) {
	v := c.v
	if len(keys) == 0 {
		return
	}
	// Block 0 alone first: when it misses, one lookup answers.
	if e, np := v.find(keys[0], mix(keys[0])); !c.block(e, np, 0) {
		return
	}
	var mx [chunk]uint64
	var hm [chunk]uint64
	var s0 [chunk]uint64
	var idx [chunk]uint64
	var k0 [chunk]uint64
	for base := 1; base < len(keys); base += chunk {
		n := len(keys) - base
		if n > chunk {
			n = chunk
		}
		ks := keys[base : base+n]
		for j, k := range ks {
			mx[j] = mix(k)
			hm[j] = home(mx[j], v.nslots)
			s0[j] = v.slot(hm[j])
		}
		for j := 0; j < n; j++ {
			idx[j] = v.scan(hm[j], fp(mx[j]), s0[j])
		}
		for j := 0; j < n; j++ {
			if idx[j] != 0 {
				k0[j] = v.word(2 * idx[j])
			}
		}
		for j, k := range ks {
			var e uint64
			var np uint32
			if idx[j] != 0 {
				if k0[j] == k {
					e, np = v.checkEntry(idx[j])
				} else {
					e, np = v.find(k, mx[j]) // a fingerprint collision: the full probe
				}
			}
			if !c.block(e, np, uint32(base+j)) {
				return
			}
		}
	}
}

// scan returns the first entry index in the probe window starting at h whose fingerprint
// matches (0: absent); s is the already loaded word at h.
func (v *view) scan(h uint64, f uint32, s uint64) uint64 {
	for p := uint64(0); p < uint64(v.maxProbe); p++ {
		if p > 0 {
			s = v.slot(h + p)
		}
		if s == slotEmpty {
			return 0
		}
		idx := s & 0xffffffff
		if uint32(s>>32) != f || s == slotTomb || idx == 0 || idx >= v.units {
			continue
		}
		return idx
	}
	return 0
}

// ---- metadata ----

// Info describes the mapped generation (C struct kvidx_info).
type Info struct {
	LayoutVersion uint32
	Generation    uint64
	Algo          Algo
	Seed          string
	BlockSize     uint32
	Capacity      uint64
	Records       uint64
	PodsPerKey    uint32
	MaxPods       uint32
	MaxReaders    uint32
	WriterPid     int
	HeartbeatNs   uint64 // the writer's last tick; compare with NowNs()
	CreatedNs     uint64
}

// Info returns the mapped generation's description, switching generation first if the
// writer published a new one.
func (r *Reader) Info() (Info, error) {
	if err := r.enter(); err != nil {
		return Info{}, err
	}
	h := &r.v.hdr
	in := Info{LayoutVersion: LayoutVersion, Generation: r.v.gen, Algo: Algo(h.algo),
		Seed: h.seed, BlockSize: h.blockSize, Capacity: h.capacity, Records: h.records,
		PodsPerKey: h.ppk, MaxPods: h.maxPods, MaxReaders: h.maxRd,
		WriterPid: int(int32(r.v.m.ld32(dhWriterPid))), HeartbeatNs: r.v.m.ld64(dhHeartbeatNs),
		CreatedNs: h.createdNs}
	return in, r.exit()
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// PodName returns the name ("ip:port") and model of pod index pod: ErrNoPod if the index is
// not in use, ErrRetry if the name was changing (a seqlock read with no retry loop).
func (r *Reader) PodName(pod int) (name, model string, err error) {
	v := &r.v
	if v.m.b == nil || pod < 0 || pod >= int(v.maxPods) {
		return "", "", ErrNoPod
	}
	off := uintptr(v.hdr.podsOff) + uintptr(pod)*podBytes
	// A seqlock read (FORMAT.md 5.4): the load of pd_seq pairs with the release store that
	// ends an update in pod_write_names() (lib/writer.c), the re-check below with the release
	// fence after its opening bump (Go's loads are ordered with each other: the acquire
	// fence); the pod word as in view.podWord.
	s1 := v.m.ld64(off + pdSeq)
	if podState(v.m.ld64(off+pdWord)) != podActive {
		return "", "", ErrNoPod
	}
	var nb, mb [nameMax]byte
	v.m.bytesAt(off+pdName, nameMax, nb[:])
	v.m.bytesAt(off+pdModel, nameMax, mb[:])
	if s1&1 != 0 || v.m.ld64(off+pdSeq) != s1 {
		return "", "", ErrRetry
	}
	nb[nameMax-1], mb[nameMax-1] = 0, 0
	return cstr(nb[:]), cstr(mb[:]), nil
}

// Load is one pod's row of the load view (FORMAT.md 5.9; kvidx_pod_load() in C).
type Load struct {
	Inflight      uint32 // requests routed to the pod whose outcome has not come
	PrefillTokens uint64 // uncached prompt tokens of those requests (still to compute)
	UpdatedNs     uint64 // NowNs() of the writer's last change to the row
	Lost          uint64 // requests retired without their outcome (time bound, full map)
}

const loadTries = 4 // seqlock attempts before ErrRetry, as the C library

// PodLoad returns pod's load row, one consistent snapshot. Wait-free: ErrNoPod if the index
// is not in use, ErrRetry if the writer was changing the row on every try (call again).
func (r *Reader) PodLoad(pod int) (Load, error) {
	// A writer that switched generations (a restart) counts afresh: follow it.
	if r.ih.m.ld64(ihGeneration) != r.v.gen {
		_ = r.switchGen() // on failure keep serving the generation we have
	}
	v := &r.v
	if v.m.b == nil || pod < 0 || pod >= int(v.maxPods) {
		return Load{}, ErrNoPod
	}
	if podState(v.podWord(uint32(pod))) != podActive {
		return Load{}, ErrNoPod
	}
	off := uintptr(v.hdr.loadOff) + uintptr(pod)*loadBytes
	for i := 0; i < loadTries; i++ {
		// The seqlock of FORMAT.md 5.9: the first load of lr_seq pairs with the release
		// store that ends a change in load_write() (lib/writer.c), the re-check with the
		// release fence after its opening bump (Go's atomic loads are sequentially
		// consistent, so ordered with each other: the acquire fence).
		s1 := v.m.ld64(off + lrSeq)
		n := v.m.ld64(off + lrInflight)
		t := v.m.ld64(off + lrPrefillTokens)
		u := v.m.ld64(off + lrUpdatedNs)
		lost := v.m.ld64(off + lrLost)
		if s1&1 == 0 && v.m.ld64(off+lrSeq) == s1 {
			if n > math.MaxUint32 {
				n = math.MaxUint32
			}
			return Load{Inflight: uint32(n), PrefillTokens: t, UpdatedNs: u, Lost: lost}, nil
		}
	}
	return Load{}, ErrRetry
}

// PodIndex returns the pod index of name, or an error naming it that errors.Is takes for
// ErrNoPod. Linear in max_pods: cache it (per Generation).
func (r *Reader) PodIndex(name string) (int, error) {
	for i := 0; i < int(r.v.maxPods); i++ {
		if n, _, err := r.PodName(i); err == nil && n == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: %q is not a pod of index %q (ingestd names pods ip:port)",
		ErrNoPod, name, r.name)
}

// Pod returns the pod named name as an OptPod (for Route.Prefill), or PodIndex's error.
func (r *Reader) Pod(name string) (OptPod, error) {
	i, err := r.PodIndex(name)
	if err != nil {
		return NoPod, err
	}
	return SomePod(i), nil
}

// ScoreNames is Score with the candidates given by name ("ip:port"); names the index does
// not know get no row (as C's kvidx_score() skips a candidate -1).
func (r *Reader) ScoreNames(keys []uint64, names []string, w *Weights, dst []Score) ([]Score, error) {
	cand := make([]int, 0, len(names))
	for _, n := range names {
		if i, err := r.PodIndex(n); err == nil {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 && len(names) > 0 {
		return dst[:0], nil
	}
	return r.Score(keys, cand, w, dst)
}

// PodCounter returns per-pod counter word c of pod: c an index into PodCounterNames for the
// named counters (below 64); the rank areas (PodRanks, RankCounter) follow them, up to
// PodCounters. Counters are relaxed: they may lag each other. ErrInvalid: out of range.
func (r *Reader) PodCounter(pod, c int) (uint64, error) {
	v := &r.v
	if v.m.b == nil || pod < 0 || pod >= int(v.maxPods) || c < 0 || c >= PodCounters {
		return 0, ErrInvalid
	}
	return v.m.ld64(uintptr(v.hdr.podsOff) + uintptr(pod)*podBytes + pdCtr + uintptr(c)*8), nil
}

// RankCounter returns word w (an index into RankCounterNames) of rank's health area of pod
// (FORMAT.md 5.4). Meaningful only for a rank whose flags word has RankInUse.
func (r *Reader) RankCounter(pod, rank, w int) (uint64, error) {
	if rank < 0 || rank >= PodRanks || w < 0 || w >= RankWords {
		return 0, ErrInvalid
	}
	return r.PodCounter(pod, podNamed+rank*RankWords+w)
}

// RankHealth is the health of one event stream (data-parallel rank) of a pod, as the
// writer (kvidx-ingestd) last recorded it. A pod with one stream has rank 0 only.
type RankHealth struct {
	Rank        int
	Flags       uint64 // RankInUse | RankConnected | RankReplaying
	LastSeq     uint64 // sequence number of the rank's last event batch
	LastEventNs uint64 // time of its last event batch (CLOCK_MONOTONIC, 0: none yet)
	Batches     uint64 // event batches received
	Events      uint64 // events received
	SeqGaps     uint64 // sequence gaps
	Restarts    uint64 // publisher restarts detected
	Clears      uint64 // AllBlocksCleared events applied
}

// Connected tells whether the rank's subscription is connected.
func (h RankHealth) Connected() bool { return h.Flags&RankConnected != 0 }

// Replaying tells whether the rank is replaying a sequence gap.
func (h RankHealth) Replaying() bool { return h.Flags&RankReplaying != 0 }

// PodRanks appends the health of pod's ranks in use (rank order) to dst and returns it.
// Ranks not in use are left out whatever their other words hold. ErrInvalid: pod out of
// range.
func (r *Reader) PodRanks(pod int, dst []RankHealth) ([]RankHealth, error) {
	v := &r.v
	if v.m.b == nil || pod < 0 || pod >= int(v.maxPods) {
		return dst, ErrInvalid
	}
	base := uintptr(v.hdr.podsOff) + uintptr(pod)*podBytes + pdCtr + podNamed*8
	for rk := 0; rk < PodRanks; rk++ {
		var w [RankWords]uint64
		for i := range w {
			w[i] = v.m.ld64(base + uintptr(rk*RankWords+i)*8)
		}
		if w[0]&RankInUse == 0 {
			continue
		}
		dst = append(dst, RankHealth{Rank: rk, Flags: w[0], LastSeq: w[1], LastEventNs: w[2],
			Batches: w[3], Events: w[4], SeqGaps: w[5], Restarts: w[6], Clears: w[7]})
	}
	return dst, nil
}

// PodCounterIndex is the index of the per-pod counter named name, or -1.
func PodCounterIndex(name string) int {
	for i, n := range PodCounterNames {
		if n == name {
			return i
		}
	}
	return -1
}

// Stat returns the writer counter named name (StatNames).
func (r *Reader) Stat(name string) (uint64, error) {
	for i, n := range StatNames {
		if n == name && r.v.m.b != nil {
			return r.v.m.ld64(uintptr(r.v.hdr.statsOff) + uintptr(i)*8), nil
		}
	}
	return 0, ErrInvalid
}

// IsRetry reports whether err is ErrRetry.
func IsRetry(err error) bool { return errors.Is(err, ErrRetry) }
