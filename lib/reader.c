/*
 * reader.c — the router's half: attach to an index, wait-free lookups and bulk prefix scoring
 * over the read-only data segment, and the read side of cross-process RCU.
 *
 * Concurrency model (the write side is in writer.c, table.c and rcu.c):
 *
 *  1. Readers never write the data segment (it is mapped PROT_READ). In the registry a reader
 *     writes only its own slot: rs_ctr, rs_pid, rs_lookups, and rs_state by CAS.
 *  2. rd_enter() announces the epoch it read in rs_ctr and issues a full fence before loading
 *     any slot word. Pairs with the full fence in kv_rcu_reclaim() (rcu.c): the writer
 *     either sees the announcement and keeps every entry retired at or after it, or this
 *     reader sees every unlink published before the writer's fence.
 *  3. Slot words are loaded with acquire, pairing with the release stores of slot words in
 *     publish(), slot_ok() and tomb_trim() (table.c), so an entry's words are complete when
 *     read. Entries never change while a slot points at them and while this reader's
 *     announcement protects them, so records are never torn.
 *  4. rd_exit() clears rs_ctr with a release store (every read of the section happens before
 *     the writer may see this reader quiescent), pairing with the seq_cst load of rs_ctr in
 *     kv_rcu_reclaim() (rcu.c).
 *  5. Expulsion: rd_exit() issues an acquire fence and re-reads rs_state. It pairs with the
 *     release fence after the CAS to EXPELLED in kv_rcu_reclaim() (rcu.c; reg_check() in
 *     writer.c has one too): if anything read here came from reused memory, the state read
 *     afterwards is EXPELLED, and the answer is discarded (-KVIDX_ERETRY). The next call
 *     re-registers the slot.
 *  6. rs_state changes only by seq_cst CAS, on both sides: the reader claims, re-registers
 *     and frees its slot (rd_claim(), rd_reregister(), rd_reg_leave() from
 *     kvidx_reader_close()); the writer frees a dead reader's slot and expels a stalled one
 *     (reader_reap_if_dead(), kv_rcu_reclaim() in rcu.c) or every reader of a damaged registry
 *     (reg_check(), writer.c). A CAS that loses to the other side's fails and changes nothing.
 *  7. A generation is mapped only after an acquire load of ih_generation (rd_switch(),
 *     pairing with the release store in kvidx_writer_publish(), writer.c), and used only if
 *     an acquire load of its dh_state says LIVE (rd_map_gen(), pairing with the release store
 *     in data_create(), writer.c).
 *  8. Nothing read from the segment is trusted: indices are bounds-checked against geometry
 *     copied at attach, probes stop after max_probe slots, record counts at pods_per_key.
 *  9. The index header (/NAME) is the writer's alone (readers map it PROT_READ and check that
 *     no one else may write it); every other object must have its owner. It names the
 *     registry (ih_reg_gen): when the writer replaces a damaged one, rd_enter() moves this
 *     handle to the new one before touching the old, which it then leaves untouched.
 *
 * Progress: lookups and scoring are wait-free: no locks, no retry loops; the work is bounded
 * by n x (max_probe + pods_per_key). Switching to a new generation costs a few syscalls.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inspect.h"
#include "internal.h"

#define NS_PER_MS 1000000ull
#define CHUNK 16 /* keys resolved together: their cache misses overlap */

/* ---- attach ---- */

static int rd_map_gen(struct kvidx_reader *r, uint64_t gen)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_data_hdr h;
	struct stat sb;
	struct kv_view v;
	int fd, rc;

	kv_data_shm_name(path, r->name, gen);
	fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	/* Only the index's owner writes generations: an object of another user under this name
	 * (made by a member of the group to feed readers a table of its own) is refused. */
	if ((size_t)sb.st_size < sizeof(struct kvidx_data_hdr) || sb.st_uid != r->owner ||
	    (sb.st_mode & 0022)) {
		close(fd);
		return -KVIDX_ECORRUPT;
	}
	memset(&v, 0, sizeof(v));
	v.size = (size_t)sb.st_size;
	v.base = kv_map(fd, v.size, PROT_READ);
	rc = v.base ? 0 : -errno;
	close(fd);
	if (rc < 0)
		return rc;
	v.hdr = v.base;
	/* Acquire pairs with the release store of dh_state in data_create() (writer.c): a live
	 * generation is completely initialised (rule 7), the header copied below included. Loaded
	 * before the copy, so that it orders the copy itself (the acquire load of ih_generation in
	 * rd_switch(), the caller, does too; this does not lean on that). */
	uint64_t state = ld_acquire(&v.hdr->dh_state);
	/*
	 * Validate a private copy of the header's immutable part and take the geometry from
	 * that same copy: reading the shared header again after validating it would let a
	 * change made in between (a corrupt segment) put unchecked offsets into the view.
	 */
	memset(&h, 0, sizeof(h));
	memcpy(&h, v.base, offsetof(struct kvidx_data_hdr, dh_state));
	rc = kv_data_validate(&h, v.size);
	if (rc == 0 && (h.dh_generation != gen || state != KV_DATA_LIVE))
		rc = -KVIDX_ECORRUPT;
	if (rc < 0) {
		munmap(v.base, v.size);
		return rc;
	}
	v.gen = gen;
	v.nslots = h.dh_nslots;
	v.units = h.dh_arena_units;
	v.ppk = h.dh_pods_per_key;
	v.max_pods = h.dh_max_pods;
	v.max_probe = h.dh_max_probe;
	v.st = (const void *)((const char *)v.base + h.dh_stats_off);
	v.pods = (const void *)((const char *)v.base + h.dh_pods_off);
	v.slots = (const void *)((const char *)v.base + h.dh_slots_off);
	v.arena = (const void *)((const char *)v.base + h.dh_arena_off);
	v.hist = (const void *)((const char *)v.base + h.dh_hist_off);
	v.routers = (const void *)((const char *)v.base + h.dh_routers_off);
	v.load = (const void *)((const char *)v.base + h.dh_load_off);
	v.max_readers = h.dh_max_readers;
	if (v.max_pods > r->scratch_pods) {
		int32_t *rop = malloc(v.max_pods * sizeof(*rop));
		struct kv_row *rows = malloc(v.max_pods * sizeof(*rows));
		if (!rop || !rows) {
			free(rop);
			free(rows);
			munmap(v.base, v.size);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < v.max_pods; i++)
			rop[i] = -1;
		free(r->row_of_pod);
		free(r->rows);
		r->row_of_pod = rop;
		r->rows = rows;
		r->scratch_pods = v.max_pods;
	}
	if (r->v.base)
		munmap(r->v.base, r->v.size);
	r->v = v;
	return 0;
}

