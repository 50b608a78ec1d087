/*
 * table.c — the writer's half of the hash table: lookup for update, copy-on-write entries,
 * eviction, store / remove / speculate, the reaper step and the pod-clear sweep. Entries come
 * from the arena (arena.c) and go back to it through RCU (rcu.c); this file calls both, and
 * neither calls back.
 *
 * Concurrency model (readers are in reader.c; the grace periods in rcu.c):
 *
 *  1. One thread of one process calls everything here (the caller serialises apply and reaper).
 *  2. An entry is immutable once a slot points at it. Every change builds a new entry in free
 *     arena memory, then publishes it with one release store of the slot word (publish()),
 *     which pairs with the acquire loads of slot words in rd_find(), scan_slots() and
 *     kv_reader_walk() (reader.c): a reader that sees the new index sees the new entry's
 *     words. The old entry is retired to RCU limbo, never written again until every reader
 *     has passed a quiescent state (kv_rcu_reclaim() in rcu.c). TOMB and EMPTY words
 *     (publish(), slot_ok(), tomb_trim()) are release-stored too; they carry no entry.
 *  3. A slot goes EMPTY -> live -> TOMB -> live ... and TOMB -> EMPTY only when the next slot
 *     is EMPTY, so a probe for a key that stays present never meets an EMPTY slot before it.
 *     The same key is never live in two slots.
 *  4. Clearing a pod bumps its generation in the pod word (pod_bump(), writer.c); readers drop
 *     records whose generation differs (O(1) clear), and the sweep here removes them in
 *     bounded steps.
 *  5. The observer and the stats of a change are called only after the change is published
 *     (notify(), from publish()): what they are told, readers can already see.
 *  6. Nothing read back from the data segment is trusted: slot words and entries are checked
 *     (entry_class(), entry_np(), slot_ok()) before use; a damaged one is dropped and counted
 *     (stat bad_entries), never followed out of the arena and never reused.
 *
 * Progress: every call is bounded (probes by max_probe, cursors by their budget); none waits.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define NS_PER_MS 1000000ull

/* What happened to one record, for the observer: reported once its entry is published. */
enum { KV_NOTE_CONFIRM = 1, KV_NOTE_EXPIRE, KV_NOTE_DROP };
struct kv_note {
	uint8_t kind;
	uint8_t cause;   /* KV_NOTE_DROP: enum kvidx_drop */
	uint64_t w0, w1; /* the record as it was */
	uint64_t now;    /* KV_NOTE_CONFIRM: when */
};

/* A private, mutable copy of one entry, and what its publication will report. */
struct kv_buf {
	uint64_t key;
	unsigned n;               /* records in w0/w1 */
	unsigned old_n, old_spec; /* what the published entry had, for the stats */
	uint64_t w0[KV_MAX_PPK], w1[KV_MAX_PPK];
	unsigned nnotes;
	unsigned rec_evicted;     /* records dropped to make room (stat rec_evictions) */
	struct kv_note notes[KV_MAX_PPK + 1];
};

static inline uint64_t *kv_unit(const struct kvidx *w, uint32_t idx)
{
	return kv_arena_unit(&w->arena, idx);
}

/*
 * Rule 6: the writer reads its own segment as untrusted too (root, or a stray write, may have
 * changed it). An entry is used only if its index lies in the part of the arena handed out,
 * its capacity is one of the writer's classes, its records fit that capacity and the arena.
 * Its class, or -1.
 */
static int entry_class(const struct kvidx *w, uint32_t idx)
{
	if (idx == 0 || idx >= w->arena.bump)
		return -1;
	uint64_t meta = ld_relaxed(&kv_unit(w, idx)[1]);
	unsigned cap = KV_META_CAP(meta);
	int cls = kv_arena_class_of(&w->arena, cap);
	if (cls < 0 || KV_META_NPODS(meta) > cap || (uint64_t)idx + 1 + cap > w->arena.units)
		return -1;
	return cls;
}

/* Records of entry idx the writer may read: its npods, never past ppk or the arena (the meta
 * word may change under a scribbler between entry_class() and here). */
static unsigned entry_np(const struct kvidx *w, uint32_t idx)
{
	unsigned np = KV_META_NPODS(ld_relaxed(&kv_unit(w, idx)[1]));

	if (np > w->ppk)
		np = w->ppk;
	if ((uint64_t)idx + 1 + np > w->arena.units)
		np = 0;
	return np;
}

/* Whether slot word s at pos points at a usable entry; if it does not, the slot is dropped
 * (made a TOMB, the entry leaked: never reused) and counted in stat bad_entries. */
