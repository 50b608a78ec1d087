// registry.go — the index header NAME (read-only), the registry NAME.reg.K it names (header
// validation, following K when the writer replaces it, claiming a reader slot with CAS + an
// OFD lock on byte 1+i of the registry file), the read-side section protocol (announce, full
// fence, expulsion check), and the route-ring producer (commits, outcomes, the futex
// doorbell). FORMAT.md 2, 6-8. Kept in one file so that a change of the registry's design
// stays local.

package kvidx

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"syscall"
	"unsafe"
)

// idx is the mapped index header (read-only) and its owner.
type idx struct {
	fd    int
	m     mapping
	owner uint32 // st_uid of the index header: every other object must have it
}

// ctl is a mapped registry and the geometry of its validated header copy.
type ctl struct {
	fd          int
	m           mapping
	size        uint64
	maxReaders  uint32
	slotsOff    uint64
	ringOff     uint64
	ringEntries uint32
	regGen      uint64 // K of NAME.reg.K
}

func ringBytes(entries uint32) uint64 { return ringHdrBytes + uint64(entries)*msgBytes }

func ctlRingOff(maxRd uint32) uint64 { return ctlHdrBytes + uint64(maxRd)*rslotBytes }

func ctlSize(maxRd, entries uint32) uint64 {
	return ctlRingOff(maxRd) + uint64(maxRd)*ringBytes(entries)
}

func ringEntriesOK(re uint32) bool { return re >= ringMin && re <= ringMax && re&(re-1) == 0 }

// idxHdr is a validated copy of the index header.
type idxHdr struct {
	maxReaders, ringEntries uint32
	regSize, regGen         uint64
}

// validateIdx checks an index header copy as kv_idx_validate() does (FORMAT.md 6.1).
func validateIdx(h []byte, fileSize uint64) (idxHdr, error) {
	var x idxHdr
	le := binary.LittleEndian
	switch le.Uint64(h[ihMagic:]) {
	case 0:
		return x, ErrNotFound // a writer is (re)initialising it
	case ctlMagic:
		return x, ErrVersion // a layout-4 registry at /NAME
	case idxMagic:
	default:
		return x, ErrCorrupt
	}
	if le.Uint64(h[ihStamp:]) != stamp {
		return x, ErrVersion
	}
	x.maxReaders = le.Uint32(h[ihMaxReaders:])
	x.ringEntries = le.Uint32(h[ihRingEntries:])
	x.regSize = le.Uint64(h[ihRegSize:])
	x.regGen = le.Uint64(h[ihRegGen:])
	ep, g := le.Uint64(h[ihEpoch:]), le.Uint64(h[ihGeneration:])
	if le.Uint64(h[ihSize:]) != idxSize || fileSize < idxSize || x.maxReaders == 0 ||
		x.maxReaders > maxReaders || !ringEntriesOK(x.ringEntries) ||
		x.regSize != ctlSize(x.maxReaders, x.ringEntries) || ep == 0 || ep > epochMax ||
		g > genMax || x.regGen == 0 || x.regGen > genMax {
		return x, ErrCorrupt
	}
	return x, nil
}

// validateCtl checks a registry header copy as kv_ctl_validate() and kv_ctl_matches() do
// (FORMAT.md 6.3): a valid registry, and exactly the one index header x names as K.
func validateCtl(h []byte, fileSize uint64, x idxHdr, k uint64) (ctl, error) {
	var c ctl
	le := binary.LittleEndian
	if le.Uint64(h[chMagic:]) != ctlMagic {
		return c, ErrCorrupt
	}
	if le.Uint64(h[chStamp:]) != stamp {
		return c, ErrVersion
	}
	c.maxReaders = le.Uint32(h[chMaxReaders:])
	c.ringEntries = le.Uint32(h[chRingEntries:])
	c.slotsOff = uint64(le.Uint32(h[chSlotsOff:]))
	c.ringOff = le.Uint64(h[chRingOff:])
	c.size = le.Uint64(h[chSize:])
	c.regGen = le.Uint64(h[chRegGen:])
	if c.maxReaders == 0 || c.maxReaders > maxReaders || !ringEntriesOK(c.ringEntries) ||
		c.slotsOff != ctlHdrBytes || c.ringOff != ctlRingOff(c.maxReaders) ||
		c.size != ctlSize(c.maxReaders, c.ringEntries) || c.size > fileSize {
		return c, ErrCorrupt
	}
	if c.size != x.regSize || c.maxReaders != x.maxReaders || c.ringEntries != x.ringEntries ||
		c.regGen != k {
		return c, ErrCorrupt
	}
	return c, nil
}

