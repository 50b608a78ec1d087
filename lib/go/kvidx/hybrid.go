// hybrid.go — the hybrid hit of prefix scoring (FORMAT.md 7.4, "Groups"): on a pod whose KV
// cache is split into groups (full attention, sliding window, Mamba), the prefix vLLM's cache
// would give, from the records' group masks. Implemented from the document (the C side is
// lib/hybrid.c); the differential test holds the two together.

package kvidx

import (
	"sync/atomic"
	"unsafe"
)

type grpClass struct {
	mask, kind, m, need uint32
}

func (v *view) podGroup(p int, g int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Add(v.pods, uintptr(p)*podBytes+pdGroups+uintptr(g)*4)))
}

// newRow is a fresh row for pod p with its groups' summary.
func (v *view) newRow(p int) row {
	rw := row{pod: p}
	for g := 0; g < podGroups; g++ {
		d := v.podGroup(p, g)
		kind, m := d&0xf, (d>>4)&0xff
		if kind == grpFull {
			rw.fa |= 1 << g
		}
		if kind == grpSliding || kind == grpMamba || (kind == grpFull && m > 1) {
			rw.hybrid = true
		}
	}
	return rw
}

// recCounts: a record counts for a row when it holds the key in all the pod's full-attention
// groups (a record without a group mask holds it in every group).
func recCounts(w0 uint64, fa uint32) bool {
	return recFlags(w0)&recGroups == 0 || recGmask(w0)&fa == fa
}

// groupsAt is pod p's group mask at key (0: not held).
func (v *view) groupsAt(key uint64, p int, now uint64) uint32 {
	e, np := v.find(key, mix(key))
	for k := uint64(0); e != 0 && k < uint64(np); k++ {
		w0, w1 := v.word(2*(e+1+k)), v.word(2*(e+1+k)+1)
		if int(recPod(w0)) != p {
			continue
		}
		if !v.visible(w0, w1, now) {
			return 0
		}
		return recGmask(w0)
	}
	return 0
}

func (v *view) classes(p int) ([]grpClass, uint64) {
	var words [podGroups]uint32
	var cls []grpClass
	a := uint64(1)
	for g := 0; g < podGroups; g++ {
		d := v.podGroup(p, g)
		words[g] = d
		kind, m, need := d&0xf, (d>>4)&0xff, d>>12
		if d == 0 || kind > grpMamba || m == 0 {
			continue
		}
		k := 0
		for ; k < len(cls); k++ {
			low := 0
			for cls[k].mask&(1<<low) == 0 {
				low++
			}
			if words[low] == d {
				break
			}
		}
		if k == len(cls) {
			if need == 0 {
				need = 1
			}
			cls = append(cls, grpClass{kind: kind, m: m, need: need})
		}
		cls[k].mask |= 1 << g
	}
	for _, c := range cls {
		x, y := a, uint64(c.m)
		for y != 0 {
			x, y = y, x%y
		}
		a = a / x * uint64(c.m)
		if a > 0xffffffff {
			a = 0xffffffff
		}
	}
	return cls, a
}

func (v *view) rowHit(keys []uint64, rw *row, now uint64) uint32 {
	cls, a := v.classes(rw.pod)
	// holds: class c holds its group block J, each of its m index blocks in every member.
	holds := func(c *grpClass, J uint32) bool {
		for j := J * c.m; j < (J+1)*c.m; j++ {
			if v.groupsAt(keys[j], rw.pod, now)&c.mask != c.mask {
				return false
			}
		}
		return true
	}
	L := rw.blocks
	if rw.fa == 0 { // no full attention: every key given is a candidate
		L = uint32(len(keys))
	}
	L -= uint32(uint64(L) % a)
	for cut := true; cut && L > 0; {
		cut = false
		for k := range cls {
			if L == 0 {
				break
			}
			c := &cls[k]
			var h uint32
			switch c.kind {
			case grpSliding:
				need := c.need / c.m
				if need == 0 {
					need = 1
				}
				run, found := uint32(0), false
				for J := L / c.m; J > 0; {
					J--
					if !holds(c, J) {
						run = 0
						continue
					}
					if run++; run >= need {
						h, found = (J+need)*c.m, true
						break
					}
				}
				if !found {
					h = run * c.m
				}
			case grpMamba:
				for J := L / c.m; J > 0; {
					J--
					if holds(c, J) {
						h = (J + 1) * c.m
						break
					}
				}
			default:
				continue
			}
			h -= uint32(uint64(h) % a)
			if h < L {
				L, cut = h, true
			}
		}
	}
	return L
}

// hybridHits sets every row's hit, inside the caller's read-side section.
func (v *view) hybridHits(keys []uint64, rows []row, now uint64) {
	for i := range rows {
		rw := &rows[i]
		rw.hit = rw.blocks
		if rw.hybrid && len(keys) > 0 && int(rw.blocks) <= len(keys) {
			rw.hit = v.rowHit(keys, rw, now)
		}
	}
}
