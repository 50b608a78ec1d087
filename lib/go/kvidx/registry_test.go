// registry_test.go — the layout-5 registry against the C writer: the futex doorbell wakes a
// writer sleeping on kvidx_writer_doorbell(), a Reader follows the index header to registry
// K+1 when the writer replaces a truncated K (its commits too, without a lookup first), and
// Open refuses objects others may write (FORMAT.md 2, 6.4, 8.4). The index-header validation rules are checked on copies.

package kvidx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// commitAndSee commits one route and returns whether the writer printed WOKE before its
// drained line (the doorbell woke it, rather than its 1 s poll timeout).
func commitAndSee(t *testing.T, r *Reader, c *child, corr uint64) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.ih.m.ld32(ihWriterIdle) == 0 { // the writer announced its sleep
		if time.Now().After(deadline) {
			t.Fatal("the writer never went idle")
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.Commit(&Route{CorrID: corr, Pod: 1, Keys: []uint64{7}}); err != nil {
		t.Fatal(err)
	}
	woke := false
	for {
		l := c.next(10 * time.Second)
		switch {
		case l == "WOKE":
			woke = true
		case strings.HasPrefix(l, fmt.Sprintf("R %d ", corr)):
			return woke
		case strings.HasPrefix(l, "REBUILT"), strings.HasPrefix(l, "R "):
		default:
			t.Fatalf("writer said %q", l)
		}
	}
}

func TestDoorbellAndRegistryReplacement(t *testing.T) {
	c, r, name := helperReader(t, "bell", "bell")
	k := r.c.regGen
	if k == 0 || r.ih.m.ld64(ihRegGen) != k {
		t.Fatalf("registered in K=%d, index header names %d", k, r.ih.m.ld64(ihRegGen))
	}
	// The doorbell: a commit made while the writer sleeps wakes it. A commit that races the
	// writer's timeout is drained without a wake-up; a few tries rule that out.
	woke := false
	for i := 0; i < 5 && !woke; i++ {
		woke = commitAndSee(t, r, c, uint64(100+i))
	}
	if !woke {
		t.Fatal("no commit woke the writer through the doorbell")
	}

	// A truncated registry is replaced by K+1; the Reader follows it on its next call and
	// leaves K untouched (it would fault there). Nothing here touches K after the truncation.
	old := fmt.Sprintf("%s%s.reg.%d", shmDir, name, k)
	if err := os.Truncate(old, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.ih.m.ld64(ihRegGen) == k {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not replace the truncated registry")
		}
		time.Sleep(time.Millisecond)
	}
	c.waitFor("REBUILT 1", 10*time.Second)
	t.Logf("registry %d replaced by %d", k, r.ih.m.ld64(ihRegGen))
	if _, err := r.Lookup(7, nil); err != nil && err != ErrRetry {
		t.Fatal(err)
	}
	if _, err := r.Lookup(7, nil); err != nil {
		t.Fatalf("second call after the replacement: %v", err)
	}
	if nk := r.ih.m.ld64(ihRegGen); r.c.regGen != nk || nk <= k {
		t.Fatalf("registered in K=%d, index header names %d (was %d)", r.c.regGen, nk, k)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("registry %d still there: %v", k, err)
	}
	// Commits go to the new registry's ring and reach the writer.
	commitAndSee(t, r, c, 200)

	// Issue 24, fault 2: a commit made after a replacement without a lookup first follows the
	// index header too (it used to go to the truncated ring: lost, or SIGBUS).
	k2 := r.c.regGen
	if err := os.Truncate(fmt.Sprintf("%s%s.reg.%d", shmDir, name, k2), 0); err != nil {
		t.Fatal(err)
	}
	for r.ih.m.ld64(ihRegGen) == k2 {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not replace the truncated registry again")
		}
		time.Sleep(time.Millisecond)
	}
	c.waitFor("REBUILT 2", 10*time.Second)
	commitAndSee(t, r, c, 300)
	if r.c.regGen == k2 {
		t.Fatalf("the commit did not move the Reader off registry %d", k2)
	}

	// Open refuses an index header or a data generation that others may write.
	hdr := shmDir + name
	if err := os.Chmod(hdr, 0o620); err != nil {
		t.Fatal(err)
	}
	if r2, err := Open(name); !errors.Is(err, ErrCorrupt) {
		t.Errorf("group-writable index header: Open gave %v", err)
		if r2 != nil {
			r2.Close()
		}
	}
	if err := os.Chmod(hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("%s%s.data.%d", shmDir, name, r.Generation())
	if err := os.Chmod(data, 0o602); err != nil {
		t.Fatal(err)
	}
	if r2, err := Open(name); !errors.Is(err, ErrCorrupt) {
		t.Errorf("world-writable data generation: Open gave %v", err)
		if r2 != nil {
			r2.Close()
		}
	}
	if err := os.Chmod(data, 0o600); err != nil {
		t.Fatal(err)
	}
	r3, err := Open(name)
	if err != nil {
		t.Fatalf("Open after restoring the modes: %v", err)
	}
	r3.Close()
	for _, l := range c.stop() {
		if strings.HasPrefix(l, "BAD") {
			t.Errorf("writer: %s", l)
		}
	}
}

// validateIdx enforces each rule of FORMAT.md 6.1 on its own.
func TestValidateIndexHeader(t *testing.T) {
	le := binary.LittleEndian
	ok := make([]byte, idxHdrBytes)
	le.PutUint64(ok[ihMagic:], idxMagic)
	le.PutUint64(ok[ihStamp:], stamp)
	le.PutUint64(ok[ihSize:], idxSize)
	le.PutUint32(ok[ihMaxReaders:], 8)
	le.PutUint32(ok[ihRingEntries:], ringMin)
	le.PutUint64(ok[ihRegSize:], ctlSize(8, ringMin))
	le.PutUint64(ok[ihEpoch:], 1)
	le.PutUint64(ok[ihRegGen:], 3)
	x, err := validateIdx(ok, idxSize)
	if err != nil || x.regGen != 3 || x.maxReaders != 8 {
		t.Fatalf("valid header: %+v %v", x, err)
	}
	cases := []struct {
		what string
		f    func(b []byte)
		want error
	}{
		{"magic 0", func(b []byte) { le.PutUint64(b[ihMagic:], 0) }, ErrNotFound},
		{"layout-4 registry", func(b []byte) { le.PutUint64(b[ihMagic:], ctlMagic) }, ErrVersion},
		{"other magic", func(b []byte) { le.PutUint64(b[ihMagic:], dataMagic) }, ErrCorrupt},
		{"stamp", func(b []byte) { le.PutUint64(b[ihStamp:], stamp^1<<48) }, ErrVersion},
		{"size", func(b []byte) { le.PutUint64(b[ihSize:], 8192) }, ErrCorrupt},
		{"readers 0", func(b []byte) { le.PutUint32(b[ihMaxReaders:], 0) }, ErrCorrupt},
		{"ring not 2^n", func(b []byte) { le.PutUint32(b[ihRingEntries:], ringMin+1) }, ErrCorrupt},
		{"reg size", func(b []byte) { le.PutUint64(b[ihRegSize:], ctlSize(8, ringMin)+64) }, ErrCorrupt},
		{"epoch 0", func(b []byte) { le.PutUint64(b[ihEpoch:], 0) }, ErrCorrupt},
		{"epoch high", func(b []byte) { le.PutUint64(b[ihEpoch:], epochMax+1) }, ErrCorrupt},
		{"generation high", func(b []byte) { le.PutUint64(b[ihGeneration:], genMax+1) }, ErrCorrupt},
		{"reg_gen 0", func(b []byte) { le.PutUint64(b[ihRegGen:], 0) }, ErrCorrupt},
	}
	for _, tc := range cases {
		b := append([]byte(nil), ok...)
		tc.f(b)
		if _, err := validateIdx(b, idxSize); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}
	if _, err := validateIdx(ok, idxSize-1); err != ErrCorrupt {
		t.Errorf("short object: %v", err)
	}
	// A registry header matches only the geometry and K the index header names.
	h := make([]byte, ctlHdrBytes)
	le.PutUint64(h[chMagic:], ctlMagic)
	le.PutUint64(h[chStamp:], stamp)
	le.PutUint64(h[chSize:], ctlSize(8, ringMin))
	le.PutUint32(h[chMaxReaders:], 8)
	le.PutUint32(h[chSlotsOff:], ctlHdrBytes)
	le.PutUint64(h[chRingOff:], ctlRingOff(8))
	le.PutUint32(h[chRingEntries:], ringMin)
	le.PutUint64(h[chRegGen:], 3)
	if _, err := validateCtl(h, ctlSize(8, ringMin), x, 3); err != nil {
		t.Errorf("matching registry: %v", err)
	}
	if _, err := validateCtl(h, ctlSize(8, ringMin), x, 4); err != ErrCorrupt {
		t.Errorf("registry of another K: %v", err)
	}
	if _, err := validateCtl(h, ctlSize(8, ringMin)-1, x, 3); err != ErrCorrupt {
		t.Errorf("short registry: %v", err)
	}
}