func openErr(name string, err error) error {
	if err == syscall.ENOENT {
		return ErrNotFound
	}
	return &os.PathError{Op: "open", Path: shmDir + name, Err: err}
}

// openIdx opens and maps the index header read-only after the owner checks of FORMAT.md 2.
func openIdx(name string) (idx, error) {
	fd, err := shmOpen(name, syscall.O_RDONLY)
	if err != nil {
		return idx{fd: -1}, openErr(name, err)
	}
	var st syscall.Stat_t
	var h [idxHdrBytes]byte
	err = syscall.Fstat(fd, &st)
	if err == nil {
		var n int
		n, err = syscall.Pread(fd, h[:], 0)
		if err == nil && (st.Size < idxHdrBytes || n != idxHdrBytes) {
			err = ErrCorrupt
		}
	}
	if err == nil && binary.LittleEndian.Uint64(h[ihMagic:]) == 0 {
		err = ErrNotFound // a writer is creating it right now
	}
	if err == nil && st.Mode&0o022 != 0 {
		err = ErrCorrupt // the index header is the owner's alone
	}
	if err == nil {
		_, err = validateIdx(h[:], uint64(st.Size))
	}
	var x idx
	if err == nil {
		var b []byte
		b, err = mmap(fd, idxSize, false)
		if err == nil {
			x.m = newMapping(b)
		}
	}
	if err != nil {
		syscall.Close(fd)
		return idx{fd: -1}, err
	}
	x.fd, x.owner = fd, st.Uid
	return x, nil
}

func (x *idx) close() {
	if x.m.b != nil {
		_ = syscall.Munmap(x.m.b)
	}
	if x.fd >= 0 {
		syscall.Close(x.fd)
	}
	*x = idx{fd: -1}
}

// openCtl opens and maps the registry the index header names now (FORMAT.md 6.3). ErrNotFound
// if it was replaced while we looked (the next call tries again).
func openCtl(name string, x *idx) (ctl, error) {
	// Acquire: pairs with the writer's release store of ih_reg_gen in reg_publish()
	// (lib/writer.c); the geometry read after it is that registry's.
	k := x.m.ld64(ihRegGen)
	var ih [idxHdrBytes]byte
	if n, err := syscall.Pread(x.fd, ih[:], 0); err != nil || n != idxHdrBytes {
		return ctl{fd: -1}, ErrCorrupt
	}
	xh, err := validateIdx(ih[:], idxSize)
	if err != nil {
		return ctl{fd: -1}, err
	}
	if xh.regGen != k {
		return ctl{fd: -1}, ErrNotFound
	}
	path := fmt.Sprintf("%s.reg.%d", name, k)
	fd, err := shmOpen(path, syscall.O_RDWR)
	if err != nil {
		return ctl{fd: -1}, openErr(path, err)
	}
	var st syscall.Stat_t
	var h [ctlHdrBytes]byte
	err = syscall.Fstat(fd, &st)
	if err == nil && (st.Uid != x.owner || uint64(st.Size) < xh.regSize) {
		err = ErrCorrupt // someone else's object under the index's name, or short
	}
	if err == nil {
		var n int
		n, err = syscall.Pread(fd, h[:], 0)
		if err == nil && n != ctlHdrBytes {
			err = ErrCorrupt
		}
	}
	var c ctl
	if err == nil {
		c, err = validateCtl(h[:], uint64(st.Size), xh, k)
	}
	if err == nil {
		var b []byte
		b, err = mmap(fd, int(c.size), true)
		if err == nil {
			c.m = newMapping(b)
		}
	}
	if err != nil {
		syscall.Close(fd)
		return ctl{fd: -1}, err
	}
	c.fd = fd
	return c, nil
}