static bool slot_ok(struct kvidx *w, uint64_t pos, uint64_t s)
{
	if (entry_class(w, (uint32_t)s) >= 0)
		return true;
	/* Pairs with the acquire slot loads in rd_find(), scan_slots() and kv_reader_walk()
	 * (reader.c); a TOMB carries no entry. */
	st_release(&w->slots[pos], KV_SLOT_TOMB);
	w->tombs++;
	if (w->live_keys)
		w->live_keys--;
	stat_add(&w->st->bad_entries, 1);
	return false;
}

/* Retires entry old (just unlinked) unless it is damaged (then it is leaked and counted). */
static void retire(struct kvidx *w, uint32_t old)
{
	int cls = entry_class(w, old);

	if (cls < 0)
		stat_add(&w->st->bad_entries, 1);
	else
		kv_rcu_retire(&w->rcu, old, (unsigned)cls);
}

/* ---- records ---- */

static bool rec_live(const struct kvidx *w, uint64_t w0)
{
	unsigned pod = KV_REC_POD(w0);
	uint64_t pw;

	if (pod >= w->max_pods)
		return false;
	pw = ld_relaxed(&w->pods[pod].pd_word);
	return KV_POD_STATE(pw) == KV_POD_ACTIVE && KV_POD_GEN(pw) == KV_REC_GEN(w0);
}

static bool rec_spec(uint64_t w0)
{
	return KV_REC_FLAGS(w0) & KV_REC_SPEC;
}

static uint64_t rec_expires(uint64_t w0, uint64_t w1)
{
	return w1 + (uint64_t)KV_REC_TTL(w0) * NS_PER_MS;
}

/* An empty buffer for key (no entry yet). */
static void buf_empty(struct kv_buf *b, uint64_t key)
{
	b->key = key;
	b->n = b->old_n = b->old_spec = 0;
	b->nnotes = b->rec_evicted = 0;
}

/* Copies entry idx into b, dropping records of cleared or removed pods (reported when the pod
 * was cleared, so not again here). */
static void entry_load(const struct kvidx *w, uint32_t idx, struct kv_buf *b)
{
	const uint64_t *e = kv_unit(w, idx);
	unsigned np = entry_np(w, idx);

	buf_empty(b, e[0]);
	for (unsigned i = 0; i < np; i++) {
		uint64_t w0 = e[2 + 2 * i], w1 = e[3 + 2 * i];
		b->old_n++;
		b->old_spec += rec_spec(w0);
		if (!rec_live(w, w0))
			continue;
		b->w0[b->n] = w0;
		b->w1[b->n] = w1;
		b->n++;
	}
}

/* b for key: a copy of its entry idx, or empty when idx is 0 (no entry yet). */
static void buf_load(const struct kvidx *w, uint32_t idx, uint64_t key, struct kv_buf *b)
{
	if (idx)
		entry_load(w, idx, b);
	else
		buf_empty(b, key);
}

static int buf_find_pod(const struct kv_buf *b, unsigned pod)
{
	for (unsigned i = 0; i < b->n; i++)
		if (KV_REC_POD(b->w0[i]) == pod)
			return (int)i;
	return -1;
}

/* Notes what happens to record (w0, w1), to report after b is published. */
static void buf_note(struct kv_buf *b, unsigned kind, unsigned cause, uint64_t w0, uint64_t w1,
		     uint64_t now)
{
	/* At most one note per record the entry had, plus one: the array cannot overflow. */
	if (b->nnotes < sizeof(b->notes) / sizeof(b->notes[0]))
		b->notes[b->nnotes++] = (struct kv_note){ .kind = (uint8_t)kind,
							  .cause = (uint8_t)cause,
							  .w0 = w0, .w1 = w1, .now = now };
}

static void buf_drop(struct kv_buf *b, unsigned i)
{
	b->n--;
	b->w0[i] = b->w0[b->n];
	b->w1[i] = b->w1[b->n];
}

/* Makes room for one more record in a full entry: an expired speculative record goes first,
 * then the oldest speculative one, then the oldest confirmed one. */
static void buf_make_room(struct kv_buf *b, uint64_t now)
{
	int victim = -1;
	unsigned vrank = 0;
	uint64_t vt = 0;

	for (unsigned i = 0; i < b->n; i++) {
		unsigned rank = !rec_spec(b->w0[i]) ? 1 :
				(rec_expires(b->w0[i], b->w1[i]) <= now ? 3 : 2);
		if (victim < 0 || rank > vrank || (rank == vrank && b->w1[i] < vt)) {
			victim = (int)i;
			vrank = rank;
			vt = b->w1[i];
		}
	}
	buf_note(b, KV_NOTE_DROP, KVIDX_DROP_EVICTED, b->w0[victim], b->w1[victim], now);
	b->rec_evicted++;
	buf_drop(b, (unsigned)victim);
}

