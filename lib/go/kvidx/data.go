// data.go — a data generation NAME.data.G: planning its layout from the geometry, validating
// a header copy against the plan, and the read-only view lookups use (FORMAT.md 5, 6.8).

package kvidx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"
)

// plan is the layout FORMAT.md 5.2 derives from the geometry.
type plan struct {
	nslots, units                                                             uint64
	statsOff, podsOff, histOff, routersOff, loadOff, slotsOff, arenaOff, size uint64
}

func align4k(x uint64) uint64 { return (x + regionAlign - 1) &^ (regionAlign - 1) }

func makePlan(capacity, records uint64, ppk, maxPods, maxRd uint32) (plan, bool) {
	var p plan
	if capacity < 1 || capacity > maxCapacity || records < 1 || ppk < 1 || ppk > maxPPK ||
		maxPods < 1 || maxPods > MaxPods || maxRd < 1 || maxRd > maxReaders {
		return p, false
	}
	units := capacity + records
	units += units/4 + 2*(maxPPK+1) + 1
	if units > unitMax {
		return p, false
	}
	p.units = units
	p.nslots = capacity + capacity/3 + 1
	p.statsOff = align4k(dataHdrBytes)
	p.podsOff = align4k(p.statsOff + 8*statsWords)
	p.histOff = align4k(p.podsOff + uint64(maxPods)*podBytes)
	p.routersOff = align4k(p.histOff + uint64(maxPods)*histPerPod*histBuckets*8)
	p.loadOff = align4k(p.routersOff + uint64(maxRd)*routerBytes)
	p.slotsOff = align4k(p.loadOff + uint64(maxPods)*loadBytes)
	p.arenaOff = align4k(p.slotsOff + (p.nslots+maxProbe)*8)
	p.size = align4k(p.arenaOff + units*unitBytes)
	return p, true
}

// dataHdr is the validated copy of a data header's immutable part.
type dataHdr struct {
	generation, createdNs, size   uint64
	algo, blockSize               uint32
	seed                          string
	capacity, records             uint64
	ppk, maxPods, maxRd, maxProbe uint32
	plan
}

// parseDataHdr validates h (bytes [0, 256) of a segment of fileSize bytes) as
// kv_data_validate() does.
func parseDataHdr(h []byte, fileSize uint64) (dataHdr, error) {
	var d dataHdr
	le := binary.LittleEndian // little-endian hosts only (FORMAT.md 1)
	u64 := func(o int) uint64 { return le.Uint64(h[o:]) }
	u32 := func(o int) uint32 { return le.Uint32(h[o:]) }
	if u64(dhMagic) != dataMagic {
		return d, ErrCorrupt
	}
	if u64(dhStamp) != stamp {
		return d, ErrVersion
	}
	d.capacity, d.records = u64(dhCapacity), u64(dhRecords)
	d.ppk, d.maxPods, d.maxRd, d.maxProbe = u32(dhPodsPerKey), u32(dhMaxPods), u32(dhMaxReaders), u32(dhMaxProbe)
	p, ok := makePlan(d.capacity, d.records, d.ppk, d.maxPods, d.maxRd)
	if !ok || p.nslots != u64(dhNslots) || p.units != u64(dhArenaUnits) || d.maxProbe != maxProbe ||
		p.statsOff != u64(dhStatsOff) || p.podsOff != u64(dhPodsOff) || p.slotsOff != u64(dhSlotsOff) ||
		p.histOff != u64(dhHistOff) || p.routersOff != u64(dhRoutersOff) || p.loadOff != u64(dhLoadOff) || p.arenaOff != u64(dhArenaOff) || p.size != u64(dhSize) ||
		p.size > fileSize {
		return d, ErrCorrupt
	}
	seed := h[dhSeed : dhSeed+64]
	nul := bytes.IndexByte(seed, 0)
	if nul < 0 {
		return d, ErrCorrupt
	}
	d.plan = p
	d.seed = string(seed[:nul])
	d.generation, d.createdNs, d.size = u64(dhGeneration), u64(dhCreatedNs), u64(dhSize)
	d.algo, d.blockSize = u32(dhAlgo), u32(dhBlockSize)
	return d, nil
}

// view is a mapped, validated generation. Geometry comes from the validated copy only.
type view struct {
	m   mapping
	hdr dataHdr
	gen uint64
	// Hot geometry and region bases, copied out of hdr.
	nslots, units          uint64
	ppk, maxPods, maxProbe uint32
	slots, arena, pods     unsafe.Pointer
}

// Loads of the data segment (sequentially consistent, so at least acquire). Slot words pair
// with the writer's release stores of slot words in publish(), slot_ok() and tomb_trim()
// (lib/table.c): an entry's words are complete when its index is read. Pod words pair with
// the release stores of pd_word in kvidx_pod_add(), pod_bump() and
// kvidx_pod_set_spec_paused() (lib/writer.c).
func (v *view) slot(i uint64) uint64    { return ld64p(v.slots, uintptr(i)*8) }
func (v *view) word(i uint64) uint64    { return ld64p(v.arena, uintptr(i)*8) } // arena word i
func (v *view) podWord(p uint32) uint64 { return ld64p(v.pods, uintptr(p)*podBytes+pdWord) }

func (v *view) unmap() {
	if v.m.b != nil {
		_ = syscall.Munmap(v.m.b)
	}
	*v = view{}
}

// mapGen maps generation gen of index name and validates it (FORMAT.md 6.8); it must be
// owner's and writable by no one else (FORMAT.md 2).
func mapGen(name string, gen uint64, owner uint32) (view, error) {
	var v view
	fd, err := shmOpen(fmt.Sprintf("%s.data.%d", name, gen), syscall.O_RDONLY)
	if err != nil {
		return v, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return v, err
	}
	size := st.Size
	if size < dataHdrBytes || st.Uid != owner || st.Mode&0o022 != 0 {
		return v, ErrCorrupt
	}
	b, err := mmap(fd, int(size), false)
	if err != nil {
		return v, err
	}
	m := newMapping(b)
	// Acquire: pairs with the writer's release store of dh_state in data_create()
	// (lib/writer.c): a live generation is completely initialised, the header copied below
	// included (loaded first, so that it orders the copy itself).
	state := m.ld64(dhState)
	// A private copy of the immutable part, validated and used from here on: reading the
	// shared header again would let a change in between put unchecked values in the view.
	var h [dataHdrImmutable]byte
	m.bytesAt(0, dataHdrImmutable, h[:])
	d, err := parseDataHdr(h[:], uint64(size))
	if err == nil && (d.generation != gen || state != dataLive) {
		err = ErrCorrupt
	}
	if err != nil {
		_ = syscall.Munmap(b)
		return v, err
	}
	v = view{m: m, hdr: d, gen: gen, nslots: d.nslots, units: d.units, ppk: d.ppk,
		maxPods: d.maxPods, maxProbe: d.maxProbe}
	v.slots = unsafe.Add(m.base, d.slotsOff)
	v.arena = unsafe.Add(m.base, d.arenaOff)
	v.pods = unsafe.Add(m.base, d.podsOff)
	return v, nil
}
