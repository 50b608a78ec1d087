// inprocess_test.go — many goroutines of one process reading one index, each with its own
// Reader or through a Pool: every answer equals the C reader's. Run under the race detector
// by `make go-test` (tests whose name contains InProcess).

package kvidx

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestInProcessReaders(t *testing.T) {
	bin := cBin(t, "kvidx-gohelper")
	name := indexName(t, "inproc")
	c := startChild(t, bin, "build", name, "11")
	var lookups []string
	for {
		l := c.next(30 * time.Second)
		if l == "END" {
			break
		}
		if strings.HasPrefix(l, "L ") {
			lookups = append(lookups, l)
		}
	}
	pool, err := NewPool(name, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	check := func(r *Reader, l string) error {
		key := parseKeys(t, strings.Fields(l)[1])[0]
		recs, err := r.Lookup(key, nil)
		if err != nil {
			return err
		}
		if got := fmtLookup(key, recs); got != l {
			return fmt.Errorf("C %s, Go %s", l, got)
		}
		return nil
	}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			own := g%2 == 0
			var r *Reader
			if own {
				var err error
				if r, err = Open(name); err != nil {
					errs <- err
					return
				}
				defer r.Close()
			}
			for round := 0; round < 3; round++ {
				for i := g; i < len(lookups); i += 3 {
					var err error
					if own {
						err = check(r, lookups[i])
					} else {
						err = pool.Do(context.Background(), func(r *Reader) error { return check(r, lookups[i]) })
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
