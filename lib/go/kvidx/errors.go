// errors.go — the errors of the package, one per C error code the reader can return.

package kvidx

import (
	"errors"
	"strings"
	"syscall"
)

var (
	// ErrRetry: the call raced an expulsion of this reader (it stalled inside a read-side
	// section past the writer's stall limit); its answer was discarded. The handle has
	// re-registered itself or will on the next call: call again. (C -KVIDX_ERETRY.)
	ErrRetry = errors.New("kvidx: retry (reader was expelled)")
	// ErrVersion: the segment has another layout version (C -KVIDX_EVERSION).
	ErrVersion = errors.New("kvidx: segment layout version differs from this reader's")
	// ErrCorrupt: a segment header is inconsistent, too small or has a bad magic.
	ErrCorrupt = errors.New("kvidx: segment corrupt")
	// ErrNoSlot: the reader registry is full.
	ErrNoSlot = errors.New("kvidx: reader registry full")
	// ErrNoPod: pod index unknown or not in use.
	ErrNoPod = errors.New("kvidx: no such pod")
	// ErrRingFull: the route ring is full; the message was dropped and counted (C -EAGAIN).
	ErrRingFull = errors.New("kvidx: route ring full, message dropped")
	// ErrInvalid: a bad argument (C -EINVAL).
	ErrInvalid = errors.New("kvidx: invalid argument")
	// ErrTooBig: more than MaxCommitKeys keys in a commit (C -E2BIG).
	ErrTooBig = errors.New("kvidx: too many keys")
	// ErrNotFound: no such index, or no data generation yet (wraps ENOENT).
	ErrNotFound = errNotFound{}
)

// IndexError is what Open returns: the index's name, what went wrong and what to check.
// errors.Is sees through it (ErrNotFound, ErrNoSlot, ErrVersion, syscall.EACCES, ...).
type IndexError struct {
	Name string
	Err  error
}

func (e *IndexError) Error() string {
	var hint string
	switch {
	case errors.Is(e.Err, ErrNotFound):
		hint = " (is kvidx-ingestd running with --name " + e.Name + ", with this /dev/shm?)"
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		hint = " (the reader must be in the index's group: kvidx-ingestd --group)"
	case errors.Is(e.Err, ErrNoSlot):
		hint = " (close unused Readers or raise kvidx-ingestd --max-readers)"
	}
	return "kvidx: index \"" + e.Name + "\": " + strings.TrimPrefix(e.Err.Error(), "kvidx: ") + hint
}

func (e *IndexError) Unwrap() error { return e.Err }

type errNotFound struct{}

func (errNotFound) Error() string        { return "kvidx: no such index" }
func (errNotFound) Is(target error) bool { return target == syscall.ENOENT }
