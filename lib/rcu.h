/*
 * rcu.h — internal, never installed: reclamation across processes (rcu.c), the writer's
 * middle layer. The table retires the entries it unlinks; grace periods hand them back to
 * the arena (arena.h) once no registered reader can still hold them; dead readers' slots are
 * freed and stalled readers expelled so that neither holds reclamation up.
 */
#ifndef KVIDX_RCU_H
#define KVIDX_RCU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "layout.h"

/* An entry retired at an RCU epoch, reusable once every reader has passed it. */
struct kv_limbo_item {
	uint32_t idx;
	uint8_t cls;
	uint64_t epoch;
};

struct kv_rcu {
	/* ih_epoch in the index header (written by the writer only), and the registry's slots:
	 * every word of those can be written by readers, and is untrusted input (rcu.c, rule 5). */
	uint64_t *epoch_word;
	struct kvidx_reader_slot *rslots;
	int ctl_fd;           /* for the readers' OFD liveness locks */
	uint32_t max_readers; /* the writer's copy, validated when the registry was opened */
	uint64_t epoch;       /* current epoch: the writer's copy of what it stored in ih_epoch */
	/* Limbo, a FIFO in retire (= epoch) order. */
	struct kv_limbo_item *limbo;
	size_t head, len, cap;
	/* Reader stall detection (writer-private): since when slot i has held back the grace
	 * period, and the epoch it must reach (the one current then). */
	uint64_t *blocked_target, *blocked_since;
	uint64_t stall_ns;
	/* After a registry replacement: nothing is reused until hold_until (rcu.c, rule 6:
	 * readers inside a section of the old registry are invisible). 0: no hold. */
	uint64_t hold_until;
	struct kv_arena *arena; /* where reclaimed entries go */
	struct kvidx_stats *st;
};

/*
 * Prepares r over a mapped registry (max_readers slots at rslots) whose epoch is epoch (>= 1;
 * the predecessor's, so that readers' announcements keep their meaning across a takeover).
 * Reclaimed entries go to arena. 0 or -ENOMEM.
 */
int kv_rcu_init(struct kv_rcu *r, uint64_t *epoch_word, struct kvidx_reader_slot *rslots,
		int ctl_fd, uint32_t max_readers, uint64_t epoch, uint64_t stall_ns,
		struct kv_arena *arena, struct kvidx_stats *st);

/* The registry was replaced (same max_readers): new slots and descriptor; nothing is reused
 * for one stall limit from now_ns (kv_rcu_hold(), not extending a hold already running). */
void kv_rcu_rebind(struct kv_rcu *r, struct kvidx_reader_slot *rslots, int ctl_fd,
		   uint64_t now_ns);
/* Reuses nothing for one stall limit from now_ns. A hold already running is kept as it is
 * unless extend (rcu.c, rule 6). */
void kv_rcu_hold(struct kv_rcu *r, uint64_t now_ns, bool extend);
void kv_rcu_fini(struct kv_rcu *r);

/* Retires entry idx of class cls, unlinked from its slot (release-stored) just before: it
 * goes back to the arena after a grace period. O(1) amortised; never blocks. */
void kv_rcu_retire(struct kv_rcu *r, uint32_t idx, unsigned cls);

/*
 * A grace-period check now: advances the epoch, reads every reader's announcement, expels
 * readers stalled past the stall limit (freeing dead ones), and hands every entry no reader
 * can still hold to the arena. O(max_readers + entries reclaimed); never waits for a reader.
 */
void kv_rcu_reclaim(struct kv_rcu *r, uint64_t now_ns);

/* Frees the slots of readers that died outside a read-side section (those inside one are
 * found by kv_rcu_reclaim() when they hold up a grace period). O(max_readers) syscalls. */
void kv_rcu_reap_dead(struct kv_rcu *r);

#endif /* KVIDX_RCU_H */