func (c *ctl) close() {
	if c.m.b != nil {
		_ = syscall.Munmap(c.m.b)
	}
	if c.fd >= 0 {
		syscall.Close(c.fd)
	}
	*c = ctl{fd: -1}
}

func (c *ctl) slotOff(i uint32) uintptr { return uintptr(c.slotsOff) + uintptr(i)*rslotBytes }

func rsGen(st uint64) uint64 { return st >> 8 }

// claim takes slot i if its OFD lock is free: the lock is the claim (FORMAT.md 6.7).
func (r *Reader) claim(i uint32) bool {
	c := &r.c
	if lockTry(c.fd, lockReader0+int64(i)) != nil {
		return false
	}
	s := c.slotOff(i)
	c.m.st64(s+rsCtr, 0)
	for tries := 0; tries < 4; tries++ {
		// Only the writer competes (freeing this slot as dead in reader_reap_if_dead(), or
		// expelling its previous owner in kv_rcu_reclaim(), lib/rcu.c: CAS on the same
		// word): a handful of tries.
		st := c.m.ld64(s + rsState)
		mine := (rsGen(st)+1)<<8 | rsActive
		if c.m.cas64(s+rsState, st, mine) {
			r.slot, r.me, r.state = i, s, mine
			c.m.st32(s+rsPid, uint32(os.Getpid()))
			c.m.st64(s+rsClaimedNs, NowNs())
			c.m.st64(s+rsLookups, 0)
			return true
		}
	}
	unlock(c.fd, lockReader0+int64(i))
	return false
}

func (r *Reader) claimAny() error {
	c := &r.c
	// Free slots first; then slots whose owner may have died (their lock is gone).
	for pass := 0; pass < 2; pass++ {
		for i := uint32(0); i < c.maxReaders; i++ {
			free := c.m.ld64(c.slotOff(i)+rsState)&0xff == rsFree
			if free == (pass == 0) && r.claim(i) {
				r.ringOff = uintptr(c.ringOff + uint64(i)*ringBytes(c.ringEntries))
				// A previous owner's messages may still be queued: continue after them.
				r.ringHead = c.m.ld64(r.ringOff + rhHead)
				return nil
			}
		}
	}
	return ErrNoSlot
}

// attach registers this Reader in the registry the index header names (FORMAT.md 6.3,
// 6.7): on success the previous registry, if any, is left without being written (it may be
// truncated: FORMAT.md 6.4); on failure the Reader keeps the one it had.
func (r *Reader) attach() error {
	c, err := openCtl(r.name, &r.ih)
	if err != nil {
		return err
	}
	old, oldSlot, oldMe, oldState, oldRing, oldHead := r.c, r.slot, r.me, r.state, r.ringOff, r.ringHead
	r.c, r.me = c, 0
	if err = r.claimAny(); err != nil {
		r.c.close()
		r.c, r.slot, r.me, r.state, r.ringOff, r.ringHead = old, oldSlot, oldMe, oldState, oldRing, oldHead
		return err
	}
	old.close() // unmaps and closes, which drops our lock on the old slot
	return nil
}

func (r *Reader) release() {
	c := &r.c
	// Quiescent for good (pairs with the writer's seq_cst load of rs_ctr in
	// kv_rcu_reclaim(), lib/rcu.c), then the slot freed by CAS (against the writer's in
	// reader_reap_if_dead() and kv_rcu_reclaim()).
	c.m.st64(r.me+rsCtr, 0)
	st := c.m.ld64(r.me + rsState)
	c.m.cas64(r.me+rsState, st, rsGen(st)<<8|rsFree)
	unlock(c.fd, lockReader0+int64(r.slot))
}