/* Maps the generation the registry names. Bounded: a writer switching again meanwhile is
 * followed at most three times. */
static int rd_switch(struct kvidx_reader *r)
{
	int rc = -ENOENT;

	for (int tries = 0; tries < 3; tries++) {
		/* Acquire pairs with the release store of ih_generation in kvidx_writer_publish()
		 * (writer.c): the generation it names is built (rule 7). */
		uint64_t g = ld_acquire(&r->ih->ih_generation);
		if (g == 0)
			return -ENOENT;
		if (g == r->v.gen)
			return 0;
		rc = rd_map_gen(r, g);
		if (rc != -ENOENT)
			return rc;
	}
	return rc;
}

/* Claims slot i of slots (located from the validated probe of the registry header, never
 * from the shared header again) if its OFD lock is free: the lock is the claim. */
static bool rd_claim(struct kvidx_reader *r, struct kvidx_reader_slot *slots, uint32_t i)
{
	struct kvidx_reader_slot *s = slots + i;

	if (kv_lock_try(r->ctl_fd, KV_LOCK_READER(i)) < 0)
		return false;
	st_relaxed(&s->rs_ctr, 0);
	for (int tries = 0; tries < 4; tries++) {
		/* Only the writer competes (freeing this slot as dead in reader_reap_if_dead(), or
		 * expelling its previous owner in kv_rcu_reclaim(), rcu.c: seq_cst CAS on the same
		 * word, rule 6): a handful of tries. */
		uint64_t st = ld_seqcst(&s->rs_state);
		uint64_t mine = ((KV_RS_GEN(st) + 1) << 8) | KV_RS_ACTIVE;
		if (cas_u64(&s->rs_state, st, mine)) {
			r->me = s;
			r->slot = i;
			r->state = mine;
			st_relaxed(&s->rs_pid, (int32_t)getpid());
			st_relaxed(&s->rs_claimed_ns, kvidx_now_ns());
			st_relaxed(&s->rs_lookups, 0);
			return true;
		}
	}
	kv_unlock(r->ctl_fd, KV_LOCK_READER(i));
	return false;
}

/* Leaves the registry this handle is registered in: frees the slot (if still_ours: the
 * registry is intact; a replaced one is not touched, it may be truncated), unmaps, closes. */
static void rd_reg_leave(struct kvidx_reader *r, bool still_ours)
{
	if (r->me && still_ours) {
		/* Quiescent for good (rule 4: pairs with the seq_cst load of rs_ctr in
		 * kv_rcu_reclaim(), rcu.c), then the slot freed by CAS (rule 6: against the writer's
		 * in reader_reap_if_dead() and kv_rcu_reclaim()). */
		st_release(&r->me->rs_ctr, 0);
		uint64_t st = ld_seqcst(&r->me->rs_state);
		cas_u64(&r->me->rs_state, st, (KV_RS_GEN(st) << 8) | KV_RS_FREE);
		kv_unlock(r->ctl_fd, KV_LOCK_READER(r->slot));
	}
	if (r->ctl)
		munmap(r->ctl, r->ctl_size);
	if (r->ctl_fd >= 0)
		close(r->ctl_fd); /* drops the slot lock */
	r->ctl = NULL;
	r->ctl_fd = -1;
	r->me = NULL;
	r->ring = NULL;
}

/*
 * Attaches to the registry the index header names (rule 9): a fresh copy of the header's
 * geometry, the registry object (the index owner's, of that size, with exactly the header the
 * index names), a free slot in it. On success the previous registry (if any) is left.
 * Returns 0, -ENOENT (none yet, or replaced meanwhile), -KVIDX_ECORRUPT, -KVIDX_ENOSLOT or
 * -errno. Bounded: a few system calls and one pass over the slots.
 */
