// keys.go — request keys (FORMAT.md 9; lib/keys.c and kvidx.h "Request keys with extras"):
// a block's key hashes its parent key, its tokens and its extra items; block 0's parent is
// a per-model (or per-LoRA) root. cbor-fnv is llm-d's: FNV-1a-64 over canonical CBOR of
// [parent, tokens, extra]; xxh64 hashes LE64(parent) || LE32(token)... || LE64(len s) || s.
// Pure functions, safe for concurrent use.

package kvidx

import (
	"encoding/binary"
	"sort"
)

const (
	fnvOffset = 0xcbf29ce484222325
	fnvPrime  = 0x100000001b3

	cborUint  = 0 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborMap   = 5 << 5
	cborNull  = 0xf6

	// MaxMMItems is the most multimodal items one KeyChainEx call takes (KVIDX_KEY_MAX_MM).
	MaxMMItems = 1024
)

func fnvBytes(h uint64, p []byte) uint64 {
	for _, b := range p {
		h ^= uint64(b)
		h *= fnvPrime
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// fnvHead feeds a canonical CBOR head (shortest argument form, big-endian).
func fnvHead(h uint64, major byte, v uint64) uint64 {
	var b [9]byte
	var n int
	switch {
	case v < 24:
		b[0] = major | byte(v)
		return fnvBytes(h, b[:1])
	case v <= 0xff:
		b[0], n = major|24, 1
	case v <= 0xffff:
		b[0], n = major|25, 2
	case v <= 0xffffffff:
		b[0], n = major|26, 4
	default:
		b[0], n = major|27, 8
	}
	for i := 0; i < n; i++ {
		b[1+i] = byte(v >> (8 * (n - 1 - i)))
	}
	return fnvBytes(h, b[:1+n])
}

// blockHash is one [parent, tokens, extra] being hashed.
type blockHash struct {
	algo Algo
	fnv  uint64
	xxh  xxh64
}

func (b *blockHash) begin(algo Algo, parent uint64, tokens []uint32, root bool) {
	b.algo = algo
	if algo == AlgoCborFnv {
		h := fnvHead(fnvOffset, cborArray, 3)
		h = fnvHead(h, cborUint, parent)
		if root {
			h = fnvBytes(h, []byte{cborNull})
		} else {
			h = fnvHead(h, cborArray, uint64(len(tokens)))
			for _, t := range tokens {
				h = fnvHead(h, cborUint, uint64(t))
			}
		}
		b.fnv = h
		return
	}
	b.xxh = newXXH64(0)
	var buf [1024]byte
	binary.LittleEndian.PutUint64(buf[:], parent)
	b.xxh.write(buf[:8])
	n := 0
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[n:], t)
		if n += 4; n == len(buf) {
			b.xxh.write(buf[:])
			n = 0
		}
	}
	b.xxh.write(buf[:n])
}

func (b *blockHash) text(s string) {
	if b.algo == AlgoCborFnv {
		b.fnv = fnvString(fnvHead(b.fnv, cborText, uint64(len(s))), s)
		return
	}
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(len(s)))
	b.xxh.write(le[:])
	b.xxh.write([]byte(s))
}

func (b *blockHash) items(k int) {
	if b.algo != AlgoCborFnv {
		return
	}
	if k > 0 {
		b.fnv = fnvHead(b.fnv, cborArray, uint64(k))
	} else {
		b.fnv = fnvBytes(b.fnv, []byte{cborNull})
	}
}

var cborHashKey = []byte{cborMap | 1, cborText | 4, 'H', 'a', 's', 'h'}

func (b *blockHash) item(s string) {
	if b.algo == AlgoCborFnv {
		b.fnv = fnvBytes(b.fnv, cborHashKey)
	}
	b.text(s)
}

func (b *blockHash) end() uint64 {
	if b.algo == AlgoCborFnv {
		return b.fnv
	}
	return b.xxh.sum()
}

func algoKnown(a Algo) bool { return a == AlgoCborFnv || a == AlgoXXH64 }

// KeyRoot is the root key of a model's chains, the parent of block 0 (kvidx_key_root()).
// For a LoRA request pass the LoRA adapter's name as model. 0 for an unknown algo.
func KeyRoot(algo Algo, seed, model string) uint64 {
	var init uint64
	switch algo {
	case AlgoCborFnv:
		init = fnvString(fnvOffset, seed)
	case AlgoXXH64:
		init = XXH64([]byte(seed), 0)
	default:
		return 0
	}
	var b blockHash
	b.begin(algo, init, nil, true)
	b.text(model)
	return b.end()
}