// switchGen maps the generation the index header names; bounded: a writer switching again
// meanwhile is followed at most three times (FORMAT.md 6.8).
func (r *Reader) switchGen() error {
	err := error(ErrNotFound)
	for tries := 0; tries < 3; tries++ {
		// Acquire: pairs with the writer's release store of ih_generation in
		// kvidx_writer_publish() (lib/writer.c).
		g := r.ih.m.ld64(ihGeneration)
		if g == 0 {
			return ErrNotFound
		}
		if g == r.v.gen {
			return nil
		}
		v, e := mapGen(r.name, g, r.ih.owner)
		if e == nil {
			r.v.unmap()
			r.v = v
			r.growScratch()
			return nil
		}
		if e != syscall.ENOENT {
			return e
		}
		err = ErrNotFound
	}
	return err
}

// reregister after an expulsion: one CAS attempt, so bounded (FORMAT.md 7.3).
func (r *Reader) reregister() error {
	m := &r.c.m
	st := m.ld64(r.me + rsState)
	if st&0xff == rsActive && st == r.state {
		return nil
	}
	m.st64(r.me+rsCtr, 0)
	mine := (rsGen(st)+1)<<8 | rsActive
	// Races the writer's expulsion CAS in kv_rcu_reclaim() (lib/rcu.c) or reg_check()
	// (lib/writer.c): the loser's CAS fails and changes nothing.
	if !m.cas64(r.me+rsState, st, mine) {
		return ErrRetry
	}
	r.state = mine
	return nil
}

// follow moves r to the registry the index header names if the writer replaced it
// (FORMAT.md 6.4): sections, commits and outcome reports call it before touching the old one.
func (r *Reader) follow() error {
	if r.ih.m.ld64(ihRegGen) != r.c.regGen {
		if err := r.attach(); err != nil {
			if err == ErrNotFound {
				return ErrRetry
			}
			return err
		}
	}
	return nil
}

// enter starts a read-side section (FORMAT.md 7.1).
func (r *Reader) enter() error {
	// A replaced registry is left before anything in it is touched (FORMAT.md 6.4).
	if err := r.follow(); err != nil {
		return err
	}
	m := &r.c.m
	if r.ih.m.ld64(ihGeneration) != r.v.gen {
		if err := r.switchGen(); err != nil && r.v.m.b == nil {
			return err // else keep serving the generation we have
		}
	}
	if m.ld64(r.me+rsState) != r.state {
		if err := r.reregister(); err != nil {
			return err
		}
	}
	// The announcement, then a full fence before any slot is read: Go's atomic store is
	// sequentially consistent (XCHG on amd64, STLR + the loads' LDAR ordering on arm64),
	// which is that fence. Pairs with the full fence in kv_rcu_reclaim() (lib/rcu.c).
	m.st64(r.me+rsCtr, r.ih.m.ld64(ihEpoch))
	if testHookEnter != nil {
		testHookEnter(r)
	}
	return nil
}

// exit ends the section; ErrRetry means its reads may have come from reused memory.
func (r *Reader) exit() error {
	m := &r.c.m
	// Every read of the section was an atomic load, and Go's atomic loads are ordered with
	// each other (sequentially consistent), so they all come before this state load: that
	// is C's acquire fence here. Pairs with the release fence after the writer's CAS to
	// EXPELLED in kv_rcu_reclaim() (lib/rcu.c) and reg_check() (lib/writer.c): if anything
	// read came from reused memory, the state is not ours.
	st := m.ld64(r.me + rsState)
	// A registry replaced during the section may have hidden us from the writer, which names
	// the new one before it reuses anything retired before (FORMAT.md 6.4, 7.1 exit).
	moved := r.ih.m.ld64(ihRegGen) != r.c.regGen
	// Release store: every read of the section happens before the writer may see us
	// quiescent. Pairs with the writer's seq_cst load of rs_ctr in kv_rcu_reclaim().
	m.st64(r.me+rsCtr, 0)
	m.st64(r.me+rsLookups, m.ld64(r.me+rsLookups)+1)
	if st != r.state || moved {
		return ErrRetry
	}
	return nil
}

// testHookEnter, when set by a test, runs inside every section right after the announcement.
var testHookEnter func(r *Reader)

