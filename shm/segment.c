/*
 * segment.c — naming, mapping and validating kvidx's shm segments, and the OFD byte locks that
 * tell whether a writer or a reader is alive (the kernel drops them when the holder dies).
 *
 * Nothing read from a segment is trusted here: validation checks magic, stamp, sizes and that
 * every region lies inside the mapping before any caller follows an offset.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "segment.h"

int kv_name_check(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n >= KV_NAME_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return -EINVAL;
	}
	return name[0] == '.' ? -EINVAL : 0;
}

void kv_ctl_shm_name(char out[KV_SHM_PATH_MAX], const char *name)
{
	snprintf(out, KV_SHM_PATH_MAX, "/%s", name);
}

void kv_lock_shm_name(char out[KV_SHM_PATH_MAX], const char *name)
{
	snprintf(out, KV_SHM_PATH_MAX, "/%s.lock", name);
}

void kv_reg_shm_name(char out[KV_SHM_PATH_MAX], const char *name, uint64_t reg_gen)
{
	snprintf(out, KV_SHM_PATH_MAX, "/%s.reg.%llu", name, (unsigned long long)reg_gen);
}

void kv_data_shm_name(char out[KV_SHM_PATH_MAX], const char *name, uint64_t gen)
{
	snprintf(out, KV_SHM_PATH_MAX, "/%s.data.%llu", name, (unsigned long long)gen);
}

void *kv_map(int fd, size_t size, int prot)
{
	void *p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

int kv_set_perms(int fd, gid_t group, bool readers_write)
{
	mode_t mode = 0600;

	if (group != (gid_t)-1) {
		if (fchown(fd, (uid_t)-1, group) < 0)
			return -errno;
		mode = readers_write ? 0660 : 0640;
	}
	/* fchmod, not the shm_open mode: the umask must not decide who can read routes. */
	return fchmod(fd, mode) < 0 ? -errno : 0;
}

static int ofd_lock(int fd, int cmd, short type, off_t byte, struct flock *fl)
{
	memset(fl, 0, sizeof(*fl));
	fl->l_type = type;
	fl->l_whence = SEEK_SET;
	fl->l_start = byte;
	fl->l_len = 1;
	return fcntl(fd, cmd, fl);
}

int kv_lock_try(int fd, off_t byte)
{
	struct flock fl;

	if (ofd_lock(fd, F_OFD_SETLK, F_WRLCK, byte, &fl) == 0)
		return 0;
	return (errno == EAGAIN || errno == EACCES) ? -EAGAIN : -errno;
}

int kv_unlock(int fd, off_t byte)
{
	struct flock fl;

	return ofd_lock(fd, F_OFD_SETLK, F_UNLCK, byte, &fl) == 0 ? 0 : -errno;
}

int kv_lock_held(int fd, off_t byte)
{
	struct flock fl;

	if (ofd_lock(fd, F_OFD_GETLK, F_WRLCK, byte, &fl) < 0)
		return -errno;
	return fl.l_type != F_UNLCK;
}

uint64_t kv_ctl_ring_off(uint32_t max_readers)
{
	return sizeof(struct kvidx_ctl_hdr) + (uint64_t)max_readers * sizeof(struct kvidx_reader_slot);
}

uint64_t kv_ctl_ring_bytes(uint32_t ring_entries)
{
	return sizeof(struct kv_ring_hdr) + (uint64_t)ring_entries * sizeof(struct kv_msg);
}

size_t kv_ctl_size(uint32_t max_readers, uint32_t ring_entries)
{
	return kv_ctl_ring_off(max_readers) + (size_t)max_readers * kv_ctl_ring_bytes(ring_entries);
}

int kv_ctl_validate(const struct kvidx_ctl_hdr *h, size_t size)
{
	if (size < sizeof(*h) || h->ch_magic != KV_CTL_MAGIC)
		return -KV_ECORRUPT;
	if (h->ch_stamp != KV_STAMP)
		return -KV_EVERSION;
	uint32_t re = h->ch_ring_entries;
	if (h->ch_max_readers == 0 || h->ch_max_readers > KV_MAX_READERS ||
	    re < KV_RING_MIN || re > KV_RING_MAX || (re & (re - 1)) ||
	    h->ch_slots_off != sizeof(*h) || h->ch_ring_off != kv_ctl_ring_off(h->ch_max_readers) ||
	    h->ch_size != kv_ctl_size(h->ch_max_readers, re) || h->ch_size > size)
		return -KV_ECORRUPT;
	return 0;
}