/* Appends record (w0, w1) to b, which holds at most ppk: a full b makes room first. */
static void buf_add(struct kv_buf *b, unsigned ppk, uint64_t w0, uint64_t w1, uint64_t now)
{
	if (b->n == ppk)
		buf_make_room(b, now);
	b->w0[b->n] = w0;
	b->w1[b->n] = w1;
	b->n++;
}

/* ---- slots ---- */

/*
 * Finds key. Returns its entry index (0: absent) and sets *pos to its slot, or to where it
 * should be inserted (the first TOMB or the terminating EMPTY), or to -1 when the probe window
 * holds neither.
 */
static uint32_t slot_find(struct kvidx *w, uint64_t key, int64_t *pos)
{
	uint64_t m = kv_mix(key), base = kv_home(m, w->nslots);
	uint32_t fp = kv_fp(m);
	int64_t ins = -1;

	for (uint32_t p = 0; p < w->max_probe; p++) {
		uint64_t s = w->slots[base + p];
		if (s == KV_SLOT_EMPTY) {
			*pos = ins >= 0 ? ins : (int64_t)(base + p);
			return 0;
		}
		if (s == KV_SLOT_TOMB || ((uint32_t)(s >> 32) == fp && !slot_ok(w, base + p, s))) {
			if (ins < 0)
				ins = (int64_t)(base + p);
			continue;
		}
		if ((uint32_t)(s >> 32) == fp && kv_unit(w, (uint32_t)s)[0] == key) {
			*pos = (int64_t)(base + p);
			return (uint32_t)s;
		}
	}
	*pos = ins;
	return 0;
}

/* A TOMB followed by EMPTY can become EMPTY, and so on backwards (rule 3 above). */
static void tomb_trim(struct kvidx *w, uint64_t i)
{
	uint64_t end = w->nslots + w->max_probe;

	for (;;) {
		if (w->slots[i] != KV_SLOT_TOMB || (i + 1 < end && w->slots[i + 1] != KV_SLOT_EMPTY))
			return;
		/* Pairs with the acquire slot loads in rd_find(), scan_slots() and
		 * kv_reader_walk() (reader.c), like every slot store; an EMPTY carries no entry,
		 * so nothing else is ordered. */
		st_release(&w->slots[i], KV_SLOT_EMPTY);
		w->tombs--;
		if (i-- == 0)
			return;
	}
}

static void account(struct kvidx *w, const struct kv_buf *b)
{
	unsigned spec = 0;

	for (unsigned i = 0; i < b->n; i++)
		spec += rec_spec(b->w0[i]);
	stat_add(&w->st->records, (uint64_t)b->n - b->old_n);
	stat_add(&w->st->spec_records, (uint64_t)spec - b->old_spec);
}

/*
 * Reports what publishing b changed: the stats of its notes, then the observer. Runs only
 * after b's entry (or its tombstone) is published, so that nothing is counted for a change
 * that failed and is made again later.
 */
static void notify(struct kvidx *w, const struct kv_buf *b)
{
	const struct kvidx_observer *o = &w->obs;

	stat_add(&w->st->rec_evictions, b->rec_evicted);
	for (unsigned i = 0; i < b->nnotes; i++) {
		const struct kv_note *nt = &b->notes[i];
		int pod = (int)KV_REC_POD(nt->w0);
		uint64_t expires = rec_expires(nt->w0, nt->w1);
		switch (nt->kind) {
		case KV_NOTE_CONFIRM:
			stat_add(&w->st->confirms, 1);
			if (o->on_confirm)
				o->on_confirm(o->ctx, b->key, pod, nt->w1, expires, nt->now);
			break;
		case KV_NOTE_EXPIRE:
			stat_add(&w->st->expirations, 1);
			if (o->on_expire)
				o->on_expire(o->ctx, b->key, pod, nt->w1, expires);
			break;
		case KV_NOTE_DROP:
			if (o->on_drop)
				o->on_drop(o->ctx, (enum kvidx_drop)nt->cause, b->key, pod,
					   rec_spec(nt->w0), nt->w1,
					   rec_spec(nt->w0) ? expires : 0);
			break;
		}
	}
}

void kvidx_writer_set_observer(struct kvidx *w, const struct kvidx_observer *obs)
{
	if (obs)
		w->obs = *obs;
	else
		memset(&w->obs, 0, sizeof(w->obs));
}

static bool evict_one(struct kvidx *w, uint64_t lo, uint64_t hi, bool spec_only);

