/*
 * rcu.c — reclamation across processes: the limbo of retired entries, grace periods over the
 * readers' announcements in the registry, and reader liveness (dead readers freed, stalled
 * readers expelled). The read side is in reader.c (rd_enter(), rd_exit()).
 *
 * Concurrency model:
 *
 *  1. One thread of the one writer process calls everything here (the caller serialises).
 *  2. Grace periods (kv_rcu_reclaim()): retired entries are tagged with the epoch E current at
 *     retirement. The writer stores E+1 (seq_cst), issues a full fence, then reads every
 *     active reader's announced epoch rs_ctr. The fence pairs with the full fence in
 *     rd_enter() (reader.c): either the writer sees the reader's announcement, or the reader
 *     sees every slot change published before the fence (store-load ordering on both sides).
 *     An entry retired at e is reusable once every active reader announced 0 or an epoch > e.
 *  3. Dead readers are found with F_OFD_GETLK on their slot byte (the kernel released the lock
 *     at death, whatever the pid is now, so pid reuse cannot fool it) and freed by CAS on
 *     rs_state, which a new owner claiming the slot (rd_claim(), reader.c) would have changed.
 *  4. Stall: a reader that holds back a grace period is given stall_ns to reach the epoch
 *     that was current when it started to (blocked_target): announcing 0 or an epoch in
 *     [target, current] within that time clears it; anything else, whether it changes or
 *     not, gets it expelled: CAS rs_state from ACTIVE to EXPELLED, then a release fence
 *     before any entry is reused. The fence pairs with the acquire fence in rd_exit()
 *     (reader.c): a reader that read reused memory sees EXPELLED and discards its answer.
 *  5. The epoch is the writer's own (struct kv_rcu): it is stored into ih_epoch, in the index
 *     header only the writer can write, and never read back. Reader slots are untrusted
 *     input: a state that is neither ACTIVE nor EXPELLED holds nothing back; an announcement
 *     above the current epoch (which no reader can have read) holds back everything, like
 *     the oldest possible one, until the reader leaves or the stall limit expels it; every
 *     index is below the writer's own max_readers. So no value a reader writes can make an
 *     entry reusable while another registered reader may hold it, nor hold reclamation up
 *     for longer than the stall limit.
 *  6. After the registry is replaced (writer.c, reg_check()), readers inside a section of the
 *     old one are no longer seen. Their protection is the expulsion the writer writes into
 *     the old registry (reg_expel_all(), writer.c) and the check of ih_reg_gen at the end of
 *     every section (rd_exit(), reader.c): either makes their answer "retry". On top of that,
 *     for one stall limit from the replacement (hold_until; the longest section a reader is
 *     allowed) nothing at all is reused: whatever it was retired at, before the replacement or
 *     during the hold: a reader the expulsion could not reach (no fresh mapping) and that does
 *     not check ih_reg_gen (another build of the same layout) then reads no reused memory in
 *     a section of allowed length. A replacement during a
 *     hold does not extend it, nor starts a new one before a reclaim pass ran without the hold
 *     (a member truncating the registry without pause delays reclamation by one stall limit
 *     at a time, never stops it), unless the replacement
 *     failed and the damaged registry is still in use (kv_rcu_hold(extend)).
 *
 * Progress: nothing here waits for a reader; every loop is bounded by max_readers or the limbo.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rcu.h"
#include "segment.h"

int kv_rcu_init(struct kv_rcu *r, uint64_t *epoch_word, struct kvidx_reader_slot *rslots,
		int ctl_fd, uint32_t max_readers, uint64_t epoch, uint64_t stall_ns,
		struct kv_arena *arena, struct kvidx_stats *st)
{
	memset(r, 0, sizeof(*r));
	r->epoch_word = epoch_word;
	r->rslots = rslots;
	r->ctl_fd = ctl_fd;
	r->max_readers = max_readers;
	r->epoch = epoch;
	r->stall_ns = stall_ns;
	r->arena = arena;
	r->st = st;
	r->blocked_target = calloc(max_readers, sizeof(uint64_t));
	r->blocked_since = calloc(max_readers, sizeof(uint64_t));
	if (!r->blocked_target || !r->blocked_since) {
		kv_rcu_fini(r);
		return -ENOMEM;
	}
	return 0;
}

void kv_rcu_fini(struct kv_rcu *r)
{
	free(r->limbo);
	free(r->blocked_target);
	free(r->blocked_since);
	r->limbo = NULL;
	r->blocked_target = r->blocked_since = NULL;
	r->len = r->cap = r->head = 0;
}

void kv_rcu_hold(struct kv_rcu *r, uint64_t now, bool extend)
{
	/* Rule 6: a hold is not extended by the next replacement, nor replaced by a new one
	 * before one reclaim pass ran after it ran out. */
	if (!extend && r->hold_until)
		return;
	r->hold_until = now + r->stall_ns;
}

void kv_rcu_rebind(struct kv_rcu *r, struct kvidx_reader_slot *rslots, int ctl_fd,
		   uint64_t now)
{
	r->rslots = rslots;
	r->ctl_fd = ctl_fd;
	memset(r->blocked_target, 0, r->max_readers * sizeof(uint64_t));
	memset(r->blocked_since, 0, r->max_readers * sizeof(uint64_t));
	kv_rcu_hold(r, now, false);
}

