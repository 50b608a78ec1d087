/*
 * internal.h — internal, never installed: the writer's handle (struct kvidx) and the reader's
 * (struct kvidx_reader), and what the files of lib/ call in each other.
 *
 * The writer is four layers, each calling only the ones below it:
 *
 *   writer.c   segments (open, take over, publish a generation, close), pods, tick
 *   table.c    the hash table: slots, probes, copy-on-write entries, eviction, store /
 *              remove / speculate / expire, the pod-clear sweep, the observer
 *   rcu.c      retired entries, grace periods across processes, reader liveness (rcu.h)
 *   arena.c    the entry allocator: size classes, bump pointer, free lists (arena.h)
 *
 * route.c (route rings, both sides) sits beside writer.c and reader.c and calls neither.
 */
#ifndef KVIDX_INTERNAL_H
#define KVIDX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "arena.h"
#include "inspect.h"
#include "kvidx_writer.h"
#include "layout.h"
#include "rcu.h"
#include "segment.h"

/* shm/ keeps its own names for what lib/kvidx.h publishes (shm/segment.h says why). */
_Static_assert(KV_NAME_MAX == KVIDX_NAME_MAX, "index name limit: shm/ and lib/kvidx.h agree");
_Static_assert((int)KV_EVERSION == (int)KVIDX_EVERSION && (int)KV_ECORRUPT == (int)KVIDX_ECORRUPT,
	       "segment errors: shm/ and lib/kvidx.h agree");

/*
 * The writer's handle. Everything here is the writer's own: values it keeps for itself and
 * only stores into shared memory (sizes, geometry, generation, epoch), never reads back.
 */
struct kvidx {
	char name[KVIDX_NAME_MAX];
	int lock_fd;      /* /NAME.lock: the writer lock (byte 0) */
	/* Index header (/NAME, written by this writer only). */
	int idx_fd;
	struct kvidx_idx_hdr *ih;
	bool created_idx; /* this writer created it (a failed open unlinks everything) */
	gid_t group;      /* (gid_t)-1: none */
	/* Registry /NAME.reg.K (read-write for readers; every word of it untrusted). */
	int ctl_fd;
	struct kvidx_ctl_hdr *ctl;
	size_t ctl_size; /* what the writer mapped, and unmaps */
	struct kvidx_ctl_hdr ctl_copy; /* the header line it wrote (reg_check() restores it) */
	/* What it wrote, once open, of the index header's line 0 and the data header's identity
	 * and geometry (hdr_check() restores them; only the owner can change them). */
	uint8_t ih_line0[KVIDX_CACHELINE];
	uint8_t dh_fixed[offsetof(struct kvidx_data_hdr, dh_state)];
	bool hdr_copied;
	uint64_t reg_gen;     /* K */
	uint64_t old_reg_gen; /* the predecessor's K, when replaced at open */
	uint32_t reg_hit;     /* set by the SIGBUS guard on a fault in the registry (guard.h) */
	struct kvidx_reader_slot *rslots;
	uint32_t max_readers;
	uint32_t ring_entries;
	uint64_t epoch0;   /* epoch the index had when opened (then rcu.epoch is the one) */
	uint64_t prev_gen; /* generation current when opened (0: none), unlinked on publish */
	uint64_t *ring_tail; /* consumer position per ring (writer-private copy of rh_tail) */
	uint32_t drain_next; /* ring kvidx_drain() starts with */
	int drain_slot;      /* ring kvidx_drain() is handing over from, -1 outside it */
	struct kv_bell *bell; /* doorbell helper thread, NULL until kvidx_writer_doorbell() */
	struct kvidx_open_info info;
	/* Current data segment (read-write). */
	uint64_t gen;   /* its generation */
	bool published; /* named in ih_generation */
	int data_fd;
	void *data;
	size_t data_size;
	struct kvidx_data_hdr *hdr;
	struct kvidx_stats *st;
	struct kvidx_pod *pods;
	uint64_t *slots;
	uint64_t *hist; /* per-pod latency histograms */
	struct kvidx_router *routers; /* per registry slot statistics */
	struct kvidx_load_row *load;  /* per pod load view */
	uint64_t nslots, capacity;
	uint32_t ppk, max_pods, max_probe;
	/* The layers below the table (arena.h, rcu.h). */
	struct kv_arena arena;
	struct kv_rcu rcu;
	uint64_t stall_ns;
	struct kvidx_observer obs; /* what kvidx_writer_set_observer() gave (table.c) */
	/* Table occupancy. */
	uint64_t live_keys, tombs;
	/* Background cursors. */
	uint64_t sweep_pos, sweep_until; /* pod-clear sweep: slots left to visit */
	uint64_t expire_pos;
	uint64_t evict_hand;
	uint64_t last_reap_ns;
};