/*
 * Publishes b at slot pos (which holds old, or is EMPTY/TOMB when old is 0): builds a new
 * entry and swaps it in, or deletes the key when b has no records, then reports b's notes.
 * Returns 0 or -KVIDX_EFULL when the arena has no room (nothing is changed or reported then).
 */
static int publish(struct kvidx *w, int64_t pos, uint32_t old, struct kv_buf *b)
{
	uint64_t m = kv_mix(b->key);
	uint64_t prev = w->slots[pos];

	if (b->n == 0) {
		if (!old)
			return 0;
		/* Release pairs with the acquire slot loads in rd_find(), scan_slots() and
		 * kv_reader_walk() (reader.c); nothing to order but the word itself, kept
		 * release for symmetry with the insert path. */
		st_release(&w->slots[pos], KV_SLOT_TOMB);
		w->tombs++;
		w->live_keys--;
		stat_add(&w->st->keys, -1);
		account(w, b);
		retire(w, old);
		tomb_trim(w, (uint64_t)pos);
		notify(w, b);
		return 0;
	}
	unsigned cls = kv_arena_class(&w->arena, b->n);
	uint32_t idx = kv_arena_alloc(&w->arena, cls);
	if (!idx) {
		/* A grace period now may give retired entries back (a call down to rcu.c, which
		 * frees into the arena; nothing below calls back up). */
		kv_rcu_reclaim(&w->rcu, kvidx_now_ns());
		idx = kv_arena_alloc(&w->arena, cls);
		if (!idx)
			return -KVIDX_EFULL;
	}
	uint64_t *e = kv_unit(w, idx);
	/* Relaxed stores: an expelled reader may still be reading this reused memory; it will
	 * discard what it read (reader.c, rule 5), but the accesses must not be data races. */
	st_relaxed(&e[0], b->key);
	st_relaxed(&e[1], KV_META(b->n, w->arena.cls_cap[cls]));
	for (unsigned i = 0; i < b->n; i++) {
		st_relaxed(&e[2 + 2 * i], b->w0[i]);
		st_relaxed(&e[3 + 2 * i], b->w1[i]);
	}
	/* Release: the entry's words above are visible before the slot points at them. Pairs with
	 * the acquire loads of slot words in rd_find(), scan_slots() and kv_reader_walk()
	 * (reader.c). */
	st_release(&w->slots[pos], ((uint64_t)kv_fp(m) << 32) | idx);
	if (old) {
		retire(w, old);
	} else {
		if (prev == KV_SLOT_TOMB)
			w->tombs--;
		w->live_keys++;
		stat_add(&w->st->keys, 1);
	}
	account(w, b);
	notify(w, b);
	return 0;
}

/* Victim rank of a live entry for eviction: entries with nothing confirmed go first. */
static void victim_rank(const struct kvidx *w, uint32_t idx, unsigned *rank, uint64_t *newest)
{
	const uint64_t *e = kv_unit(w, idx);
	unsigned np = entry_np(w, idx);

	*rank = 0;
	*newest = 0;
	for (unsigned i = 0; i < np; i++) {
		uint64_t w0 = e[2 + 2 * i], w1 = e[3 + 2 * i];
		if (!rec_live(w, w0) || rec_spec(w0))
			continue;
		*rank = 1;
		if (w1 > *newest)
			*newest = w1;
	}
}

static void evict_slot(struct kvidx *w, uint64_t pos)
{
	uint64_t s = w->slots[pos];
	uint32_t idx = (uint32_t)s;
	struct kv_buf b;
	unsigned rank;
	uint64_t newest;

	if (s == KV_SLOT_EMPTY || s == KV_SLOT_TOMB || !slot_ok(w, pos, s))
		return;
	victim_rank(w, idx, &rank, &newest);
	entry_load(w, idx, &b);
	for (unsigned i = 0; i < b.n; i++)
		buf_note(&b, KV_NOTE_DROP, KVIDX_DROP_EVICTED, b.w0[i], b.w1[i], 0);
	b.n = 0;
	publish(w, (int64_t)pos, idx, &b);
	stat_add(rank ? &w->st->evict_confirmed : &w->st->evict_spec, 1);
}

/*
 * Eviction policy (documented in docs/limits.md "Full tables"): look at up to 32 live slots from a clock hand (or
 * within [lo, hi) when a probe window is full); evict the first entry with no live confirmed
 * record, else the one whose newest confirmed store is oldest (sampled LRU).
 */