// ---- route ring producer (FORMAT.md 8) ----

func (r *Reader) ringRoom(need uint64) bool {
	m := &r.c.m
	// Acquire: pairs with the consumer's release store of rh_tail in drain_one()
	// (lib/route.c).
	tail := m.ld64(r.ringOff + rhTail)
	used := r.ringHead - tail
	if used > uint64(r.c.ringEntries) {
		// Nonsense left by a previous owner or a corruption: start over from the tail.
		r.ringHead = tail
		used = 0
	}
	return uint64(r.c.ringEntries)-used >= need
}

// msgAt is the offset of message head+i, zeroed.
func (r *Reader) msgAt(i uint64) uintptr {
	off := r.ringOff + ringHdrBytes + uintptr((r.ringHead+i)&uint64(r.c.ringEntries-1))*msgBytes
	for w := uintptr(0); w < msgBytes; w += 8 {
		r.c.m.put64(off+w, 0)
	}
	return off
}

func (r *Reader) ringPut(n uint64) {
	m := &r.c.m
	r.ringHead += n
	// Release (here sequentially consistent): the messages are written before the head
	// says so. Pairs with the acquire loads of rh_head in drain_one() and
	// kvidx_writer_idle() (lib/route.c). Being a full fence too, it orders the head before
	// the idle-flag load below (the doorbell rule: pairs with the full fence in
	// kvidx_writer_idle()).
	m.st64(r.ringOff+rhHead, r.ringHead)
	m.st64(r.me+rsCommits, m.ld64(r.me+rsCommits)+1)
	if r.ih.m.ld32(ihWriterIdle) != 0 {
		r.doorbell()
	}
}

// doorbell rings the writer (FORMAT.md 8.4): add 1 to the registry's futex word, then
// FUTEX_WAKE on it, a shared futex (no FUTEX_PRIVATE_FLAG) keyed on the registry's page, so
// it reaches the writer's helper thread in whatever process. Errors are ignored: a lost
// wake-up only costs latency.
func (r *Reader) doorbell() {
	w := r.c.m.p32(chBell)
	atomicAdd32(w, 1)
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, 1, 0, 0, 0)
}

func (r *Reader) ringDrop() error {
	m := &r.c.m
	m.st64(r.me+rsDropped, m.ld64(r.me+rsDropped)+1)
	return ErrRingFull
}

// OptPod is an optional pod index: the zero value is no pod (NoPod), SomePod(i) pod i. It is
// what Route.Prefill takes, so that a Route whose prefill pod was left out predicts nothing
// on pod 0 (an int field's zero value would have meant pod 0).
type OptPod struct {
	i  int32
	ok bool
}

// NoPod is the zero OptPod: no pod.
var NoPod OptPod

// SomePod is pod index i as an OptPod.
func SomePod(i int) OptPod { return OptPod{i: int32(i), ok: i >= 0 && i < MaxPods} }

// Get returns the pod index and whether there is one.
func (p OptPod) Get() (int, bool) { return int(p.i), p.ok }

// Route is a routing decision as a router commits it (C struct kvidx_route).
type Route struct {
	CorrID        uint64   // request-safe correlation id (never prompt data): CorrID(requestID)
	Pod           int      // chosen (decode) pod index (Reader.PodIndex of its name)
	Prefill       OptPod   // prefill pod under P/D disaggregation; the zero value: none
	Keys          []uint64 // the prompt's block keys (any number: the first MaxCommitKeys are sent)
	MatchedBlocks uint32   // blocks the chosen pod matched when scored
	MatchedSpec   uint32   // of those, held only speculatively
	PromptTokens  uint32   // the prompt's length in tokens; 0: unknown (len(Keys) x block size)
}

