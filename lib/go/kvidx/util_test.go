// util_test.go — test helpers: the C programs the tests run (found through $KVIDX_BIN, as
// the Criterion tests find them; `make go-test` sets it and KVIDX_REQUIRE_C=1, so that a
// missing program fails instead of skipping), index names unique to the test, and a child
// process speaking lines on stdout.

package kvidx

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cBin returns the path of C program prog, or skips the test (fails under KVIDX_REQUIRE_C).
func cBin(t testing.TB, prog string) string {
	t.Helper()
	dir := os.Getenv("KVIDX_BIN")
	if dir != "" {
		p := filepath.Join(dir, prog)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("KVIDX_REQUIRE_C") != "" {
		t.Fatalf("%s not found in KVIDX_BIN=%q", prog, dir)
	}
	t.Skipf("%s not found: set KVIDX_BIN to the C build's bin directory (make go-test does)", prog)
	return ""
}

var nameSeq atomic.Int32

// indexName is a name no other test (or test process) uses; its segments are removed at
// the end of the test whatever state it left them in.
func indexName(t testing.TB, tag string) string {
	name := fmt.Sprintf("t-go%s-%d-%d", tag, os.Getpid(), nameSeq.Add(1))
	t.Cleanup(func() {
		matches, _ := filepath.Glob(shmDir + name + "*")
		for _, m := range matches {
			if base := filepath.Base(m); base == name || base == name+".lock" ||
				strings.HasPrefix(base, name+".data.") || strings.HasPrefix(base, name+".reg.") {
				os.Remove(m)
			}
		}
	})
	return name
}

// child is a C helper process whose stdout is read line by line; closing its stdin ends it.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	term  bool // a daemon: stop sends SIGTERM
}

func startChild(t testing.TB, path string, args ...string) *child {
	return startChildEnv(t, nil, path, args...)
}

// startChildEnv starts path with env added to the test's environment.
func startChildEnv(t testing.TB, env []string, path string, args ...string) *child {
	t.Helper()
	c := &child{t: t, cmd: exec.Command(path, args...), lines: make(chan string, 1<<16)}
	if env != nil {
		c.cmd.Env = append(os.Environ(), env...)
	}
	c.cmd.Stderr = os.Stderr
	var err error
	c.stdin, err = c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// helperReader starts the C writer kvidx-gohelper in mode on a fresh index (tagged tag),
// waits for its READY line, and opens a Reader on that index, closed when the test ends.
func helperReader(t *testing.T, mode, tag string) (c *child, r *Reader, name string) {
	t.Helper()
	bin := cBin(t, "kvidx-gohelper")
	name = indexName(t, tag)
	c = startChild(t, bin, mode, name)
	c.waitFor("READY", 10*time.Second)
	r, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return c, r, name
}

// startDaemon starts a program that runs until SIGTERM (stop sends it).
func startDaemon(t testing.TB, path string, args ...string) *child {
	c := startChild(t, path, args...)
	c.term = true
	return c
}

// next returns the child's next line, failing the test after d or when it ended.
func (c *child) next(d time.Duration) string {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("%s ended early", c.cmd.Path)
		}
		return l
	case <-time.After(d):
		c.t.Fatalf("%s: no output within %v", c.cmd.Path, d)
	}
	return ""
}

// waitFor reads lines until one starts with prefix and returns it.
func (c *child) waitFor(prefix string, d time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		l := c.next(time.Until(deadline))
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
}

// stop closes the child's stdin, returns the rest of its output, waits for it.
func (c *child) stop() []string {
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
		if c.term && c.cmd.Process != nil {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	var rest []string
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				if c.cmd.ProcessState == nil {
					_ = c.cmd.Wait()
				}
				return rest
			}
			rest = append(rest, l)
		case <-timeout:
			_ = c.cmd.Process.Kill()
			c.t.Errorf("%s did not end", c.cmd.Path)
			return rest
		}
	}
}