static bool evict_one(struct kvidx *w, uint64_t lo, uint64_t hi, bool spec_only)
{
	uint64_t end = w->nslots + w->max_probe, best = UINT64_MAX, best_t = UINT64_MAX;
	bool window = hi > lo, best_spec = false;
	uint64_t pos = window ? lo : w->evict_hand;

	for (unsigned seen = 0, steps = 0; seen < 32 && steps < (window ? hi - lo : end); steps++) {
		uint64_t s = w->slots[pos];
		if (s != KV_SLOT_EMPTY && s != KV_SLOT_TOMB && slot_ok(w, pos, s)) {
			unsigned rank;
			uint64_t newest;
			seen++;
			victim_rank(w, (uint32_t)s, &rank, &newest);
			if (rank == 0) {
				best = pos;
				best_spec = true;
				break;
			}
			if (newest < best_t) {
				best_t = newest;
				best = pos;
			}
		}
		if (++pos >= (window ? hi : end))
			pos = window ? lo : 0;
	}
	if (!window)
		w->evict_hand = pos;
	if (best == UINT64_MAX || (spec_only && !best_spec))
		return false;
	evict_slot(w, best);
	return true;
}

/*
 * Finds key for an update that may insert. On return *pos is usable (making room by eviction
 * when the table or the probe window is full) unless the result is -KVIDX_EFULL.
 */
static int find_for_insert(struct kvidx *w, uint64_t key, int64_t *pos, uint32_t *idx)
{
	/* The record budget nearly spent: often that is memory waiting in RCU limbo for a slow
	 * reader rather than live data, so only an entry with nothing confirmed goes (reusable
	 * after a grace period). Done before the probe, so that the probe sees its effects. */
	if (kv_arena_tight(&w->arena))
		evict_one(w, 0, 0, true);
	*idx = slot_find(w, key, pos);
	if (*idx)
		return 0;
	if (w->live_keys >= w->capacity) {
		if (!evict_one(w, 0, 0, false))
			return -KVIDX_EFULL;
		*idx = slot_find(w, key, pos);
	}
	if (*pos < 0) {
		uint64_t home = kv_home(kv_mix(key), w->nslots);
		if (!evict_one(w, home, home + w->max_probe, false))
			return -KVIDX_EFULL;
		*idx = slot_find(w, key, pos);
		if (*pos < 0)
			return -KVIDX_EFULL;
	}
	return 0;
}

static int pod_gen(const struct kvidx *w, int pod, unsigned *gen)
{
	uint64_t pw;

	if (pod < 0 || (unsigned)pod >= w->max_pods)
		return -KVIDX_ENOPOD;
	pw = ld_relaxed(&w->pods[pod].pd_word);
	if (KV_POD_STATE(pw) != KV_POD_ACTIVE)
		return -KVIDX_ENOPOD;
	*gen = KV_POD_GEN(pw);
	return 0;
}

/* ---- prefetching ---- */

/*
 * The batch calls below touch, per key, a slot line and an entry at random places in a table
 * far larger than the caches. Loading the slot line of keys[k + KV_PF_FAR] and the entry the
 * home slot of keys[k + KV_PF_NEAR] points at (its slot line came in meanwhile) while working
 * on keys[k] overlaps those misses. Hints only: what they read decides nothing.
 */
#define KV_PF_FAR 16
#define KV_PF_NEAR 8

/* GCC 12 drops __builtin_prefetch in these loops at -O2 (as dead code): an asm it keeps. */
static inline void prefetch_line(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#else
	__builtin_prefetch(p);
#endif
}

static inline void prefetch_keys(const struct kvidx *w, const uint64_t *keys, size_t n, size_t k)
{
	if (k + KV_PF_FAR < n)
		prefetch_line(&w->slots[kv_home(kv_mix(keys[k + KV_PF_FAR]), w->nslots)]);
	if (k + KV_PF_NEAR < n) {
		uint64_t m = kv_mix(keys[k + KV_PF_NEAR]);
		uint64_t s = w->slots[kv_home(m, w->nslots)];
		if (s != KV_SLOT_EMPTY && s != KV_SLOT_TOMB && (uint32_t)(s >> 32) == kv_fp(m))
			prefetch_line(kv_unit(w, (uint32_t)s));
	}
}

static inline void prefetch_first(const struct kvidx *w, const uint64_t *keys, size_t n)
{
	for (size_t k = 0; k < n && k < KV_PF_FAR; k++)
		prefetch_line(&w->slots[kv_home(kv_mix(keys[k]), w->nslots)]);
}

/*
 * Whether the published entry idx lets kvidx_speculate() skip pod at once: a live record of
 * the pod that is confirmed, or a prediction not yet expired. Read in place, so that the
 * confirmed prefix of a commit costs no copy of its entries.
 */