int kv_idx_validate(const struct kvidx_idx_hdr *h, size_t size)
{
	if (size < sizeof(*h))
		return -KV_ECORRUPT;
	if (h->ih_magic == KV_CTL_MAGIC)
		return -KV_EVERSION; /* layout 2 kept the registry here */
	if (h->ih_magic != KV_IDX_MAGIC)
		return -KV_ECORRUPT;
	if (h->ih_stamp != KV_STAMP)
		return -KV_EVERSION;
	uint32_t re = h->ih_ring_entries;
	if (h->ih_size != KV_IDX_SIZE || size < KV_IDX_SIZE || h->ih_max_readers == 0 ||
	    h->ih_max_readers > KV_MAX_READERS || re < KV_RING_MIN || re > KV_RING_MAX ||
	    (re & (re - 1)) || h->ih_reg_size != kv_ctl_size(h->ih_max_readers, re) ||
	    h->ih_epoch == 0 || h->ih_epoch > KV_EPOCH_MAX || h->ih_generation > KV_GEN_MAX ||
	    h->ih_reg_gen == 0 || h->ih_reg_gen > KV_GEN_MAX)
		return -KV_ECORRUPT;
	return 0;
}

bool kv_ctl_matches(const struct kvidx_ctl_hdr *r, const struct kvidx_idx_hdr *i, uint64_t k)
{
	return r->ch_magic == KV_CTL_MAGIC && r->ch_stamp == KV_STAMP &&
	       r->ch_size == i->ih_reg_size && r->ch_max_readers == i->ih_max_readers &&
	       r->ch_slots_off == sizeof(*r) && r->ch_ring_off == kv_ctl_ring_off(r->ch_max_readers) &&
	       r->ch_ring_entries == i->ih_ring_entries && r->ch_reg_gen == k;
}

static uint64_t align4k(uint64_t x)
{
	return (x + 4095) & ~4095ull;
}

int kv_data_plan(struct kvidx_data_hdr *h, uint64_t capacity, uint64_t records, uint32_t ppk,
		 uint32_t max_pods, uint32_t max_readers)
{
	if (capacity < 1 || capacity > (1ull << 31) || records < 1 || ppk < 1 ||
	    ppk > KV_MAX_PPK || max_pods < 1 || max_pods > KV_MAX_PODS || max_readers < 1 ||
	    max_readers > KV_MAX_READERS)
		return -EINVAL;
	/*
	 * Load factor 0.75 on the slots. The arena holds one header unit per key plus the
	 * records, with a quarter more for entries waiting in RCU limbo and for size-class
	 * rounding, and room for one largest entry so that tiny tables still work.
	 */
	uint64_t units = capacity + records;
	units += units / 4 + 2 * (KV_MAX_PPK + 1) + 1;
	if (units > KV_UNIT_MAX)
		return -EINVAL;
	h->dh_capacity = capacity;
	h->dh_records = records;
	h->dh_nslots = capacity + capacity / 3 + 1;
	h->dh_arena_units = units;
	h->dh_pods_per_key = ppk;
	h->dh_max_pods = max_pods;
	h->dh_max_readers = max_readers;
	h->dh_max_probe = KV_MAX_PROBE;
	h->dh_stats_off = align4k(sizeof(*h));
	h->dh_pods_off = align4k(h->dh_stats_off + KV_STATS_WORDS * sizeof(uint64_t));
	h->dh_hist_off = align4k(h->dh_pods_off + (uint64_t)max_pods * sizeof(struct kvidx_pod));
	h->dh_routers_off = align4k(h->dh_hist_off +
				    (uint64_t)max_pods * KV_HIST_PER_POD * KV_HIST_BUCKETS * 8);
	h->dh_load_off = align4k(h->dh_routers_off +
				 (uint64_t)max_readers * sizeof(struct kvidx_router));
	h->dh_slots_off = align4k(h->dh_load_off + (uint64_t)max_pods * KV_LOAD_BYTES);
	h->dh_arena_off = align4k(h->dh_slots_off + (h->dh_nslots + KV_MAX_PROBE) * 8);
	h->dh_size = align4k(h->dh_arena_off + units * 16);
	return 0;
}

int kv_data_validate(const struct kvidx_data_hdr *h, size_t size)
{
	struct kvidx_data_hdr plan;

	if (size < sizeof(*h) || h->dh_magic != KV_DATA_MAGIC)
		return -KV_ECORRUPT;
	if (h->dh_stamp != KV_STAMP)
		return -KV_EVERSION;
	/* Recompute the layout from the geometry: every offset must be exactly what we'd plan. */
	memset(&plan, 0, sizeof(plan));
	if (kv_data_plan(&plan, h->dh_capacity, h->dh_records, h->dh_pods_per_key,
			 h->dh_max_pods, h->dh_max_readers) < 0)
		return -KV_ECORRUPT;
	if (plan.dh_nslots != h->dh_nslots || plan.dh_arena_units != h->dh_arena_units ||
	    plan.dh_max_probe != h->dh_max_probe || plan.dh_stats_off != h->dh_stats_off ||
	    plan.dh_pods_off != h->dh_pods_off || plan.dh_slots_off != h->dh_slots_off ||
	    plan.dh_hist_off != h->dh_hist_off || plan.dh_routers_off != h->dh_routers_off ||
	    plan.dh_load_off != h->dh_load_off ||
	    plan.dh_arena_off != h->dh_arena_off || plan.dh_size != h->dh_size ||
	    h->dh_size > size)
		return -KV_ECORRUPT;
	if (memchr(h->dh_seed, 0, sizeof(h->dh_seed)) == NULL)
		return -KV_ECORRUPT;
	return 0;
}
