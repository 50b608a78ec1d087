// sys_linux.go — the system calls the reader needs, through package syscall only (no cgo):
// shm objects as files under /dev/shm, mmap, OFD byte locks, the futex doorbell,
// and CLOCK_MONOTONIC.

package kvidx

import (
	"errors"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const shmDir = "/dev/shm/"

// F_OFD_* are the same on every Linux architecture (asm-generic/fcntl.h).
const (
	fOFDGetlk = 36
	fOFDSetlk = 37
)

var errLockBusy = errors.New("kvidx: lock held")

func ofdLock(fd int, cmd int, typ int16, b int64) (syscall.Flock_t, error) {
	fl := syscall.Flock_t{Type: typ, Whence: 0, Start: b, Len: 1}
	err := syscall.FcntlFlock(uintptr(fd), cmd, &fl)
	return fl, err
}

// lockTry takes the OFD write lock on byte b without waiting.
func lockTry(fd int, b int64) error {
	_, err := ofdLock(fd, fOFDSetlk, syscall.F_WRLCK, b)
	if err == syscall.EAGAIN || err == syscall.EACCES {
		return errLockBusy
	}
	return err
}

func unlock(fd int, b int64) {
	_, _ = ofdLock(fd, fOFDSetlk, syscall.F_UNLCK, b)
}

// lockHeld tells whether another open file description holds a lock on byte b.
func lockHeld(fd int, b int64) (bool, error) {
	fl, err := ofdLock(fd, fOFDGetlk, syscall.F_WRLCK, b)
	if err != nil {
		return false, err
	}
	return fl.Type != syscall.F_UNLCK, nil
}

func shmOpen(name string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(shmDir+name, flags|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

func fileSize(fd int) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

func mmap(fd int, size int, write bool) ([]byte, error) {
	prot := syscall.PROT_READ
	if write {
		prot |= syscall.PROT_WRITE
	}
	return syscall.Mmap(fd, 0, size, prot, syscall.MAP_SHARED)
}

// monoClock gives CLOCK_MONOTONIC nanoseconds (the segment's clock) without a system call
// per reading: Go's monotonic time is CLOCK_MONOTONIC, so one clock_gettime call taken
// between two time.Now() readings fixes the offset.
type monoClock struct {
	t0   time.Time
	mono uint64
}

func clockGettime() uint64 {
	var ts syscall.Timespec
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func newMonoClock() monoClock {
	best := monoClock{}
	var width time.Duration = -1
	for i := 0; i < 5; i++ {
		a := time.Now()
		m := clockGettime()
		b := time.Now()
		if d := b.Sub(a); width < 0 || d < width {
			width = d
			best = monoClock{t0: a.Add(d / 2), mono: m}
		}
	}
	return best
}

func (c *monoClock) now() uint64 {
	return c.mono + uint64(time.Since(c.t0))
}

var clock = newMonoClock()

// NowNs is CLOCK_MONOTONIC in nanoseconds, the clock of every timestamp in an index
// (C kvidx_now_ns()).
func NowNs() uint64 { return clock.now() }

// futexWake is FUTEX_WAKE (linux/futex.h), the same on every architecture.
const futexWake = 1

func atomicAdd32(p *uint32, d uint32) { atomic.AddUint32(p, d) }