static bool spec_skip(const struct kvidx *w, uint32_t idx, unsigned pod, uint64_t now)
{
	const uint64_t *e = kv_unit(w, idx);
	unsigned np = KV_META_NPODS(e[1]);

	for (unsigned i = 0; i < np; i++) {
		uint64_t w0 = e[2 + 2 * i];
		if (KV_REC_POD(w0) != pod || !rec_live(w, w0))
			continue;
		return !rec_spec(w0) || rec_expires(w0, e[3 + 2 * i]) > now;
	}
	return false;
}

/* ---- operations ---- */

/* Record word 0 of a confirmed record on tiers, in groups (0: every group, no flag). */
static uint64_t conf_w0(int pod, unsigned gen, unsigned tiers, unsigned groups)
{
	return groups ? KV_REC_W0(pod, gen, tiers, KV_REC_GROUPS, groups & KV_GMASK_ALL) :
			KV_REC_W0(pod, gen, tiers, 0, 0);
}

/* The group mask of confirmed record w0: 0 when it holds the key for every group. */
static unsigned rec_groups(uint64_t w0)
{
	return KV_REC_FLAGS(w0) & KV_REC_GROUPS ? KV_REC_GMASK(w0) : 0;
}

/*
 * What storing (tier, groups) leaves of pod's record w0 (a confirmed one): the tiers add up;
 * groups add up on a record that has them; a store without groups, or a record without them,
 * means every group.
 */
static uint64_t conf_merge(int pod, unsigned gen, uint64_t w0, unsigned tier, unsigned groups)
{
	unsigned rg = rec_groups(w0);

	return conf_w0(pod, gen, KV_REC_TIERS(w0) | tier, groups && rg ? rg | groups : 0);
}

int kvidx_store_groups(struct kvidx *w, int pod, const uint64_t *keys, size_t n,
		       enum kvidx_tier tier, unsigned groups, uint64_t now)
{
	unsigned gen;
	int rc = pod_gen(w, pod, &gen), stored = 0, full = 0;
	struct kv_buf b;

	if (rc)
		return rc;
	groups &= KV_GMASK_ALL;
	prefetch_first(w, keys, n);
	for (size_t k = 0; k < n; k++) {
		int64_t pos;
		uint32_t idx;
		prefetch_keys(w, keys, n, k);
		if (find_for_insert(w, keys[k], &pos, &idx) < 0) {
			stat_add(&w->st->store_failed, 1);
			full = 1;
			continue;
		}
		buf_load(w, idx, keys[k], &b);
		int r = buf_find_pod(&b, (unsigned)pod);
		if (r >= 0 && !rec_spec(b.w0[r]) && b.n == b.old_n &&
		    conf_merge(pod, gen, b.w0[r], tier, groups) == b.w0[r]) {
			stored++; /* already held there: nothing to publish */
			continue;
		}
		if (r >= 0) {
			if (rec_spec(b.w0[r])) {
				buf_note(&b, KV_NOTE_CONFIRM, 0, b.w0[r], b.w1[r], now);
				b.w1[r] = now;
				b.w0[r] = conf_w0(pod, gen, tier, groups);
			} else {
				b.w0[r] = conf_merge(pod, gen, b.w0[r], tier, groups);
			}
		} else {
			buf_add(&b, w->ppk, conf_w0(pod, gen, tier, groups), now, now);
		}
		if (publish(w, pos, idx, &b) < 0) {
			stat_add(&w->st->store_failed, 1);
			full = 1;
			continue;
		}
		stored++;
	}
	stat_add(&w->st->stores, (uint64_t)stored);
	if (w->obs.on_store)
		w->obs.on_store(w->obs.ctx, pod, keys, n, now);
	return full ? -KVIDX_EFULL : stored;
}

int kvidx_store(struct kvidx *w, int pod, const uint64_t *keys, size_t n, enum kvidx_tier tier,
		uint64_t now)
{
	return kvidx_store_groups(w, pod, keys, n, tier, 0, now);
}

