package precise

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kvidx.dev/kvidx"
)

// The scorer against a C writer that drains the rings (tests/gohelper.c "drain", pods
// p0..p7): nothing is held, so every known endpoint matches 0 of the prompt's blocks and an
// unknown one gets an entry too; the commit reaches the writer with the primary and prefill
// pods and exactly the keys Score computed.
func TestScoreAndCommit(t *testing.T) {
	dir := os.Getenv("KVIDX_BIN")
	bin := filepath.Join(dir, "kvidx-gohelper")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("KVIDX_REQUIRE_C") != "" {
			t.Fatal(err)
		}
		t.Skip("kvidx-gohelper not found: set KVIDX_BIN")
	}
	name := fmt.Sprintf("t-goprecise-%d", os.Getpid())
	cmd := exec.Command(bin, "drain", name)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(outp)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("gohelper silent")
		}
		return ""
	}
	if l := next(); l != "READY" {
		t.Fatal(l)
	}
	s, err := New(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	toks := make([]uint32, 100)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	res, err := s.Score(toks, "m", nil, []string{"p1", "p2", "10.9.9.9:80"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Keys) != 6 || len(res.Matches) != 3 || res.Matches["p1"].TotalBlocks != 6 ||
		res.Matches["p1"].MatchedBlocks != 0 {
		t.Fatalf("result %+v", res)
	}
	want := kvidx.KeyChain(nil, kvidx.AlgoCborFnv, kvidx.KeyRoot(kvidx.AlgoCborFnv, "", "m"), toks, 16)
	if fmt.Sprint(want) != fmt.Sprint(res.Keys) {
		t.Fatalf("keys %x, want %x", res.Keys, want)
	}
	if err := s.Commit(res, 77, "p1", "p2"); err != nil {
		t.Fatal(err)
	}
	l := next()
	ks := make([]string, len(want))
	for i, k := range want {
		ks[i] = fmt.Sprintf("0x%x", k)
	}
	if exp := fmt.Sprintf("R 77 1 2 0 0 6 %s t-ok", strings.Join(ks, ",")); l != exp {
		t.Fatalf("drained %q, want %q", l, exp)
	}
	if s.Commit(res, 78, "10.9.9.9:80", "") != ErrUnknownEndpoint {
		t.Error("commit to an unknown endpoint accepted")
	}
}