static int rd_reg_attach(struct kvidx_reader *r)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_idx_hdr ih;
	struct kvidx_ctl_hdr probe;
	struct stat sb;
	struct kvidx_reader old = *r;
	int rc;

	/* Acquire pairs with the release store of ih_reg_gen in reg_publish() (writer.c): the
	 * geometry read after it is that registry's. */
	uint64_t k = ld_acquire(&r->ih->ih_reg_gen);
	if (pread(r->idx_fd, &ih, sizeof(ih), 0) != (ssize_t)sizeof(ih))
		return -KVIDX_ECORRUPT;
	if ((rc = kv_idx_validate(&ih, KV_IDX_SIZE)) < 0)
		return rc;
	if (ih.ih_reg_gen != k)
		return -ENOENT; /* replaced while we looked: the next call tries again */
	kv_reg_shm_name(path, r->name, k);
	int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = -KVIDX_ECORRUPT;
	if (fstat(fd, &sb) < 0 || sb.st_uid != r->owner || (uint64_t)sb.st_size < ih.ih_reg_size ||
	    pread(fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe) ||
	    kv_ctl_validate(&probe, (size_t)sb.st_size) < 0 || !kv_ctl_matches(&probe, &ih, k))
		goto fail;
	r->ctl_fd = fd;
	r->ctl_size = probe.ch_size;
	r->ctl = kv_map(fd, r->ctl_size, PROT_READ | PROT_WRITE);
	r->me = NULL;
	if (!r->ctl) {
		rc = -errno;
		goto fail;
	}
	/* Free slots first; then slots whose owner may have died (their lock is gone). The
	 * slots are located from the validated copy, never from the shared header again. */
	struct kvidx_reader_slot *slots = (void *)((char *)r->ctl + probe.ch_slots_off);
	for (int pass = 0; pass < 2 && !r->me; pass++) {
		for (uint32_t i = 0; i < probe.ch_max_readers && !r->me; i++) {
			bool is_free = KV_RS_STATE(ld_relaxed(&slots[i].rs_state)) == KV_RS_FREE;
			if (is_free == (pass == 0))
				rd_claim(r, slots, i);
		}
	}
	if (!r->me) {
		rc = -KVIDX_ENOSLOT;
		munmap(r->ctl, r->ctl_size);
		goto fail;
	}
	r->reg_gen = k;
	r->ring_entries = probe.ch_ring_entries;
	r->ring = kv_ring_at(r->ctl, probe.ch_max_readers, probe.ch_ring_entries, r->slot);
	r->ring_msgs = (struct kv_msg *)(r->ring + 1);
	/* A previous owner's messages may still be queued: continue after them. */
	r->ring_head = ld_relaxed(&r->ring->rh_head); /* our own producer index from now on */
	/* The previous registry was replaced: do not touch it (it may be truncated). */
	if (old.ctl) {
		old.me = NULL;
		rd_reg_leave(&old, false);
	}
	return 0;
fail:
	close(fd);
	r->ctl = old.ctl;
	r->ctl_fd = old.ctl_fd;
	r->ctl_size = old.ctl_size;
	r->me = old.me;
	r->slot = old.slot;
	r->state = old.state;
	return rc;
}

struct kvidx_reader *kvidx_reader_open(const char *name)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_idx_hdr probe;
	struct kvidx_reader *r;
	struct stat sb;
	int rc;

	if (!name)
		name = KVIDX_DEFAULT_NAME;
	if (kv_name_check(name) < 0) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	strcpy(r->name, name);
	r->ctl_fd = -1;
	kv_ctl_shm_name(path, name);
	r->idx_fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (r->idx_fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = -KVIDX_ECORRUPT;
	if (fstat(r->idx_fd, &sb) < 0 || (size_t)sb.st_size < sizeof(probe) ||
	    pread(r->idx_fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe))
		goto fail;
	if (probe.ih_magic == 0) {
		rc = -ENOENT; /* a writer is creating it right now */
		goto fail;
	}
	/* The index header is the owner's alone: one others may write is not trusted. */
	if (sb.st_mode & 0022)
		goto fail;
	r->owner = sb.st_uid;
	rc = kv_idx_validate(&probe, (size_t)sb.st_size);
	if (rc < 0)
		goto fail;
	r->ih = kv_map(r->idx_fd, KV_IDX_SIZE, PROT_READ);
	if (!r->ih) {
		rc = -errno;
		goto fail;
	}
	rc = rd_reg_attach(r);
	if (rc < 0)
		goto fail;
	rc = rd_switch(r);
	if (rc < 0)
		goto fail;
	return r;
fail:
	kvidx_reader_close(r);
	errno = -rc;
	return NULL;
}

void kvidx_reader_close(struct kvidx_reader *r)
{
	if (!r)
		return;
	/* A registry the index header no longer names may be truncated: left untouched. */
	rd_reg_leave(r, r->ih && r->ctl && ld_relaxed(&r->ih->ih_reg_gen) == r->reg_gen);
	if (r->v.base)
		munmap(r->v.base, r->v.size);
	if (r->ih)
		munmap((void *)r->ih, KV_IDX_SIZE);
	if (r->idx_fd >= 0)
		close(r->idx_fd);
	free(r->row_of_pod);
	free(r->rows);
	free(r);
}

/* ---- read-side sections ---- */

/* Re-registers after an expulsion: one CAS attempt, so bounded. The CAS races the writer's
 * (the expulsion CAS in kv_rcu_reclaim(), rcu.c, or reg_check(), writer.c: rule 6). */