int kvidx_remove_groups(struct kvidx *w, int pod, const uint64_t *keys, size_t n,
			unsigned tiers, unsigned groups)
{
	unsigned gen;
	int rc = pod_gen(w, pod, &gen), changed = 0, full = 0;
	struct kv_buf b;

	if (rc)
		return rc;
	groups &= KV_GMASK_ALL;
	if (tiers == 0 && groups == 0)
		tiers = 0xff;
	prefetch_first(w, keys, n);
	for (size_t k = 0; k < n; k++) {
		int64_t pos;
		prefetch_keys(w, keys, n, k);
		uint32_t idx = slot_find(w, keys[k], &pos);
		if (!idx)
			continue;
		entry_load(w, idx, &b);
		int r = buf_find_pod(&b, (unsigned)pod);
		unsigned left = 0, gleft = 0;
		bool drop = false;
		if (r >= 0 && !rec_spec(b.w0[r])) {
			unsigned rt = KV_REC_TIERS(b.w0[r]), rg = rec_groups(b.w0[r]);
			left = rt & ~tiers;
			gleft = rg & ~groups;
			/* A confirmed record losing no tier and no group is left alone: not a change. */
			if (left == rt && gleft == rg)
				r = -1;
			drop = left == 0 || (rg && gleft == 0);
		}
		if (r < 0 && b.n == b.old_n)
			continue;
		if (r >= 0) {
			if (rec_spec(b.w0[r]) || drop) {
				buf_note(&b, KV_NOTE_DROP, KVIDX_DROP_REMOVED, b.w0[r], b.w1[r], 0);
				buf_drop(&b, (unsigned)r);
			} else {
				b.w0[r] = conf_w0(pod, gen, left, gleft);
			}
		}
		/* Shrinking needs a fresh entry too; if even that fails, the old one stays (a
		 * stale record, counted) and the caller hears -KVIDX_EFULL. */
		if (publish(w, pos, idx, &b) < 0) {
			stat_add(&w->st->store_failed, 1);
			full = 1;
			continue;
		}
		changed += r >= 0;
	}
	stat_add(&w->st->removes, (uint64_t)changed);
	return full ? -KVIDX_EFULL : changed;
}

int kvidx_remove(struct kvidx *w, int pod, const uint64_t *keys, size_t n, unsigned tiers)
{
	return kvidx_remove_groups(w, pod, keys, n, tiers ? tiers : 0xff, 0);
}

static uint32_t div_up(uint64_t a, uint64_t b)
{
	uint64_t q = (a + b - 1) / b;

	return q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
}

int kvidx_pod_set_group(struct kvidx *w, int pod, unsigned group_idx, const struct kvidx_group *g)
{
	unsigned gen;
	int rc = pod_gen(w, pod, &gen);
	uint32_t I = w->hdr->dh_block_size, word = 0;

	if (rc)
		return rc;
	if (group_idx >= KV_POD_GROUPS || I == 0)
		return -EINVAL;
	if (g) {
		uint32_t B = g->block_size ? g->block_size : I, m = B > I ? B / I : 1, need = 0;
		if ((B % I && I % B) || m > KV_GRP_M_MAX)
			return -EINVAL;
		switch (g->kind) {
		case KVIDX_GROUP_FULL:
		case KVIDX_GROUP_MAMBA:
			break;
		case KVIDX_GROUP_SLIDING:
			if (!g->sliding_window)
				return -EINVAL;
			/* The window's tokens before a hit's end, in whole group blocks, as index
			 * blocks (vLLM: ceil((W - 1) / block size) blocks). */
			need = div_up((uint64_t)div_up(g->sliding_window - 1, B) * B, I);
			if (need == 0)
				need = 1;
			if (need > KV_GRP_NEED_MAX)
				need = KV_GRP_NEED_MAX;
			break;
		default:
			return -EINVAL;
		}
		word = KV_GRP_WORD(g->kind, m, need);
	}
	/* Each word stands alone (layout.h): readers load it relaxed, in any order. */
	if (ld_relaxed(&w->pods[pod].pd_groups[group_idx]) != word)
		st_relaxed(&w->pods[pod].pd_groups[group_idx], word);
	return 0;
}