// Commit sends a routing decision to the writer, which adds speculative records for its
// keys on the chosen pod(s) and counts the request in the pod's load (PodLoad) until its
// outcome. Only the first MaxCommitKeys keys are sent; the load counts the whole prompt.
// Wait-free: ErrRingFull when the ring is full (the commit is dropped and counted),
// ErrInvalid. Stamped with NowNs() and the reader's data generation, exactly as
// kvidx_commit() writes it.
func (r *Reader) Commit(rt *Route) error {
	if rt == nil || rt.Pod < 0 || rt.Pod >= MaxPods || (rt.Prefill != NoPod && !rt.Prefill.ok) {
		return ErrInvalid
	}
	keys := rt.Keys
	prompt := uint64(rt.PromptTokens)
	if len(keys) > MaxCommitKeys {
		if prompt == 0 {
			prompt = uint64(len(keys)) * uint64(r.v.hdr.blockSize)
		}
		keys = keys[:MaxCommitKeys]
	}
	if prompt > math.MaxUint32 {
		prompt = math.MaxUint32
	}
	nk := uint64(len(keys))
	nmsg := 1 + (nk+msgKeysPer-1)/msgKeysPer
	if err := r.follow(); err != nil {
		return err
	}
	if !r.ringRoom(nmsg) {
		return r.ringDrop()
	}
	m := &r.c.m
	r.commitSeq++
	seq := r.commitSeq
	o := r.msgAt(0)
	m.put8(o+mType, msgCommit)
	m.put32(o+mSeq, seq)
	m.put64(o+mCorr, rt.CorrID)
	m.put64(o+mTNs, NowNs())
	m.put64(o+mGen, r.v.gen)
	m.put16(o+mPod, uint16(rt.Pod))
	prefill := uint16(0xffff)
	if pp, ok := rt.Prefill.Get(); ok {
		prefill = uint16(pp)
	}
	m.put16(o+mPrefill, prefill)
	m.put32(o+mNKeys, uint32(nk))
	m.put32(o+mMatched, rt.MatchedBlocks)
	m.put32(o+mMatchedSpec, rt.MatchedSpec)
	m.put32(o+mPromptTok, uint32(prompt))
	k := 0
	for i := uint64(1); i < nmsg; i++ {
		n := len(keys) - k
		if n > msgKeysPer {
			n = msgKeysPer
		}
		o := r.msgAt(i)
		m.put8(o+mType, msgKeys)
		m.put8(o+mN, uint8(n))
		m.put32(o+mSeq, seq)
		m.put64(o+mCorr, rt.CorrID)
		for j := 0; j < n; j++ {
			m.put64(o+mKeys+uintptr(8*j), keys[k+j])
		}
		k += n
	}
	r.ringPut(nmsg)
	return nil
}

// CorrID is the correlation id of a request id string (vLLM's X-Request-Id, say): FNV-1a-64
// of its bytes, 0 mapped to 1, the value of C's kvidx_corr_id() and Python's kvidx.corr_id().
// ingestd keys a route by the Reader that committed it and this id: report its outcome on the
// same Reader (Pool users: keep the Reader from Commit to ReportOutcome, or accept that an
// outcome from another Reader is counted on its pod but not matched to the route).
func CorrID(requestID string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(requestID); i++ {
		h = (h ^ uint64(requestID[i])) * 0x100000001b3
	}
	if h == 0 {
		return 1
	}
	return h
}

// ReportOutcome reports what the model server said about a routed request: cachedTokens as
// vLLM's usage.prompt_tokens_details.cached_tokens, promptTokens its prompt length.
// Wait-free; ErrRingFull (dropped and counted) or ErrInvalid.
func (r *Reader) ReportOutcome(corrID uint64, pod int, cachedTokens, promptTokens uint32) error {
	if pod < 0 || pod >= MaxPods {
		return ErrInvalid
	}
	if err := r.follow(); err != nil {
		return err
	}
	if !r.ringRoom(1) {
		return r.ringDrop()
	}
	m := &r.c.m
	o := r.msgAt(0)
	m.put8(o+mType, msgOutcome)
	m.put64(o+mCorr, corrID)
	m.put64(o+mTNs, NowNs())
	m.put64(o+mGen, r.v.gen)
	m.put16(o+mPod, uint16(pod))
	m.put32(o+mCached, cachedTokens)
	m.put32(o+mPrompt, promptTokens)
	r.ringPut(1)
	return nil
}