/* A reader's private state (reader.c, route.c). */
struct kv_row {
	int pod;
	uint32_t blocks, spec;
	double score;
	uint32_t run[KVIDX_NTIERS], spec_run; /* struct kvidx_score's runs */
	uint32_t hit;   /* the hybrid hit (hybrid.c) */
	uint16_t fa;    /* the pod's full-attention group mask: a record counts for blocks when
			 * it holds the key in all of them (kv_rec_counts) */
	bool hybrid;    /* the pod has groups whose rule can cut the run (hybrid.c) */
};

/* hybrid.c: a fresh row for pod, with its groups' summary (relaxed loads of pd_groups). */
struct kv_row kv_row_new(const struct kv_view *v, int pod);

/* Whether confirmed-or-speculative record w0 counts for a row whose pod's full-attention
 * group mask is fa: a record with no group mask counts for every group. */
static inline bool kv_rec_counts(uint64_t w0, unsigned fa)
{
	return !(KV_REC_FLAGS(w0) & KV_REC_GROUPS) || (KV_REC_GMASK(w0) & fa) == fa;
}

/* hybrid.c: sets hit of rows[0..nrows) for keys[0..n), inside the caller's read-side section. */
void kv_score_hybrid(const struct kv_view *v, const uint64_t *keys, size_t n,
		     struct kv_row *rows, uint32_t nrows, uint64_t now);

/* Moves r to the registry the index header names if the writer replaced it (reader.c, rule
 * 9): 0, -KVIDX_ERETRY (replaced again meanwhile), -KVIDX_ENOSLOT, -KVIDX_ECORRUPT, -errno;
 * after a failure the next attempt waits KV_RD_ATTACH_BACKOFF_NS (calls in between return the
 * same error at once). kvidx_commit() and kvidx_report_outcome() call it before they touch
 * the ring. */
#define KV_RD_ATTACH_BACKOFF_NS 10000000ull /* 10 ms */
int kv_rd_follow(struct kvidx_reader *r);
/* reader.c, for hybrid.c: key's entry (NULL: absent) and a record's visibility. */
const uint64_t *kv_rd_find(const struct kv_view *v, uint64_t key, unsigned *np);
bool kv_rd_visible(const struct kv_view *v, uint64_t w0, uint64_t w1, uint64_t now);

struct kvidx_reader {
	char name[KVIDX_NAME_MAX];
	int idx_fd;
	const struct kvidx_idx_hdr *ih; /* the index header, mapped PROT_READ */
	uid_t owner;                    /* its owner: every other object must be theirs */
	uint64_t reg_gen;               /* the registry this handle is registered in */
	uint64_t attach_after_ns;       /* kv_rd_follow(): no attempt before (after a failure) */
	int attach_rc;                  /* and what that failure returned */
	int ctl_fd;
	struct kvidx_ctl_hdr *ctl;
	size_t ctl_size;
	struct kvidx_reader_slot *me;
	uint32_t slot;
	uint64_t state; /* the rs_state we own: (claim generation << 8) | ACTIVE */
	struct kv_view v;
	/* Scoring scratch, sized by max_pods. */
	int32_t *row_of_pod;
	struct kv_row *rows;
	uint32_t scratch_pods;
	/* This slot's route ring (producer side). */
	struct kv_ring_hdr *ring;
	struct kv_msg *ring_msgs;
	uint32_t ring_entries;
	uint64_t ring_head; /* private copy of rh_head */
	uint32_t commit_seq;
};

/* route.c: stops the doorbell's helper thread and frees it (w->bell may be NULL); stops and
 * restarts only the thread, keeping the eventfd, around a registry replacement. */
void kv_bell_stop(struct kvidx *w);
void kv_bell_stop_thread(struct kvidx *w, uint32_t *wake); /* wake: NULL, or the word elsewhere */
void kv_bell_start_thread(struct kvidx *w, bool ring);

/* table.c: the pod-clear sweep. start schedules a full pass over the slots; step advances it
 * by at most budget slots (and starts a pass by itself when tombstones pile up). */
void kv_sweep_start(struct kvidx *w);
void kv_sweep_step(struct kvidx *w, size_t budget);

#endif /* KVIDX_INTERNAL_H */