static int rd_reregister(struct kvidx_reader *r)
{
	uint64_t st = ld_seqcst(&r->me->rs_state);
	uint64_t mine = ((KV_RS_GEN(st) + 1) << 8) | KV_RS_ACTIVE;

	if (KV_RS_STATE(st) == KV_RS_ACTIVE && st == r->state)
		return 0;
	st_relaxed(&r->me->rs_ctr, 0);
	if (!cas_u64(&r->me->rs_state, st, mine))
		return -KVIDX_ERETRY;
	r->state = mine;
	return 0;
}

int kv_rd_follow(struct kvidx_reader *r)
{
	/* Rule 9: a replaced registry is left before anything in it is touched. */
	if (kvidx_unlikely(ld_relaxed(&r->ih->ih_reg_gen) != r->reg_gen)) {
		/* A failed attach (no free slot, a damaged registry) is retried every
		 * KV_RD_ATTACH_BACKOFF_NS, not at every call (each costs open, fstat, read, map
		 * and a lock try per slot). */
		uint64_t now = kvidx_now_ns();
		if (r->attach_after_ns && now < r->attach_after_ns)
			return r->attach_rc;
		int rc = rd_reg_attach(r);
		if (rc == -ENOENT)
			return -KVIDX_ERETRY; /* replaced again meanwhile: try at once */
		r->attach_after_ns = rc < 0 ? now + KV_RD_ATTACH_BACKOFF_NS : 0;
		r->attach_rc = rc;
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int rd_enter(struct kvidx_reader *r)
{
	int rc0 = kv_rd_follow(r);

	if (rc0 < 0)
		return rc0;
	if (kvidx_unlikely(ld_relaxed(&r->ih->ih_generation) != r->v.gen)) {
		int rc = rd_switch(r);
		if (rc < 0 && !r->v.base)
			return rc; /* else keep serving the generation we have */
	}
	if (kvidx_unlikely(ld_relaxed(&r->me->rs_state) != r->state)) {
		int rc = rd_reregister(r);
		if (rc < 0)
			return rc;
	}
	st_relaxed(&r->me->rs_ctr, ld_relaxed(&r->ih->ih_epoch));
	/* Rule 2: the announcement is visible before any slot is read. Pairs with the full
	 * fence in kv_rcu_reclaim() (rcu.c). */
	fence_seqcst();
	return 0;
}

static int rd_exit(struct kvidx_reader *r)
{
	/* Rule 5: every read of the section is ordered before the state check. Pairs with the
	 * release fence after the expulsion CAS in kv_rcu_reclaim() (rcu.c) and reg_check()
	 * (writer.c). */
	fence_acquire();
	uint64_t st = ld_relaxed(&r->me->rs_state);
	/* Rule 9: a registry replaced during the section may have hidden this reader from the
	 * writer (its expulsion may not have reached the slot). The writer names the new
	 * registry (release store of ih_reg_gen in reg_publish(), writer.c) before it reuses
	 * anything retired before, so after the fence above a section that read reused memory
	 * sees the new name here. */
	bool moved = ld_relaxed(&r->ih->ih_reg_gen) != r->reg_gen;
	/* Rule 4: pairs with the seq_cst load of rs_ctr in kv_rcu_reclaim() (rcu.c). */
	st_release(&r->me->rs_ctr, 0);
	st_relaxed(&r->me->rs_lookups, ld_relaxed(&r->me->rs_lookups) + 1);
	return st == r->state && !moved ? 0 : -KVIDX_ERETRY;
}

/* ---- lookups ---- */

/* Finds key's entry (mixed hash m). Returns NULL when absent. Bounded by max_probe. */
static const uint64_t *rd_find(const struct kv_view *v, uint64_t key, uint64_t m,
			       unsigned *np)
{
	const uint64_t *slot = v->slots + kv_home(m, v->nslots);
	uint32_t fp = kv_fp(m);

	for (uint32_t p = 0; p < v->max_probe; p++) {
		/* Acquire pairs with the release stores of slot words in publish(), slot_ok()
		 * and tomb_trim() (table.c): rule 3. */
		uint64_t s = ld_acquire(&slot[p]);
		if (s == KV_SLOT_EMPTY)
			return NULL;
		uint32_t idx = (uint32_t)s;
		if ((uint32_t)(s >> 32) != fp || s == KV_SLOT_TOMB || idx == 0 || idx >= v->units)
			continue;
		const uint64_t *e = v->arena + 2 * (uint64_t)idx;
		if (ld_relaxed(&e[0]) != key)
			continue;
		uint64_t meta = ld_relaxed(&e[1]);
		unsigned n = KV_META_NPODS(meta), cap = KV_META_CAP(meta);
		if (n > cap || n > v->ppk || (uint64_t)idx + 1 + cap > v->units)
			return NULL; /* corrupt entry: report absent rather than read past it */
		*np = n;
		return e;
	}
	return NULL;
}

/* Whether record (w0, w1) counts now: its pod is live in the record's generation and, if
 * speculative, the prediction has not expired and the pod's speculation is not paused. */
static inline bool rd_rec_visible(const struct kv_view *v, uint64_t w0, uint64_t w1,
				  uint64_t now)
{
	unsigned pod = KV_REC_POD(w0);

	if (pod >= v->max_pods)
		return false;
	/* Acquire pairs with the release stores of pd_word in kvidx_pod_add(), pod_bump() and
	 * kvidx_pod_set_spec_paused() (writer.c). */
	uint64_t pw = ld_acquire(&v->pods[pod].pd_word);
	if (KV_POD_STATE(pw) != KV_POD_ACTIVE || KV_POD_GEN(pw) != KV_REC_GEN(w0))
		return false;
	if (KV_REC_FLAGS(w0) & KV_REC_SPEC)
		return !(KV_POD_FLAGS(pw) & KV_POD_SPEC_PAUSED) &&
		       now < w1 + (uint64_t)KV_REC_TTL(w0) * NS_PER_MS;
	return true;
}

static void rd_rec_out(uint64_t w0, uint64_t w1, struct kvidx_rec *out)
{
	bool spec = KV_REC_FLAGS(w0) & KV_REC_SPEC;

	out->pod = (uint16_t)KV_REC_POD(w0);
	out->tiers = (uint8_t)KV_REC_TIERS(w0);
	out->speculative = spec;
	out->t_ns = w1;
	out->expires_ns = spec ? w1 + (uint64_t)KV_REC_TTL(w0) * NS_PER_MS : 0;
}

static int rd_collect(const struct kv_view *v, const uint64_t *e, unsigned np, uint64_t now,
		      struct kvidx_rec *out, size_t max)
{
	int n = 0;

	for (unsigned i = 0; i < np && (size_t)n < max; i++) {
		uint64_t w0 = ld_relaxed(&e[2 + 2 * i]), w1 = ld_relaxed(&e[3 + 2 * i]);
		if (rd_rec_visible(v, w0, w1, now))
			rd_rec_out(w0, w1, &out[n++]);
	}
	return n;
}

int kvidx_lookup(struct kvidx_reader *r, uint64_t key, struct kvidx_rec *out, size_t max)
{
	uint64_t now = kvidx_now_ns();
	unsigned np = 0;
	int n = 0, rc = rd_enter(r);

	if (rc < 0)
		return rc;
	const uint64_t *e = rd_find(&r->v, key, kv_mix(key), &np);
	if (e)
		n = rd_collect(&r->v, e, np, now, out, max);
	rc = rd_exit(r);
	return rc < 0 ? rc : n;
}

void kvidx_weights_default(struct kvidx_weights *w)
{
	w->tier[0] = 1.0; /* gpu */
	w->tier[1] = 0.8; /* cpu */
	w->tier[2] = 0.5; /* disk */
	w->tier[3] = 0.0; /* other: a medium kvidx-ingestd does not know counts for nothing */
	w->speculative = 1.0;
}

/* Stage A: a key's home slot line, and the next one (a probe runs into it for ~1 key in 7). */
static inline void pf_slots(const struct kv_view *v, uint64_t m)
{
	const uint64_t *s = v->slots + kv_home(m, v->nslots);

	__builtin_prefetch(s);
	__builtin_prefetch(s + 8);
}

/* Stage B: the first entry index in key's probe window whose fingerprint matches (0: absent),
 * without touching the entry; then prefetch the entry's header and first two records. */
static inline uint32_t scan_slots(const struct kv_view *v, uint64_t m)
{
	const uint64_t *slot = v->slots + kv_home(m, v->nslots);
	uint32_t fp = kv_fp(m);

	for (uint32_t p = 0; p < v->max_probe; p++) {
		/* Acquire pairs with the release stores of slot words in publish(), slot_ok()
		 * and tomb_trim() (table.c): rule 3. */
		uint64_t s = ld_acquire(&slot[p]);
		if (s == KV_SLOT_EMPTY)
			return 0;
		uint32_t idx = (uint32_t)s;
		if ((uint32_t)(s >> 32) != fp || s == KV_SLOT_TOMB || idx == 0 || idx >= v->units)
			continue;
		const uint64_t *e = v->arena + 2 * (uint64_t)idx;
		__builtin_prefetch(e);
		__builtin_prefetch(e + 3);
		__builtin_prefetch(e + 5);
		return idx;
	}
	return 0;
}

/* Stage C: checks candidate idx against key (the full probe on a fingerprint collision). */
static inline const uint64_t *verify(const struct kv_view *v, uint64_t key, uint64_t m,
				     uint32_t idx, unsigned *np)
{
	if (!idx)
		return NULL;
	const uint64_t *e = v->arena + 2 * (uint64_t)idx;
	if (kvidx_unlikely(ld_relaxed(&e[0]) != key))
		return rd_find(v, key, m, np);
	uint64_t meta = ld_relaxed(&e[1]);
	unsigned n = KV_META_NPODS(meta), cap = KV_META_CAP(meta);
	if (n > cap || n > v->ppk || (uint64_t)idx + 1 + cap > v->units)
		return NULL;
	*np = n;
	return e;
}

struct score_ctx {
	struct kvidx_reader *r;
	const struct kv_view *v;
	const struct kvidx_weights *w;
	double tw[16]; /* weight of a record by its tier set: its best tier */
	uint64_t now;
	bool open;     /* no candidates: pods holding block 0 join */
	uint32_t nrows;
};

/* Scores block i held by entry e. Returns false when no tracked pod extends its run. */
static inline bool score_block(struct score_ctx *c, const uint64_t *e, unsigned np, uint32_t i)
{
	struct kvidx_reader *r = c->r;
	uint32_t alive = 0;

	if (!e)
		return false;
	for (unsigned k = 0; k < np; k++) {
		uint64_t w0 = ld_relaxed(&e[2 + 2 * k]), w1 = ld_relaxed(&e[3 + 2 * k]);
		if (!rd_rec_visible(c->v, w0, w1, c->now))
			continue;
		unsigned p = KV_REC_POD(w0);
		int32_t ri = r->row_of_pod[p];
		if (ri < 0) {
			if (!c->open || i != 0)
				continue;
			struct kv_row nr = kv_row_new(c->v, (int)p);
			if (!kv_rec_counts(w0, nr.fa))
				continue;
			ri = r->row_of_pod[p] = (int32_t)c->nrows;
			r->rows[c->nrows++] = nr;
		}
		struct kv_row *row = &r->rows[ri];
		/* A key held only by groups other than full attention does not extend the run. */
		if (row->blocks != i || !kv_rec_counts(w0, row->fa))
			continue;
		row->blocks = i + 1;
		if (KV_REC_FLAGS(w0) & KV_REC_SPEC) {
			row->spec++;
			row->spec_run += row->spec_run == i;
			row->score += c->w->speculative;
		} else {
			unsigned tiers = KV_REC_TIERS(w0);
			for (unsigned t = 0; t < KVIDX_NTIERS; t++)
				row->run[t] += ((tiers >> t) & 1) & (row->run[t] == i);
			row->score += c->tw[tiers & 15];
		}
		alive++;
	}
	return alive != 0;
}

_Static_assert(sizeof(struct kvidx_score) >= KVIDX_SCORE_SIZE_1_0 &&
	       offsetof(struct kvidx_score, spec_run) + sizeof(uint32_t) <= KVIDX_SCORE_SIZE_1_0,
	       "struct kvidx_score: 1.0 fields moved (an ABI break)");

/* Writes row as one out row of row_size bytes: the fields both sides know, zeros after. */
static void score_row_out(char *dst, const struct kv_row *row, size_t row_size)
{
	struct kvidx_score s = { .pod = row->pod, .blocks = row->blocks,
				 .spec_blocks = row->spec, .score = row->score,
				 .spec_run = row->spec_run, .hit = row->hit,
				 .flags = KVIDX_SCORE_HIT | (row->hybrid ? KVIDX_SCORE_HYBRID : 0) };
	size_t n = row_size < sizeof(s) ? row_size : sizeof(s);

	for (unsigned t = 0; t < KVIDX_NTIERS; t++)
		s.run[t] = row->run[t];
	memcpy(dst, &s, n);
	if (row_size > n)
		memset(dst + n, 0, row_size - n);
}

int kvidx_score_sized(struct kvidx_reader *r, const uint64_t *keys, size_t n, const int *cand,
		      size_t ncand, const struct kvidx_weights *weights, void *out, size_t max,
		      size_t row_size)
{
	struct kvidx_weights defw;
	struct score_ctx c = { .r = r, .open = cand == NULL, .now = kvidx_now_ns() };
	uint64_t mix[3][CHUNK];
	uint32_t idx[2][CHUNK];
	int rc;

	if ((!keys && n) || (!cand && ncand) || (!out && max) || row_size < KVIDX_SCORE_SIZE_1_0)
		return -EINVAL;
	if (!weights) {
		kvidx_weights_default(&defw);
		weights = &defw;
	}
	c.w = weights;
	for (unsigned m = 0; m < 16; m++) {
		c.tw[m] = 0;
		for (unsigned t = 0; t < KVIDX_NTIERS; t++)
			if ((m & (1u << t)) && weights->tier[t] > c.tw[m])
				c.tw[m] = weights->tier[t];
	}
	rc = rd_enter(r);
	if (rc < 0)
		return rc;
	const struct kv_view *v = c.v = &r->v;
	for (size_t i = 0; i < ncand; i++) {
		int p = cand[i];
		if (p < 0 || (uint32_t)p >= v->max_pods || r->row_of_pod[p] >= 0)
			continue;
		r->row_of_pod[p] = (int32_t)c.nrows;
		r->rows[c.nrows++] = kv_row_new(v, p);
	}

	/*
	 * A three-stage pipeline over chunks of CHUNK keys, so that cache misses overlap instead
	 * of queueing: while chunk k is verified and scored (C), chunk k+1's slots are scanned and
	 * its entries prefetched (B), and chunk k+2's slot lines are prefetched (A). Scoring stops
	 * at the first block no tracked pod extends; at most two chunks of prefetches are wasted.
	 * Every slot is still loaded with acquire before its entry is read, inside the section.
	 */
	/*
	 * Block 0 alone first: new prompts are common, and when block 0 misses one lookup
	 * answers before any of the pipeline's prefetches are spent. The pipeline then runs
	 * over blocks 1..n-1 (pk, pn), scoring block 1 + i.
	 */
	unsigned np0 = 0;
	const uint64_t *e0 = n ? rd_find(v, keys[0], kv_mix(keys[0]), &np0) : NULL;
	if (!score_block(&c, e0, np0, 0))
		goto done;
	const uint64_t *pk = keys + 1;
	size_t pn = n - 1, nch = (pn + CHUNK - 1) / CHUNK;
#define CH_LEN(k) ((k) * CHUNK + CHUNK <= pn ? CHUNK : pn - (k) * CHUNK)
	for (size_t k = 0; k < 2 && k < nch; k++)
		for (size_t j = 0; j < CH_LEN(k); j++) {
			mix[k][j] = kv_mix(pk[k * CHUNK + j]);
			pf_slots(v, mix[k][j]);
		}
	for (size_t j = 0; j < CH_LEN(0) && nch; j++)
		idx[0][j] = scan_slots(v, mix[0][j]);
	for (size_t k = 0; k < nch; k++) {
		if (k + 2 < nch)
			for (size_t j = 0; j < CH_LEN(k + 2); j++) {
				mix[(k + 2) % 3][j] = kv_mix(pk[(k + 2) * CHUNK + j]);
				pf_slots(v, mix[(k + 2) % 3][j]);
			}
		if (k + 1 < nch)
			for (size_t j = 0; j < CH_LEN(k + 1); j++)
				idx[(k + 1) & 1][j] = scan_slots(v, mix[(k + 1) % 3][j]);
		for (size_t j = 0; j < CH_LEN(k); j++) {
			unsigned np = 0;
			size_t i = k * CHUNK + j;
			const uint64_t *e = verify(v, pk[i], mix[k % 3][j], idx[k & 1][j], &np);
			if (!score_block(&c, e, np, (uint32_t)(i + 1)))
				goto done;
		}
	}
#undef CH_LEN
done:
	kv_score_hybrid(v, keys, n, r->rows, c.nrows, c.now); /* hybrid.c, in this section */
	rc = rd_exit(r);
	/* Rows out in pod order; reset the scratch for the next call. */
	int nout = 0;
	for (uint32_t p = 0; p < v->max_pods && (uint32_t)nout < c.nrows; p++) {
		int32_t ri = r->row_of_pod[p];
		if (ri < 0)
			continue;
		r->row_of_pod[p] = -1;
		if ((size_t)nout < max)
			score_row_out((char *)out + (size_t)nout * row_size, &r->rows[ri], row_size);
		nout++;
	}
	if (rc < 0)
		return rc;
	return (size_t)nout < max ? nout : (int)max;
}

/* For hybrid.c, which scores within a section of this file's kvidx_score_sized(). */
const uint64_t *kv_rd_find(const struct kv_view *v, uint64_t key, unsigned *np)
{
	return rd_find(v, key, kv_mix(key), np);
}

bool kv_rd_visible(const struct kv_view *v, uint64_t w0, uint64_t w1, uint64_t now)
{
	return rd_rec_visible(v, w0, w1, now);
}

/* ---- metadata ---- */

int kvidx_reader_info(struct kvidx_reader *r, struct kvidx_info *out)
{
	int rc = rd_enter(r);

	if (rc < 0)
		return rc;
	const struct kvidx_data_hdr *h = r->v.hdr;
	memset(out, 0, sizeof(*out));
	out->layout_version = KV_LAYOUT_VERSION;
	out->generation = r->v.gen;
	out->algo = (enum kvidx_key_algo)h->dh_algo;
	memcpy(out->seed, h->dh_seed, sizeof(out->seed) - 1);
	out->block_size = h->dh_block_size;
	out->geo.capacity = h->dh_capacity;
	out->geo.records = h->dh_records;
	out->geo.pods_per_key = r->v.ppk;
	out->geo.max_pods = r->v.max_pods;
	out->geo.max_readers = h->dh_max_readers;
	out->writer_pid = ld_relaxed(&h->dh_writer_pid);
	out->heartbeat_ns = ld_relaxed(&h->dh_heartbeat_ns);
	out->created_ns = h->dh_created_ns;
	return rd_exit(r);
}

int kvidx_reader_pod(struct kvidx_reader *r, int pod, char name[KVIDX_POD_NAME_MAX],
		     char model[KVIDX_POD_NAME_MAX])
{
	if (r->v.base == NULL || pod < 0 || (uint32_t)pod >= r->v.max_pods)
		return -KVIDX_ENOPOD;
	const struct kvidx_pod *p = &r->v.pods[pod];
	/* A seqlock read with no retry: a torn copy is reported, not looped on. The acquire load
	 * of pd_seq pairs with the release store that ends an update in pod_write_names()
	 * (writer.c): names read after an even pd_seq are at least that update's. */
	uint64_t s1 = ld_acquire(&p->pd_seq);
	/* Acquire pairs with the release stores of pd_word in kvidx_pod_add(), pod_bump() and
	 * kvidx_pod_set_spec_paused() (writer.c). */
	if (KV_POD_STATE(ld_acquire(&p->pd_word)) != KV_POD_ACTIVE)
		return -KVIDX_ENOPOD;
	for (size_t i = 0; i < KVIDX_POD_NAME_MAX; i++) {
		name[i] = ld_relaxed(&p->pd_name[i]);
		if (model)
			model[i] = ld_relaxed(&p->pd_model[i]);
	}
	/* The name loads above are ordered before the re-check of pd_seq. Pairs with the release
	 * fence after the opening pd_seq bump in pod_write_names() (writer.c): if a name load saw an
	 * update's store, the re-check sees that update's odd pd_seq (or a later one). */
	fence_acquire();
	if ((s1 & 1) || ld_relaxed(&p->pd_seq) != s1)
		return -KVIDX_ERETRY;
	name[KVIDX_POD_NAME_MAX - 1] = '\0';
	if (model)
		model[KVIDX_POD_NAME_MAX - 1] = '\0';
	return 0;
}

#define KV_LOAD_TRIES 4 /* seqlock attempts before -KVIDX_ERETRY (the writer's change is short) */

int kvidx_pod_load(struct kvidx_reader *r, int pod, struct kvidx_load *out)
{
	if (!out)
		return -EINVAL;
	/* A writer that switched generations (a restart) counts afresh in the new one: follow
	 * it, as rd_enter() does; the rows are at fixed places, so no read-side section. */
	if (kvidx_unlikely(ld_relaxed(&r->ih->ih_generation) != r->v.gen))
		(void)rd_switch(r); /* on failure keep serving the generation we have */
	if (r->v.base == NULL || pod < 0 || (uint32_t)pod >= r->v.max_pods)
		return -KVIDX_ENOPOD;
	/* Acquire pairs with the release stores of pd_word in kvidx_pod_add() and pod_bump()
	 * (writer.c), which reset the row before a pod index is taken or after it is freed. */
	if (KV_POD_STATE(ld_acquire(&r->v.pods[pod].pd_word)) != KV_POD_ACTIVE)
		return -KVIDX_ENOPOD;
	const struct kvidx_load_row *lr = &r->v.load[pod];
	for (int i = 0; i < KV_LOAD_TRIES; i++) {
		/* Acquire pairs with the release store that ends a change in load_write()
		 * (writer.c): fields read after an even lr_seq are at least that change's. */
		uint64_t s1 = ld_acquire(&lr->lr_seq);
		uint64_t inflight = ld_relaxed(&lr->lr_inflight);
		uint64_t tokens = ld_relaxed(&lr->lr_prefill_tokens);
		uint64_t t_ns = ld_relaxed(&lr->lr_updated_ns);
		uint64_t lost = ld_relaxed(&lr->lr_lost);
		/* The field loads are ordered before the re-check of lr_seq. Pairs with the
		 * release fence after the opening lr_seq bump in load_write(): if a field load saw
		 * a change's store, the re-check sees that change's odd lr_seq (or a later one). */
		fence_acquire();
		if (!(s1 & 1) && ld_relaxed(&lr->lr_seq) == s1) {
			out->inflight = inflight > UINT32_MAX ? UINT32_MAX : (uint32_t)inflight;
			out->prefill_tokens = tokens;
			out->updated_ns = t_ns;
			out->lost = lost;
			return 0;
		}
	}
	return -KVIDX_ERETRY;
}

int kvidx_reader_pod_find(struct kvidx_reader *r, const char *name)
{
	char n[KVIDX_POD_NAME_MAX];

	for (uint32_t i = 0; i < r->v.max_pods; i++)
		if (kvidx_reader_pod(r, (int)i, n, NULL) == 0 && strcmp(n, name) == 0)
			return (int)i;
	return -KVIDX_ENOPOD;
}

/* ---- inspection (inspect.h) ---- */

const struct kv_view *kv_reader_view(struct kvidx_reader *r)
{
	return &r->v;
}

const uint64_t *kv_view_pod_hist(const struct kv_view *v, int pod, int which)
{
	if (pod < 0 || (uint32_t)pod >= v->max_pods || which < 0 || which >= KV_HIST_PER_POD)
		return NULL;
	return v->hist + ((uint64_t)pod * KV_HIST_PER_POD + (unsigned)which) * KV_HIST_BUCKETS;
}

const struct kvidx_router *kv_view_router(const struct kv_view *v, int slot)
{
	if (slot < 0 || (uint32_t)slot >= v->max_readers)
		return NULL;
	return &v->routers[slot];
}

const struct kvidx_ctl_hdr *kv_reader_ctl(struct kvidx_reader *r)
{
	return r->ctl;
}

const struct kvidx_idx_hdr *kv_reader_idx(struct kvidx_reader *r)
{
	return r->ih;
}

uint64_t kv_reader_reg_gen(struct kvidx_reader *r)
{
	return r->reg_gen;
}

int kv_reader_slot_index(struct kvidx_reader *r)
{
	return (int)r->slot;
}

int64_t kv_reader_walk(struct kvidx_reader *r, uint64_t from, uint64_t count, uint64_t now,
		       kv_entry_fn fn, void *arg)
{
	struct kvidx_rec recs[KV_MAX_PPK];
	int64_t keys = 0;

	while (count) {
		int rc = rd_enter(r);
		if (rc < 0)
			return rc;
		const struct kv_view *v = &r->v;
		uint64_t end = v->nslots + v->max_probe;
		uint64_t step = count < 1024 ? count : 1024;
		for (uint64_t pos = from; pos < from + step && pos < end; pos++) {
			/* Acquire pairs with the release stores of slot words in publish(),
			 * slot_ok() and tomb_trim() (table.c), as in rd_find() (rule 3). */
			uint64_t s = ld_acquire(&v->slots[pos]);
			uint32_t idx = (uint32_t)s;
			if (s == KV_SLOT_EMPTY || s == KV_SLOT_TOMB || idx == 0 || idx >= v->units)
				continue;
			const uint64_t *e = v->arena + 2 * (uint64_t)idx;
			uint64_t meta = ld_relaxed(&e[1]);
			unsigned np = KV_META_NPODS(meta), cap = KV_META_CAP(meta);
			if (np > cap || np > v->ppk || (uint64_t)idx + 1 + cap > v->units)
				continue;
			int n = rd_collect(v, e, np, now, recs, KV_MAX_PPK);
			fn(arg, ld_relaxed(&e[0]), recs, n);
			keys++;
		}
		rc = rd_exit(r);
		if (rc < 0)
			return rc;
		if (from + step >= end)
			break;
		from += step;
		count -= step;
	}
	return keys;
}
