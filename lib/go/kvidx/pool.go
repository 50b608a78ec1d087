// pool.go — a fixed set of Readers shared by goroutines. Each Reader holds a registry slot,
// so the pool never grows behind the caller's back (sync.Pool could drop a Reader without
// closing it, keeping its slot until the process exits).

package kvidx

// Pool lends Readers of one index to goroutines; Get waits while all are lent.
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

// Get borrows a Reader; give it back with Put.
func (p *Pool) Get() *Reader { return <-p.ch }

// Put returns a Reader borrowed with Get.
func (p *Pool) Put(r *Reader) { p.ch <- r }

// Do runs f with a borrowed Reader.
func (p *Pool) Do(f func(r *Reader) error) error {
	r := p.Get()
	defer p.Put(r)
	return f(r)
}

// Close closes every Reader; none may be lent.
func (p *Pool) Close() {
	for _, r := range p.all {
		r.Close()
	}
	p.all = nil
}
