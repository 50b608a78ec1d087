// mem.go — access to words of a mapped segment. Every word another process may write is
// read and written through sync/atomic (sequentially consistent, so at least as strong as
// every order FORMAT.md asks for); offsets are checked by the callers against geometry
// validated at attach, never against values read from the segment.

package kvidx

import (
	"sync/atomic"
	"unsafe"
)

// mapping is one mmap'ed segment.
type mapping struct {
	b    []byte
	base unsafe.Pointer
}

func newMapping(b []byte) mapping {
	return mapping{b: b, base: unsafe.Pointer(&b[0])}
}

func (m *mapping) p64(off uintptr) *uint64 { return (*uint64)(unsafe.Add(m.base, off)) }
func (m *mapping) p32(off uintptr) *uint32 { return (*uint32)(unsafe.Add(m.base, off)) }

func (m *mapping) ld64(off uintptr) uint64    { return atomic.LoadUint64(m.p64(off)) }
func (m *mapping) ld32(off uintptr) uint32    { return atomic.LoadUint32(m.p32(off)) }
func (m *mapping) st64(off uintptr, v uint64) { atomic.StoreUint64(m.p64(off), v) }
func (m *mapping) st32(off uintptr, v uint32) { atomic.StoreUint32(m.p32(off), v) }
func (m *mapping) cas64(off uintptr, old, nw uint64) bool {
	return atomic.CompareAndSwapUint64(m.p64(off), old, nw)
}

// Plain stores, for ring messages: the release store of the ring head that follows them
// publishes them (FORMAT.md 8.1), and no other process reads them before it.
func (m *mapping) put8(off uintptr, v uint8)   { *(*uint8)(unsafe.Add(m.base, off)) = v }
func (m *mapping) put16(off uintptr, v uint16) { *(*uint16)(unsafe.Add(m.base, off)) = v }
func (m *mapping) put32(off uintptr, v uint32) { *(*uint32)(unsafe.Add(m.base, off)) = v }
func (m *mapping) put64(off uintptr, v uint64) { *(*uint64)(unsafe.Add(m.base, off)) = v }

// bytesAt copies n bytes at off, each loaded atomically as part of its aligned word (names
// in the pod table change under a seqlock; FORMAT.md 5.4). off and n are multiples of 8.
func (m *mapping) bytesAt(off uintptr, n int, out []byte) {
	for i := 0; i < n; i += 8 {
		w := m.ld64(off + uintptr(i))
		for j := 0; j < 8; j++ {
			out[i+j] = byte(w >> (8 * j)) // little-endian hosts only (FORMAT.md 1)
		}
	}
}

func ld64p(base unsafe.Pointer, off uintptr) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Add(base, off)))
}
