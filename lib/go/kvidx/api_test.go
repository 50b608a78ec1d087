// api_test.go — the API's guards against quiet misuse (issue 22, item 7): a Route whose
// prefill pod is left out commits none, Pool.Get gives up when its context is done, pods by
// name, io.Closer, errors naming the index or pod, and CorrID equal to C's kvidx_corr_id().

package kvidx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

var _, _ io.Closer = (*Reader)(nil), (*Pool)(nil)

func TestOpenErrorNamesTheIndex(t *testing.T) {
	name := fmt.Sprintf("t-go-nosuch-%d", os.Getpid())
	_, err := Open(name)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Open(%q) = %v, want ErrNotFound", name, err)
	}
	var ie *IndexError
	if !errors.As(err, &ie) || ie.Name != name || !strings.Contains(err.Error(), `"`+name+`"`) ||
		!strings.Contains(err.Error(), "kvidx-ingestd running") {
		t.Fatalf("error %q names neither the index nor what to check", err)
	}
}

// The zero Route.Prefill is no prefill pod: the writer sees -1, never pod 0.
func TestRouteWithoutPrefillCommitsNone(t *testing.T) {
	c, r, _ := helperReader(t, "drain", "noprefill")
	if err := r.Commit(&Route{CorrID: 31, Pod: 1, Keys: []uint64{9}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(&Route{CorrID: 32, Pod: 1, Prefill: SomePod(0), Keys: []uint64{9}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"R 31 1 -1 ", "R 32 1 0 "} {
		if l := c.next(10 * time.Second); !strings.HasPrefix(l, want) {
			t.Fatalf("drained %q, want %q...", l, want)
		}
	}
	if r.Commit(&Route{Pod: 1, Prefill: SomePod(-1)}) == nil || r.Commit(&Route{Pod: 1, Prefill: SomePod(MaxPods)}) == nil {
		t.Error("an out-of-range prefill pod was accepted")
	}
}

func TestPoolGetHonoursContext(t *testing.T) {
	_, _, name := helperReader(t, "drain", "poolctx")
	p, err := NewPool(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r, err := p.Get(context.Background())
	if err != nil || r == nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with every Reader lent and ctx done = %v, want context.Canceled", err)
	}
	if err := p.Do(ctx, func(*Reader) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v", err)
	}
	p.Put(r)
	// A free Reader is lent even under a done context (nothing to wait for).
	if err := p.Do(ctx, func(*Reader) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestPodsByName(t *testing.T) {
	_, r, name := helperReader(t, "drain", "names")
	p1, err := r.PodIndex("p1")
	if err != nil || p1 < 0 {
		t.Fatal(err)
	}
	if op, err := r.Pod("p2"); err != nil || op == NoPod {
		t.Fatalf("Pod(p2) = %v, %v", op, err)
	}
	_, err = r.PodIndex("10.9.9.9:1")
	if !errors.Is(err, ErrNoPod) || !strings.Contains(err.Error(), `"10.9.9.9:1"`) ||
		!strings.Contains(err.Error(), name) {
		t.Fatalf("PodIndex of an unknown name: %v", err)
	}
	rows, err := r.ScoreNames([]uint64{1, 2}, []string{"p1", "10.9.9.9:1", "p3"}, nil, nil)
	if err != nil || len(rows) != 2 || rows[0].Pod != p1 {
		t.Fatalf("ScoreNames = %+v, %v", rows, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil { // twice: nothing
		t.Fatal(err)
	}
}

func TestCorrIDIsCsKvidxCorrID(t *testing.T) {
	for s, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c} {
		if got := CorrID(s); got != want {
			t.Errorf("CorrID(%q) = %#x, want %#x", s, got, want)
		}
	}
	if CorrID("req-1") == CorrID("req-2") {
		t.Error("two ids, one correlation id")
	}
}