// KeyBlock is one block's key H(parent, tokens, items) (kvidx_key_block()).
func KeyBlock(algo Algo, parent uint64, tokens []uint32, items []string) uint64 {
	if !algoKnown(algo) {
		return 0
	}
	var b blockHash
	b.begin(algo, parent, tokens, false)
	b.items(len(items))
	for _, s := range items {
		b.item(s)
	}
	return b.end()
}

// MMItem is one multimodal item of a prompt: tokens [Start, Start+Len) are its placeholder.
type MMItem struct {
	Start, Len uint32
	ID         string // its identifier (vLLM's mm hash)
}

// Extras is what besides the tokens goes into a prompt's keys (C struct kvidx_key_extras).
type Extras struct {
	Salt string   // vLLM cache_salt, keyed on block 0; "" for none
	MM   []MMItem // multimodal items, any order (keyed in position order)
}

// KeyChain appends the keys of every full block of tokens, chained from parent, to dst
// (kvidx_key_chain()). A trailing partial block is dropped.
func KeyChain(dst []uint64, algo Algo, parent uint64, tokens []uint32, blockSize uint32) []uint64 {
	if blockSize == 0 || !algoKnown(algo) {
		return dst
	}
	bs := int(blockSize)
	for i := 0; i+bs <= len(tokens); i += bs {
		var b blockHash
		b.begin(algo, parent, tokens[i:i+bs], false)
		b.items(0)
		parent = b.end()
		dst = append(dst, parent)
	}
	return dst
}

// KeyChainEx is KeyChain with extras (kvidx_key_chain_ex()): block i's items are the ID of
// every multimodal item whose range overlaps [i*blockSize, (i+1)*blockSize), by start (equal
// starts in the order given), then on block 0 the salt. ErrTooBig for more than MaxMMItems.
func KeyChainEx(dst []uint64, algo Algo, parent uint64, tokens []uint32, blockSize uint32, ex *Extras) ([]uint64, error) {
	if ex == nil || (ex.Salt == "" && len(ex.MM) == 0) {
		return KeyChain(dst, algo, parent, tokens, blockSize), nil
	}
	if blockSize == 0 || !algoKnown(algo) {
		return dst, nil
	}
	if len(ex.MM) > MaxMMItems {
		return dst, ErrTooBig
	}
	mm := make([]MMItem, len(ex.MM))
	copy(mm, ex.MM)
	sort.SliceStable(mm, func(i, j int) bool { return mm[i].Start < mm[j].Start })
	end := func(it *MMItem) uint64 { return uint64(it.Start) + uint64(it.Len) }
	bs := uint64(blockSize)
	lo := 0
	for i := uint64(0); (i+1)*bs <= uint64(len(tokens)); i++ {
		bstart, bend := i*bs, (i+1)*bs
		for lo < len(mm) && end(&mm[lo]) <= bstart {
			lo++
		}
		k := 0
		if i == 0 && ex.Salt != "" {
			k = 1
		}
		for j := lo; j < len(mm) && uint64(mm[j].Start) < bend; j++ {
			if end(&mm[j]) > bstart {
				k++
			}
		}
		var b blockHash
		b.begin(algo, parent, tokens[bstart:bend], false)
		b.items(k)
		for j := lo; j < len(mm) && uint64(mm[j].Start) < bend; j++ {
			if end(&mm[j]) > bstart {
				b.item(mm[j].ID)
			}
		}
		if i == 0 && ex.Salt != "" {
			b.item(ex.Salt)
		}
		parent = b.end()
		dst = append(dst, parent)
	}
	return dst, nil
}

// Keys returns the request keys of a prompt's tokens for model (a LoRA request: the LoRA
// adapter's name) with extras ex (nil: none), with the algorithm, seed and block size of
// the index this Reader maps, as the writer computes them from vLLM's events.
func (r *Reader) Keys(tokens []uint32, model string, ex *Extras) ([]uint64, error) {
	h := &r.v.hdr
	algo := Algo(h.algo)
	return KeyChainEx(nil, algo, KeyRoot(algo, h.seed, model), tokens, h.blockSize, ex)
}
