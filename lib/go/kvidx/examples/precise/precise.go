// Package precise is an example: a prefix-cache scorer shaped like llm-d's
// precise-prefix-cache data producer, on a kvidx index instead of llm-d's in-process
// kvblock index. Given a prompt's token ids, the target model (or LoRA adapter) and the
// candidate endpoints ("ip:port"), Score returns per-endpoint match info: matched blocks,
// total blocks, blocks held only by prediction, and per-tier prefix matches, all from one
// kvidx Score call (its rows carry the per-tier runs). After the
// scheduler picks, Commit tells ingestd the decision for the primary (decode) pod and, under
// P/D disaggregation, the prefill profile's pod, so that the next request sharing the
// prefix is routed as if the KV events had already arrived.
//
// Wiring (see docs/api.md "Using kvidx from Go (llm-d)"): kvidx-ingestd runs as a sidecar of each
// scheduler (EPP) replica, subscribed to the model servers' KV events; both containers mount
// one memory-backed emptyDir at /dev/shm; ingestd's --group is the pod's fsGroup so that
// the scheduler's user may map the registry read-write.
package precise

import (
	"errors"
	"sync"

	"kvidx.dev/kvidx"
)

// Tiers names the per-tier counts, in kvidx tier-bit order.
var Tiers = [4]string{"gpu", "cpu", "disk", "other"}

// MatchInfo is one endpoint's match for a prompt.
type MatchInfo struct {
	MatchedBlocks int            // consecutive blocks from block 0 the endpoint holds
	TotalBlocks   int            // full blocks of the prompt
	SpecBlocks    int            // of the matched ones, held only by a prediction
	SpecRun       int            // consecutive blocks from block 0 held only by a prediction
	TierBlocks    map[string]int // per tier: consecutive blocks from block 0 held (confirmed) there
	Score         float64        // kvidx's weighted score (best tier per block)
}

// Result is what Score found, kept for Commit.
type Result struct {
	Keys    []uint64
	Matches map[string]MatchInfo // by endpoint; every candidate has an entry
	pods    map[string]int
}

// Scorer scores prompts on one index from any number of goroutines.
type Scorer struct {
	pool *kvidx.Pool
	mu   sync.Mutex
	gen  uint64
	pods map[string]int // endpoint -> pod index, for generation gen
}

// New attaches readers handles to index name (one per concurrent Score call).
func New(name string, readers int) (*Scorer, error) {
	p, err := kvidx.NewPool(name, readers)
	if err != nil {
		return nil, err
	}
	return &Scorer{pool: p, pods: map[string]int{}}, nil
}

// Close releases the handles.
func (s *Scorer) Close() { s.pool.Close() }

// podOf resolves endpoints to pod indices, caching per data generation.
func (s *Scorer) podOf(r *kvidx.Reader, endpoints []string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := r.Generation(); g != s.gen {
		s.gen, s.pods = g, map[string]int{} // pod indices are per generation
	}
	out := make(map[string]int, len(endpoints))
	for _, ep := range endpoints {
		p, ok := s.pods[ep]
		if !ok {
			if i, err := r.PodIndex(ep); err == nil {
				p, ok = i, true
				s.pods[ep] = i
			}
		}
		if ok {
			out[ep] = p
		}
	}
	return out
}

// retry runs f again once if it raced an expulsion (the handle re-registers by itself).
func retry(f func() error) error {
	err := f()
	if errors.Is(err, kvidx.ErrRetry) {
		err = f()
	}
	return err
}

// Score computes the prompt's keys and each endpoint's match.
func (s *Scorer) Score(tokens []uint32, model string, ex *kvidx.Extras, endpoints []string) (*Result, error) {
	res := &Result{Matches: make(map[string]MatchInfo, len(endpoints))}
	err := s.pool.Do(func(r *kvidx.Reader) error {
		if _, err := r.Info(); err != nil { // follow a new generation before resolving pods
			return err
		}
		var err error
		if res.Keys, err = r.Keys(tokens, model, ex); err != nil {
			return err
		}
		res.pods = s.podOf(r, endpoints)
		cand := make([]int, 0, len(res.pods))
		for _, p := range res.pods {
			cand = append(cand, p)
		}
		var rows []kvidx.Score
		if err := retry(func() (e error) { rows, e = r.Score(res.Keys, cand, nil, rows[:0]); return }); err != nil {
			return err
		}
		byPod := make(map[int]kvidx.Score, len(rows))
		for _, row := range rows {
			byPod[row.Pod] = row
		}
		for _, ep := range endpoints {
			mi := MatchInfo{TotalBlocks: len(res.Keys), TierBlocks: map[string]int{}}
			if p, ok := res.pods[ep]; ok {
				row := byPod[p]
				mi.MatchedBlocks, mi.SpecBlocks, mi.Score = int(row.Blocks), int(row.SpecBlocks), row.Score
				mi.SpecRun = int(row.SpecRun)
				for t, n := range row.Run {
					mi.TierBlocks[Tiers[t]] = int(n)
				}
			}
			res.Matches[ep] = mi
		}
		return nil
	})
	return res, err
}

// ErrUnknownEndpoint: the endpoint is not a pod of the index (ingestd does not know it).
var ErrUnknownEndpoint = errors.New("precise: endpoint unknown to the index")

// Commit sends the scheduler's decision: primary is the decode pod, prefill the prefill
// profile's pod ("" for none). corrID identifies the request for ReportOutcome.
func (s *Scorer) Commit(res *Result, corrID uint64, primary, prefill string) error {
	p, ok := res.pods[primary]
	if !ok {
		return ErrUnknownEndpoint
	}
	pp := -1
	if prefill != "" {
		if pp, ok = res.pods[prefill]; !ok {
			return ErrUnknownEndpoint
		}
	}
	keys := res.Keys
	if len(keys) > kvidx.MaxCommitKeys {
		keys = keys[:kvidx.MaxCommitKeys]
	}
	mi := res.Matches[primary]
	rt := kvidx.Route{CorrID: corrID, Pod: p, PrefillPod: pp, Keys: keys,
		MatchedBlocks: uint32(mi.MatchedBlocks), MatchedSpec: uint32(mi.SpecBlocks)}
	return s.pool.Do(func(r *kvidx.Reader) error { return r.Commit(&rt) })
}

// ReportOutcome passes on what the model server reported for the request (vLLM's
// usage.prompt_tokens_details.cached_tokens and the prompt length).
func (s *Scorer) ReportOutcome(res *Result, corrID uint64, endpoint string, cached, prompt uint32) error {
	p, ok := res.pods[endpoint]
	if !ok {
		return ErrUnknownEndpoint
	}
	return s.pool.Do(func(r *kvidx.Reader) error { return r.ReportOutcome(corrID, p, cached, prompt) })
}