int kvidx_speculate(struct kvidx *w, int pod, const uint64_t *keys, size_t n, uint64_t now,
		    uint32_t ttl_ms)
{
	unsigned gen;
	int rc = pod_gen(w, pod, &gen), added = 0, full = 0;
	struct kv_buf b;

	if (rc)
		return rc;
	if (ttl_ms == 0 || ttl_ms > KVIDX_MAX_TTL_MS)
		return -EINVAL;
	if (KV_POD_FLAGS(ld_relaxed(&w->pods[pod].pd_word)) & KV_POD_SPEC_PAUSED)
		return 0;
	prefetch_first(w, keys, n);
	for (size_t k = 0; k < n; k++) {
		int64_t pos;
		uint32_t idx;
		prefetch_keys(w, keys, n, k);
		if (find_for_insert(w, keys[k], &pos, &idx) < 0) {
			full = 1;
			continue;
		}
		if (idx && spec_skip(w, idx, (unsigned)pod, now))
			continue; /* the checks below would find the same, after a copy */
		buf_load(w, idx, keys[k], &b);
		int r = buf_find_pod(&b, (unsigned)pod);
		if (r >= 0 && !rec_spec(b.w0[r]))
			continue; /* confirmed already: a prediction adds nothing */
		if (r >= 0 && rec_expires(b.w0[r], b.w1[r]) <= now) {
			/* Expired, not reaped yet: that expiry is reported, then a new prediction. */
			buf_note(&b, KV_NOTE_EXPIRE, 0, b.w0[r], b.w1[r], now);
			b.w1[r] = now;
			b.w0[r] = KV_REC_W0(pod, gen, KVIDX_TIER_GPU, KV_REC_SPEC, ttl_ms);
		} else if (r >= 0) {
			/* A live prediction is left as it is: its trust ends at created-at + TTL
			 * whatever routes follow, so that steady traffic cannot keep an unconfirmed
			 * prediction alive (docs/ttl.md: a later route never stretches the TTL). */
			continue;
		} else {
			buf_add(&b, w->ppk, KV_REC_W0(pod, gen, KVIDX_TIER_GPU, KV_REC_SPEC, ttl_ms), now,
				now);
		}
		if (publish(w, pos, idx, &b) < 0) {
			full = 1;
			continue;
		}
		added++;
	}
	stat_add(&w->st->speculations, (uint64_t)added);
	return full && !added ? -KVIDX_EFULL : added;
}

/* Whether entry idx holds an expired prediction (read in place: no copy for the common case). */
static bool entry_has_expired(const struct kvidx *w, uint32_t idx, uint64_t now)
{
	const uint64_t *e = kv_unit(w, idx);
	unsigned np = entry_np(w, idx);

	for (unsigned i = 0; i < np; i++)
		if (rec_spec(e[2 + 2 * i]) && rec_expires(e[2 + 2 * i], e[3 + 2 * i]) <= now)
			return true;
	return false;
}

int kvidx_expire(struct kvidx *w, uint64_t now, size_t budget)
{
	uint64_t end = w->nslots + w->max_probe;
	int removed = 0;
	struct kv_buf b;

	if (ld_relaxed(&w->st->spec_records) == 0)
		return 0;
	for (size_t s = 0; s < budget; s++) {
		uint64_t pos = w->expire_pos;
		uint64_t sw = w->slots[pos];
		if (++w->expire_pos >= end)
			w->expire_pos = 0;
		if (sw == KV_SLOT_EMPTY || sw == KV_SLOT_TOMB || !slot_ok(w, pos, sw) ||
		    !entry_has_expired(w, (uint32_t)sw, now))
			continue;
		entry_load(w, (uint32_t)sw, &b);
		bool dirty = b.n != b.old_n;
		for (unsigned i = 0; i < b.n;) {
			if (rec_spec(b.w0[i]) && rec_expires(b.w0[i], b.w1[i]) <= now) {
				buf_note(&b, KV_NOTE_EXPIRE, 0, b.w0[i], b.w1[i], now);
				buf_drop(&b, i);
				dirty = true;
				continue;
			}
			i++;
		}
		/* Counted (stat expirations, in notify()) and reported only once published: a
		 * failed step leaves the records for the next pass. */
		if (!dirty)
			continue;
		if (publish(w, (int64_t)pos, (uint32_t)sw, &b) < 0)
			stat_add(&w->st->store_failed, 1);
		else
			removed += (int)b.nnotes;
	}
	return removed;
}

/* ---- sweep: drops records of cleared pods and trims tombstones, a bounded step at a time ---- */

void kv_sweep_start(struct kvidx *w)
{
	w->sweep_until = w->nslots + w->max_probe; /* a full pass from wherever the cursor is */
}

void kv_sweep_step(struct kvidx *w, size_t budget)
{
	uint64_t end = w->nslots + w->max_probe;
	struct kv_buf b;

	if (!w->sweep_until && w->tombs > w->live_keys / 4 + 1024)
		kv_sweep_start(w);
	for (; budget && w->sweep_until; budget--, w->sweep_until--) {
		/* Walk downwards so that trimming a TOMB lets the next step trim its predecessor. */
		uint64_t pos = w->sweep_pos = (w->sweep_pos == 0 ? end : w->sweep_pos) - 1;
		uint64_t sw = w->slots[pos];
		if (sw == KV_SLOT_TOMB) {
			tomb_trim(w, pos);
			continue;
		}
		if (sw == KV_SLOT_EMPTY || !slot_ok(w, pos, sw))
			continue;
		entry_load(w, (uint32_t)sw, &b);
		if (b.n != b.old_n && publish(w, (int64_t)pos, (uint32_t)sw, &b) < 0)
			stat_add(&w->st->store_failed, 1);
		if (w->sweep_until == 1)
			stat_add(&w->st->sweep_passes, 1);
	}
}
