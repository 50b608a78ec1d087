// index.go — an adapter shaped like llm-d's KV-block index interface, so code written
// against that interface can read a kvidx index instead. The shape is llm-d-kv-cache-manager's
// pkg/kvcache/kvblock/index.go (type Index: Lookup, Add, Evict, each taking a context; Key
// names a block by model and chunk hash, PodEntry a pod by identifier and device tier); the
// types here are this package's own, so nothing of llm-d is imported. Lookup answers from the
// index wait-free; Add and Evict are refused: kvidx-ingestd is the index's only writer (it
// applies the pods' KV events), and a router's own prediction is a Scorer.Commit.

package precise

import (
	"context"
	"errors"

	"kvidx.dev/kvidx"
)

// Key is one KV block as llm-d's kvblock.Key names it: the model and the block's hash, here
// kvidx's request key of the block (kvidx.KeyChain, or Result.Keys).
type Key struct {
	ModelName string
	ChunkHash uint64
}

// PodEntry is a pod holding a block, as llm-d's kvblock.PodEntry: its identifier (the pod's
// name in the index, "ip:port") and device tier ("gpu", "cpu", "disk", "other").
type PodEntry struct {
	PodIdentifier string
	DeviceTier    string
}

// ErrReadOnly: Add and Evict change the index, which only kvidx-ingestd writes.
var ErrReadOnly = errors.New("precise: a kvidx index is written by kvidx-ingestd only")

// Index reads one kvidx index through the Lookup of llm-d's interface.
type Index struct {
	pool *kvidx.Pool
}

// NewIndex attaches readers handles to index name (one per concurrent Lookup).
func NewIndex(name string, readers int) (*Index, error) {
	p, err := kvidx.NewPool(name, readers)
	if err != nil {
		return nil, err
	}
	return &Index{pool: p}, nil
}

// Close releases the handles (an io.Closer).
func (x *Index) Close() error { return x.pool.Close() }

// Lookup returns the longest prefix of keys held by at least one pod of podIdentifierSet
// (empty or nil: any pod), and for each key of it the pods holding it, confirmed or by a live
// prediction. It waits for a free handle until ctx is done.
func (x *Index) Lookup(ctx context.Context, keys []Key, podIdentifierSet map[string]struct{}) ([]Key, map[Key][]string, error) {
	var hit []Key
	pods := make(map[Key][]string)
	err := x.pool.Do(ctx, func(r *kvidx.Reader) error {
		names := map[uint16]string{}
		var recs []kvidx.Rec
		for _, k := range keys {
			var err error
			if recs, err = r.Lookup(k.ChunkHash, recs[:0]); errors.Is(err, kvidx.ErrRetry) {
				recs, err = r.Lookup(k.ChunkHash, recs[:0])
			}
			if err != nil {
				return err
			}
			var on []string
			for _, rec := range recs {
				n, ok := names[rec.Pod]
				if !ok {
					n, _, _ = r.PodName(int(rec.Pod))
					names[rec.Pod] = n
				}
				if _, want := podIdentifierSet[n]; n != "" && (len(podIdentifierSet) == 0 || want) {
					on = append(on, n)
				}
			}
			if len(on) == 0 {
				break // the prefix ends at the first block no wanted pod holds
			}
			hit = append(hit, k)
			pods[k] = on
		}
		return nil
	})
	return hit, pods, err
}

// Add is refused (ErrReadOnly): kvidx-ingestd adds blocks from the pods' BlockStored events.
func (x *Index) Add(ctx context.Context, keys []Key, entries []PodEntry) error { return ErrReadOnly }

// Evict is refused (ErrReadOnly): kvidx-ingestd removes blocks on BlockRemoved.
func (x *Index) Evict(ctx context.Context, key Key, entries []PodEntry) error { return ErrReadOnly }
