/*
 * internal.h — internal to lib/: the writer's private state, shared by writer.c (segments,
 * pods, RCU grace periods, reader liveness), table.c (hash table and entry arena) and
 * route.c (route rings); and the reader's, shared by reader.c and route.c. Never installed.
 */
#ifndef KVIDX_INTERNAL_H
#define KVIDX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inspect.h"
#include "kvidx.h"
#include "layout.h"
#include "segment.h"

#define KV_NCLASSES 8 /* entry size classes: caps 1, 2, 4, ... up to pods_per_key */

/* A growable array of entry indices (a free list of one size class). */
struct kv_u32vec {
	uint32_t *v;
	size_t n, cap;
};

/* An entry retired at an RCU epoch, reusable once every reader has passed it. */
struct kv_limbo_item {
	uint32_t idx;
	uint8_t cls;
	uint64_t epoch;
};

struct kvidx {
	char name[KVIDX_NAME_MAX];
	/* Registry segment (read-write). */
	int ctl_fd;
	struct kvidx_ctl_hdr *ctl;
	struct kvidx_reader_slot *rslots;
	uint32_t max_readers;
	uint32_t ring_entries;
	uint64_t *ring_tail; /* consumer position per ring (writer-private copy of rh_tail) */
	uint32_t drain_next; /* ring kvidx_drain() starts with */
	int bell_fd;         /* doorbell socket, -1 until kvidx_writer_doorbell() */
	/* Current data segment (read-write). */
	int data_fd;
	void *data;
	size_t data_size;
	struct kvidx_data_hdr *hdr;
	struct kvidx_stats *st;
	struct kvidx_pod *pods;
	uint64_t *slots;
	uint64_t *arena; /* unit i = words 2i, 2i+1 */
	uint64_t *hist;  /* per-pod latency histograms */
	uint64_t nslots, units, capacity;
	uint32_t ppk, max_pods, max_probe;
	/* Entry allocator: bump pointer plus one free list per size class. */
	uint32_t ncls;
	uint8_t cls_cap[KV_NCLASSES];
	uint64_t bump;
	struct kv_u32vec freel[KV_NCLASSES];
	/* RCU limbo, a FIFO in retire (= epoch) order. */
	struct kv_limbo_item *limbo;
	size_t limbo_head, limbo_len, limbo_cap;
	/* Table occupancy. */
	uint64_t live_keys, tombs;
	/* Background cursors. */
	uint64_t sweep_pos, sweep_until; /* pod-clear sweep: slots left to visit */
	uint64_t expire_pos;
	uint64_t evict_hand;
	/* Reader stall detection (writer-private). */
	uint64_t *blocked_ctr, *blocked_since;
	uint64_t stall_ns;
	uint64_t last_tick_ns;
	uint64_t last_reap_ns;
};

/* A reader's private state (reader.c, route.c). */
struct kv_row {
	int pod;
	uint32_t blocks, spec;
	double score;
	uint32_t run[KVIDX_NTIERS], spec_run; /* struct kvidx_score's runs */
};

struct kvidx_reader {
	char name[KVIDX_NAME_MAX];
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
	int bell_fd;        /* socket to ring the writer's doorbell from, -1 until needed */
	uint32_t commit_seq;
};

/* table.c */
int kv_table_init(struct kvidx *w);
void kv_table_free(struct kvidx *w);
void kv_sweep_step(struct kvidx *w, size_t budget);
void kv_sweep_start(struct kvidx *w);

/* writer.c: retire an entry (reused after a grace period); run a grace-period check now. */
void kv_retire(struct kvidx *w, uint32_t idx, unsigned cls);
void kv_rcu_reclaim(struct kvidx *w, uint64_t now_ns);

static inline uint64_t *kv_unit(const struct kvidx *w, uint32_t idx)
{
	return w->arena + 2 * (uint64_t)idx;
}

#endif /* KVIDX_INTERNAL_H */
