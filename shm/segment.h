/*
 * segment.h — internal, never installed: naming, creating, mapping and validating kvidx's shm
 * segments, and the OFD locks that carry writer and reader liveness. Used by lib/.
 */
#ifndef KVIDX_SEGMENT_H
#define KVIDX_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"

#define KV_SHM_PATH_MAX 96

/* shm/ owns the two facts of the format it checks, and includes nothing above it: the index
 * name limit and the two errors a segment check returns. lib/kvidx.h publishes them under
 * its own names (KVIDX_NAME_MAX, KVIDX_EVERSION, KVIDX_ECORRUPT); lib/internal.h asserts
 * that the values agree. */
#define KV_NAME_MAX 48 /* index names: 1..47 chars */
enum kv_seg_error {
	KV_EVERSION = 1000, /* segment layout/ABI version differs */
	KV_ECORRUPT = 1001, /* segment header inconsistent, too small, or bad magic */
};

/* 0 if name is a valid index name ([A-Za-z0-9_.-], 1..KV_NAME_MAX-1 chars), else -EINVAL. */
int kv_name_check(const char *name);
/* shm_open names: "/NAME" (the index header), "/NAME.lock" (the writer lock), "/NAME.reg.K"
 * (registry K) and "/NAME.data.G" (data generation G). */
void kv_ctl_shm_name(char out[KV_SHM_PATH_MAX], const char *name);
void kv_lock_shm_name(char out[KV_SHM_PATH_MAX], const char *name);
void kv_reg_shm_name(char out[KV_SHM_PATH_MAX], const char *name, uint64_t reg_gen);
void kv_data_shm_name(char out[KV_SHM_PATH_MAX], const char *name, uint64_t gen);

/* Maps fd (size bytes) shared; prot PROT_READ or PROT_READ|PROT_WRITE. NULL + errno. */
void *kv_map(int fd, size_t size, int prot);

/* Sets mode (0600 / 0660 with group) on a freshly created segment. 0 or -errno. */
int kv_set_perms(int fd, gid_t group, bool readers_write);

/* OFD write lock on one byte: try (no wait). 0, -EAGAIN if held elsewhere, or -errno. */
int kv_lock_try(int fd, off_t byte);
int kv_unlock(int fd, off_t byte);
/* Whether another open file description holds a lock on byte: 1 yes, 0 no, -errno. */
int kv_lock_held(int fd, off_t byte);

#define KV_LOCK_WRITER 0 /* on /NAME.lock */
#define KV_LOCK_READER(i) ((off_t)1 + (off_t)(i)) /* on the registry /NAME.reg.K */

/* Registry layout: header, max_readers slots, then one ring (header + ring_entries messages)
 * per slot. */
uint64_t kv_ctl_ring_off(uint32_t max_readers);
uint64_t kv_ctl_ring_bytes(uint32_t ring_entries);
size_t kv_ctl_size(uint32_t max_readers, uint32_t ring_entries);
static inline struct kv_ring_hdr *kv_ring_at(void *ctl, uint32_t max_readers, uint32_t entries,
					     uint32_t i)
{
	return (struct kv_ring_hdr *)((char *)ctl + kv_ctl_ring_off(max_readers) +
				      (uint64_t)i * kv_ctl_ring_bytes(entries));
}
#define KV_RING_MIN 64
#define KV_RING_MAX (1u << 20)

/*
 * Validates a mapped registry / data header of size bytes against this library's layout.
 * Returns 0, -KV_ECORRUPT (bad magic, sizes or offsets) or -KV_EVERSION (stamp).
 */
int kv_ctl_validate(const struct kvidx_ctl_hdr *h, size_t size);
/* The index header: magic, stamp, size, registry geometry, and epoch and generations below
 * KV_EPOCH_MAX / KV_GEN_MAX. Same returns; an old layout's registry (magic KV_CTL_MAGIC where
 * the index header's is expected) is -KV_EVERSION. */
int kv_idx_validate(const struct kvidx_idx_hdr *h, size_t size);
/* Whether registry header r is exactly the one index header i names (geometry, K). */
bool kv_ctl_matches(const struct kvidx_ctl_hdr *r, const struct kvidx_idx_hdr *i, uint64_t k);
int kv_data_validate(const struct kvidx_data_hdr *h, size_t size);

/* Geometry -> data segment layout (fills the geometry and offset fields of h). -EINVAL if the
 * geometry is out of range. */
int kv_data_plan(struct kvidx_data_hdr *h, uint64_t capacity, uint64_t records,
		 uint32_t ppk, uint32_t max_pods, uint32_t max_readers);

#endif /* KVIDX_SEGMENT_H */
