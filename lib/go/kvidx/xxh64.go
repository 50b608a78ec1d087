// xxh64.go — XXH64, written from the algorithm's specification (xxHash's doc/xxhash_spec.md,
// "XXH64 Algorithm Description"): streaming, seed 0 or any, little-endian lanes.

package kvidx

import (
	"encoding/binary"
	"math/bits"
)

const (
	xxP1 uint64 = 0x9E3779B185EBCA87
	xxP2 uint64 = 0xC2B2AE3D27D4EB4F
	xxP3 uint64 = 0x165667B19E3779F9
	xxP4 uint64 = 0x85EBCA77C2B2AE63
	xxP5 uint64 = 0x27D4EB2F165667C5
)

func xxRound(acc, lane uint64) uint64 {
	acc += lane * xxP2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxP1
}

func xxMerge(acc, v uint64) uint64 {
	acc ^= xxRound(0, v)
	return acc*xxP1 + xxP4
}

// xxh64 is a streaming XXH64 state.
type xxh64 struct {
	seed  uint64
	v     [4]uint64
	total uint64
	buf   [32]byte
	nbuf  int
}

func newXXH64(seed uint64) xxh64 {
	return xxh64{seed: seed, v: [4]uint64{seed + xxP1 + xxP2, seed + xxP2, seed, seed - xxP1}}
}

func (x *xxh64) stripe(p []byte) {
	for i := range x.v {
		x.v[i] = xxRound(x.v[i], binary.LittleEndian.Uint64(p[8*i:]))
	}
}

func (x *xxh64) write(p []byte) {
	x.total += uint64(len(p))
	if x.nbuf > 0 {
		n := copy(x.buf[x.nbuf:], p)
		x.nbuf += n
		p = p[n:]
		if x.nbuf < 32 {
			return
		}
		x.stripe(x.buf[:])
		x.nbuf = 0
	}
	for len(p) >= 32 {
		x.stripe(p[:32])
		p = p[32:]
	}
	x.nbuf = copy(x.buf[:], p)
}

func (x *xxh64) sum() uint64 {
	var acc uint64
	if x.total >= 32 {
		acc = bits.RotateLeft64(x.v[0], 1) + bits.RotateLeft64(x.v[1], 7) +
			bits.RotateLeft64(x.v[2], 12) + bits.RotateLeft64(x.v[3], 18)
		for _, v := range x.v {
			acc = xxMerge(acc, v)
		}
	} else {
		acc = x.seed + xxP5
	}
	acc += x.total
	p := x.buf[:x.nbuf]
	for len(p) >= 8 {
		acc ^= xxRound(0, binary.LittleEndian.Uint64(p))
		acc = bits.RotateLeft64(acc, 27)*xxP1 + xxP4
		p = p[8:]
	}
	if len(p) >= 4 {
		acc ^= uint64(binary.LittleEndian.Uint32(p)) * xxP1
		acc = bits.RotateLeft64(acc, 23)*xxP2 + xxP3
		p = p[4:]
	}
	for _, b := range p {
		acc ^= uint64(b) * xxP5
		acc = bits.RotateLeft64(acc, 11) * xxP1
	}
	acc ^= acc >> 33
	acc *= xxP2
	acc ^= acc >> 29
	acc *= xxP3
	acc ^= acc >> 32
	return acc
}

// XXH64 is the XXH64 hash of p with seed.
func XXH64(p []byte, seed uint64) uint64 {
	x := newXXH64(seed)
	x.write(p)
	return x.sum()
}
