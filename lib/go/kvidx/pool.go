// pool.go — a fixed set of Readers shared by goroutines. Each Reader holds a registry slot,
// so the pool never grows behind the caller's back (sync.Pool could drop a Reader without
// closing it, keeping its slot until the process exits).

package kvidx

import "context"

// Pool lends Readers of one index to goroutines; Get waits while all are lent, until its
// context is done.
type Pool struct {
	ch  chan *Reader
	all []*Reader
}

// NewPool opens n Readers on index name.
func NewPool(name string, n int) (*Pool, error) {
	if n < 1 {
		return nil, ErrInvalid
	}
	p := &Pool{ch: make(chan *Reader, n)}
	for i := 0; i < n; i++ {
		r, err := Open(name)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.all = append(p.all, r)
		p.ch <- r
	}
	return p, nil
}

// Get borrows a Reader, waiting while all are lent: ctx.Err() if ctx is done first. Give it
// back with Put.
func (p *Pool) Get(ctx context.Context) (*Reader, error) {
	select {
	case r := <-p.ch:
		return r, nil
	default:
	}
	select {
	case r := <-p.ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Put returns a Reader borrowed with Get.
func (p *Pool) Put(r *Reader) { p.ch <- r }

// Do runs f with a borrowed Reader (Get's error if none came before ctx was done).
func (p *Pool) Do(ctx context.Context, f func(r *Reader) error) error {
	r, err := p.Get(ctx)
	if err != nil {
		return err
	}
	defer p.Put(r)
	return f(r)
}

// Close closes every Reader (an io.Closer: the error is always nil); none may be lent.
func (p *Pool) Close() error {
	for _, r := range p.all {
		r.Close()
	}
	p.all = nil
	return nil
}
