// keys_test.go — request keys: XXH64 against known answers, and every key the Go package
// computes against kvidx-hash (the C library's kvidx_key_root() / kvidx_key_chain_ex()) for
// both algorithms, seeds, models, LoRA, salt, multimodal items (spanning, overlapping,
// zero-length, past the prompt, unsorted), block sizes, partial blocks, CBOR head sizes and
// an explicit parent.

package kvidx

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func TestXXH64KnownAnswers(t *testing.T) {
	// XXH64 of the empty input with seed 0 is the specification's published value.
	if got := XXH64(nil, 0); got != 0xEF46DB3751D8E999 {
		t.Errorf("XXH64(\"\") = %#x", got)
	}
	// Streaming in pieces equals one call, at every split of inputs across the 32-byte stripe.
	data := make([]byte, 200)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	for n := 0; n <= len(data); n += 13 {
		want := XXH64(data[:n], 5)
		for cut := 0; cut <= n; cut += 5 {
			x := newXXH64(5)
			x.write(data[:cut])
			x.write(data[cut:n])
			if x.sum() != want {
				t.Fatalf("split %d/%d differs", cut, n)
			}
		}
	}
}

type keyCase struct {
	algo, seed, model, lora, salt, parent string
	mm                                    []MMItem
	bs                                    uint32
	tokens                                []uint32
}

func seq(from, n uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = from + uint32(i)
	}
	return t
}

func TestKeysMatchKvidxHash(t *testing.T) {
	bin := cBin(t, "kvidx-hash")
	big := []uint32{0, 23, 24, 255, 256, 65535, 65536, 1 << 24, 0xffffffff}
	long := strings.Repeat("x", 300)
	var cases []keyCase
	for _, algo := range []string{"cbor-fnv", "xxh64"} {
		cases = append(cases,
			keyCase{algo: algo, bs: 16, tokens: seq(1, 16)},
			keyCase{algo: algo, model: "test-model", bs: 16, tokens: seq(1, 100)},
			keyCase{algo: algo, seed: "42", model: "m", bs: 4, tokens: append(big, big...)},
			keyCase{algo: algo, model: long, seed: strings.Repeat("s", 63), bs: 1, tokens: seq(7, 9)},
			keyCase{algo: algo, model: "base", lora: "sql-adapter", bs: 16, tokens: seq(5, 48)},
			keyCase{algo: algo, model: "m", salt: "s3cret", bs: 16, tokens: seq(1, 40)},
			keyCase{algo: algo, model: "m", salt: "s3cret", bs: 16, tokens: seq(1, 15)},
			keyCase{algo: algo, model: "m", bs: 16, tokens: seq(1, 64), mm: []MMItem{{20, 20, "img0"}}},
			keyCase{algo: algo, model: "m", salt: "x", bs: 8, tokens: seq(1, 64), mm: []MMItem{
				{30, 4, "late"}, {0, 10, "first"}, {5, 40, long}, {30, 2, "same-start"},
				{16, 0, "zero-at-boundary"}, {19, 0, "zero-mid"}, {60, 100, "past-end"},
				{500, 3, "beyond"}}},
			keyCase{algo: algo, parent: "0x8464eee8f2cf3412", salt: "p", bs: 16, tokens: seq(3, 50),
				mm: []MMItem{{0, 16, "a:b:c"}}},
			keyCase{algo: algo, model: "m", bs: 16, tokens: nil},
		)
	}
	for i, c := range cases {
		args := []string{"--algo", c.algo, "--seed", c.seed, "--model", c.model,
			"--block-size", fmt.Sprint(c.bs)}
		if c.lora != "" {
			args = append(args, "--lora", c.lora)
		}
		if c.salt != "" {
			args = append(args, "--salt", c.salt)
		}
		if c.parent != "" {
			args = append(args, "--parent", c.parent)
		}
		for _, it := range c.mm {
			args = append(args, "--mm", fmt.Sprintf("%d:%d:%s", it.Start, it.Len, it.ID))
		}
		var toks []string
		for _, tk := range c.tokens {
			toks = append(toks, fmt.Sprint(tk))
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(strings.Join(toks, " "))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("case %d: kvidx-hash %v: %v", i, args, err)
		}
		algo := AlgoCborFnv
		if c.algo == "xxh64" {
			algo = AlgoXXH64
		}
		model := c.model
		if c.lora != "" {
			model = c.lora
		}
		parent := KeyRoot(algo, c.seed, model)
		if c.parent != "" {
			fmt.Sscanf(c.parent, "0x%x", &parent)
		}
		keys, err := KeyChainEx(nil, algo, parent, c.tokens, c.bs, &Extras{Salt: c.salt, MM: c.mm})
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&got, "0x%016x\n", k)
		}
		if got.String() != string(out) {
			t.Errorf("case %d (%v):\nC:\n%sGo:\n%s", i, args, out, got.String())
		}
		if len(c.tokens) >= int(c.bs) && len(out) == 0 {
			t.Errorf("case %d: no keys", i)
		}
	}
	// The README's example, a fixed vector: kvidx-hash --model test-model $(seq 1 16).
	if k := KeyChain(nil, AlgoCborFnv, KeyRoot(AlgoCborFnv, "", "test-model"), seq(1, 16), 16); len(k) != 1 || k[0] != 0x8464eee8f2cf3412 {
		t.Errorf("README vector: %x", k)
	}
}