void kv_rcu_retire(struct kv_rcu *r, uint32_t idx, unsigned cls)
{
	if (r->len == r->cap) {
		size_t ncap = r->cap ? r->cap * 2 : 4096;
		struct kv_limbo_item *nl = malloc(ncap * sizeof(*nl));
		if (!nl)
			return; /* the entry leaks (never reused): safe, and rare enough */
		for (size_t i = 0; i < r->len; i++)
			nl[i] = r->limbo[(r->head + i) % r->cap];
		free(r->limbo);
		r->limbo = nl;
		r->cap = ncap;
		r->head = 0;
	}
	struct kv_limbo_item *it = &r->limbo[(r->head + r->len) % r->cap];
	it->idx = idx;
	it->cls = (uint8_t)cls;
	it->epoch = r->epoch;
	r->len++;
	stat_add(&r->st->retired, 1);
	st_relaxed(&r->st->limbo, r->len);
}

/* Frees a dead reader's slot. The CAS fails harmlessly if a new owner claimed it meanwhile. */
static bool reader_reap_if_dead(struct kv_rcu *r, uint32_t i, uint64_t state)
{
	if (kv_lock_held(r->ctl_fd, KV_LOCK_READER(i)) != 0)
		return false;
	/* seq_cst CAS against the reader's on the same word (rd_claim(), rd_reregister(),
	 * rd_reg_leave() in reader.c, rule 6 there). */
	if (cas_u64(&r->rslots[i].rs_state, state, (KV_RS_GEN(state) << 8) | KV_RS_FREE))
		stat_add(&r->st->readers_dead, 1);
	return true;
}

void kv_rcu_reclaim(struct kv_rcu *r, uint64_t now)
{
	uint64_t e = ++r->epoch;
	uint64_t min = e;

	/* Rule 2: new epoch, full fence (pairs with the full fence in rd_enter(), reader.c),
	 * then read the announcements. */
	st_seqcst(r->epoch_word, e);
	fence_seqcst();
	stat_add(&r->st->epochs, 1);
	for (uint32_t i = 0; i < r->max_readers; i++) {
		struct kvidx_reader_slot *s = &r->rslots[i];
		/* After the fence; pairs with the reader's CAS of rs_state in rd_claim(),
		 * rd_reregister() and rd_reg_leave() (reader.c): a state read here is the one any
		 * CAS below expects. */
		uint64_t state = ld_seqcst(&s->rs_state);
		if (KV_RS_STATE(state) != KV_RS_ACTIVE) {
			if (KV_RS_STATE(state) == KV_RS_EXPELLED)
				reader_reap_if_dead(r, i, state);
			r->blocked_since[i] = 0;
			continue;
		}
		/* Pairs with the store of rs_ctr in rd_enter() (announce) and the release stores
		 * in rd_exit() and rd_reg_leave() (quiescent; reader.c): seq_cst, so that it is
		 * ordered after the fence. */
		uint64_t c = ld_seqcst(&s->rs_ctr);
		if (c == 0 || c == e) {
			r->blocked_since[i] = 0; /* quiescent, or protecting nothing retired yet */
			continue;
		}
		/* Holds the grace period back: c < e, or c > e (rule 5), which protects as much
		 * as the oldest announcement: everything. Having reached the epoch it had to
		 * reach is progress (rule 4): a new stall period starts from here. A now earlier
		 * than the one that started the clock (the publish path reclaims with its own clock
		 * reading, kvidx_writer_tick() with its caller's) is no stall: the difference
		 * would wrap and expel a healthy reader. */
		if (c < e && r->blocked_since[i] && c >= r->blocked_target[i])
			r->blocked_since[i] = 0;
		if (r->blocked_since[i] == 0) {
			r->blocked_target[i] = e;
			r->blocked_since[i] = now;
		} else if (now >= r->blocked_since[i] && now - r->blocked_since[i] >= r->stall_ns) {
			/* Rule 4. The CAS fails if the reader left or re-registered meanwhile (its
			 * CAS in rd_reg_leave() / rd_reregister(), reader.c). */
			if (!reader_reap_if_dead(r, i, state) &&
			    cas_u64(&s->rs_state, state, (KV_RS_GEN(state) << 8) | KV_RS_EXPELLED)) {
				add_relaxed(&s->rs_expelled, 1);
				stat_add(&r->st->readers_expelled, 1);
			}
			r->blocked_since[i] = 0;
			continue;
		}
		if (c > e)
			c = 0;
		if (c < min)
			min = c;
	}
	/* Rule 6: while the hold lasts, nothing is reused. */
	bool held = r->hold_until && now < r->hold_until;
	/* Rule 4: any expulsion above is ordered before the reuse of entries below. Pairs with
	 * the acquire fence in rd_exit() (reader.c). */
	fence_release();
	while (r->len && !held) {
		struct kv_limbo_item *it = &r->limbo[r->head];
		if (it->epoch >= min)
			break;
		if (kv_arena_free(r->arena, it->idx, it->cls) < 0)
			break;
		r->head = (r->head + 1) % r->cap;
		r->len--;
		stat_add(&r->st->reclaimed, 1);
	}
	if (!held)
		r->hold_until = 0; /* ran out, and this pass reclaimed without it */
	st_relaxed(&r->st->limbo, r->len);
}

void kv_rcu_reap_dead(struct kv_rcu *r)
{
	for (uint32_t i = 0; i < r->max_readers; i++) {
		/* Pairs with the reader's CAS of rs_state in rd_claim(), rd_reregister() and
		 * rd_reg_leave() (reader.c). */
		uint64_t state = ld_seqcst(&r->rslots[i].rs_state);
		if (KV_RS_STATE(state) != KV_RS_FREE)
			reader_reap_if_dead(r, i, state);
	}
}
