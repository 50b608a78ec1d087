/*
 * writer.c — the writer's segments and lifecycle: claiming the index (one writer), building
 * and publishing a data generation, pods, and the periodic tick. The top layer of the writer
 * (internal.h): it calls the table (table.c), RCU (rcu.c) and the arena (arena.c), and none of
 * them calls it.
 *
 * Concurrency model (the read side is in reader.c):
 *
 *  1. One writer: it holds an OFD write lock on byte 0 of /NAME.lock (0600: no reader can
 *     open it, so none can hold it) for its lifetime. The kernel drops the lock when the
 *     process dies, so a successor can take over.
 *  2. A generation is built completely, then marked live (release store of dh_state in
 *     data_create()), then named current (release store of ih_generation in
 *     kvidx_writer_publish()). Readers map a generation only after an acquire load of
 *     ih_generation (rd_switch()) and check dh_state with an acquire load (rd_map_gen(),
 *     reader.c).
 *  3. Pod words and pod names change with release stores readers pair with (see each store);
 *     everything else in the data segment is written by this process only.
 *  4. The index header (/NAME) is written by this process only; the registry (/NAME.reg.K)
 *     by readers too: the writer maps it under the SIGBUS guard (guard.h), never reads back
 *     what it wrote there, and replaces it when it is truncated (reg_check(); readers follow
 *     the release store of ih_reg_gen in reg_publish()).
 *
 * Progress: nothing here waits for a reader; every loop is bounded by max_readers or max_pods.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "inspect.h"
#include "internal.h"

static void set_defaults(struct kvidx_writer_opts *o, const struct kvidx_writer_opts *in)
{
	*o = *in;
	if (!o->name)
		o->name = KVIDX_DEFAULT_NAME;
	if (!o->geo.capacity)
		o->geo.capacity = KVIDX_DEFAULT_CAPACITY;
	if (!o->geo.records)
		o->geo.records = KVIDX_DEFAULT_RECORDS_PER_KEY * o->geo.capacity;
	if (!o->geo.pods_per_key)
		o->geo.pods_per_key = KVIDX_DEFAULT_PODS_PER_KEY;
	if (!o->geo.max_pods)
		o->geo.max_pods = KVIDX_DEFAULT_MAX_PODS;
	if (!o->geo.max_readers)
		o->geo.max_readers = KVIDX_DEFAULT_MAX_READERS;
	if (!o->geo.ring_entries)
		o->geo.ring_entries = KVIDX_DEFAULT_RING_ENTRIES;
	if (!o->algo)
		o->algo = KVIDX_KEY_CBOR_FNV;
	if (!o->seed)
		o->seed = "";
	if (!o->block_size)
		o->block_size = KVIDX_DEFAULT_BLOCK_SIZE;
	if (!o->stall_ms)
		o->stall_ms = KVIDX_DEFAULT_STALL_MS;
}

_Static_assert(KVIDX_MAX_PODS_PER_KEY == KV_MAX_PPK && KVIDX_MAX_PODS == KV_MAX_PODS &&
		       KVIDX_MAX_READERS == KV_MAX_READERS &&
		       KVIDX_MIN_RING_ENTRIES == KV_RING_MIN && KVIDX_MAX_RING_ENTRIES == KV_RING_MAX,
	       "public limits are the format's");

static int limit(struct kvidx_limit *why, const char *field, uint64_t value, uint64_t min,
		 uint64_t max, const char *depends, uint64_t dep_value, const char *extra)
{
	if (why) {
		why->field = field;
		why->value = value;
		why->min = min;
		why->max = max;
		why->depends = depends;
		why->dep_value = dep_value;
		if (depends)
			snprintf(why->reason, sizeof(why->reason),
				 "%s %llu is out of range for %s %llu (%llu..%llu)%s", field,
				 (unsigned long long)value, depends, (unsigned long long)dep_value,
				 (unsigned long long)min, (unsigned long long)max, extra);
		else
			snprintf(why->reason, sizeof(why->reason),
				 "%s %llu is out of range (%llu..%llu)%s", field,
				 (unsigned long long)value, (unsigned long long)min,
				 (unsigned long long)max, extra);
	}
	return -EINVAL;
}

/* Checks o (defaults applied) against every limit; fills why for the first one broken. */
static int check_opts(const struct kvidx_writer_opts *o, struct kvidx_limit *why)
{
	const struct kvidx_geometry *g = &o->geo;
	uint32_t re = g->ring_entries;
	struct kvidx_data_hdr plan;

	if (kv_name_check(o->name) < 0) {
		if (why) {
			memset(why, 0, sizeof(*why));
			why->field = "name";
			snprintf(why->reason, sizeof(why->reason),
				 "name must be 1..%d characters of [A-Za-z0-9_.-], not starting "
				 "with '.'", KVIDX_NAME_MAX - 1);
		}
		return -EINVAL;
	}
	if (strlen(o->seed) >= sizeof(plan.dh_seed))
		return limit(why, "seed", strlen(o->seed), 0, sizeof(plan.dh_seed) - 1, NULL, 0,
			     " bytes");
	if (o->algo != KVIDX_KEY_CBOR_FNV && o->algo != KVIDX_KEY_XXH64)
		return limit(why, "algo", (uint64_t)o->algo, KVIDX_KEY_CBOR_FNV, KVIDX_KEY_XXH64,
			     NULL, 0, "");
	if (g->capacity > KVIDX_MAX_CAPACITY)
		return limit(why, "capacity", g->capacity, 1, KVIDX_MAX_CAPACITY, NULL, 0, "");
	if (g->pods_per_key > KVIDX_MAX_PODS_PER_KEY)
		return limit(why, "pods_per_key", g->pods_per_key, 1, KVIDX_MAX_PODS_PER_KEY, NULL,
			     0, "");
	if (g->max_pods > KVIDX_MAX_PODS)
		return limit(why, "max_pods", g->max_pods, 1, KVIDX_MAX_PODS, NULL, 0, "");
	if (g->max_readers > KVIDX_MAX_READERS)
		return limit(why, "max_readers", g->max_readers, 1, KVIDX_MAX_READERS, NULL, 0, "");
	if (re < KV_RING_MIN || re > KV_RING_MAX || (re & (re - 1)))
		return limit(why, "ring_entries", re, KV_RING_MIN, KV_RING_MAX, NULL, 0,
			     ", a power of two");
	if (o->block_size > KVIDX_MAX_BLOCK_SIZE)
		return limit(why, "block_size", o->block_size, 1, KVIDX_MAX_BLOCK_SIZE, NULL, 0, "");
	if (o->stall_ms > KVIDX_MAX_STALL_MS)
		return limit(why, "stall_ms", o->stall_ms, 1, KVIDX_MAX_STALL_MS, NULL, 0, "");
	/* The arena's unit indices are 32 bits: records and capacity share that budget
	 * (kv_data_plan(): units = (capacity + records) x 1.25 + a largest entry). */
	uint64_t fixed = 2 * (KV_MAX_PPK + 1) + 1, budget = (KV_UNIT_MAX - fixed) / 5 * 4;
	uint64_t rmax = budget > g->capacity ? budget - g->capacity : 1;
	if (g->records > rmax)
		return limit(why, "records", g->records, 1, rmax, "capacity", g->capacity, "");
	memset(&plan, 0, sizeof(plan));
	if (kv_data_plan(&plan, g->capacity, g->records, g->pods_per_key, g->max_pods,
			 g->max_readers) < 0)
		return limit(why, "records", g->records, 1, rmax, "capacity", g->capacity,
			     " (arena too large)");
	return 0;
}

int kvidx_writer_check(const struct kvidx_writer_opts *opts, struct kvidx_limit *why)
{
	struct kvidx_writer_opts o;

	if (!opts)
		return -EINVAL;
	set_defaults(&o, opts);
	return check_opts(&o, why);
}

/* Whether fd is a regular file of this process's user that no one else may write. */
static int check_owner(int fd)
{
	struct stat sb;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 0022))
		return -EPERM; /* squatted: someone else's object under this index's name */
	return 0;
}

/* Takes the writer lock on /NAME.lock (created 0600, so no reader can hold it). */
static int lock_open(struct kvidx *w)
{
	char path[KV_SHM_PATH_MAX];
	int rc;

	kv_lock_shm_name(path, w->name);
	w->lock_fd = shm_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (w->lock_fd < 0)
		return -errno;
	if ((rc = check_owner(w->lock_fd)) < 0 || (rc = kv_set_perms(w->lock_fd, -1, false)) < 0)
		return rc;
	rc = kv_lock_try(w->lock_fd, KV_LOCK_WRITER);
	return rc == -EAGAIN ? -KVIDX_EWRITER : rc;
}

/*
 * Opens or creates the index header. Everything the writer continues from (epoch, data
 * generation, registry) is read once, from one validated snapshot; a header that does not
 * validate (other than another layout, which is refused) is damage and is rebuilt in place,
 * so that a restart is never blocked by it.
 */
static int idx_open(struct kvidx *w, const struct kvidx_writer_opts *o, struct kvidx_idx_hdr *prev)
{
	char path[KV_SHM_PATH_MAX];
	struct stat sb;
	int rc;

	memset(prev, 0, sizeof(*prev));
	kv_ctl_shm_name(path, w->name);
	w->idx_fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
	if (w->idx_fd < 0 && errno == ENOENT) {
		w->idx_fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (w->idx_fd < 0)
			return -errno;
		w->created_idx = true;
		w->info.flags |= KVIDX_OPEN_CREATED;
	} else if (w->idx_fd < 0) {
		return -errno;
	} else {
		if ((rc = check_owner(w->idx_fd)) < 0 || fstat(w->idx_fd, &sb) < 0)
			return rc < 0 ? rc : -errno;
		if (pread(w->idx_fd, prev, sizeof(*prev), 0) != (ssize_t)sizeof(*prev))
			memset(prev, 0, sizeof(*prev));
		rc = kv_idx_validate(prev, (size_t)sb.st_size);
		if (rc == -KVIDX_EVERSION)
			return rc;
		if (rc < 0) {
			memset(prev, 0, sizeof(*prev));
			w->info.flags |= KVIDX_OPEN_REBUILT;
		} else {
			w->info.flags |= KVIDX_OPEN_TAKEOVER;
		}
	}
	if (ftruncate(w->idx_fd, KV_IDX_SIZE) < 0)
		return -errno;
	rc = kv_set_perms(w->idx_fd, o->group ? o->group : (gid_t)-1, false);
	if (rc < 0)
		return rc;
	w->ih = kv_map(w->idx_fd, KV_IDX_SIZE, PROT_READ | PROT_WRITE);
	if (!w->ih)
		return -errno;
	/* A successor continues the predecessor's epoch, so that announcements readers made
	 * under it keep their meaning; the rule in kv_rcu_reclaim() keeps an announcement from
	 * the future from being taken as passed anyway. */
	w->epoch0 = prev->ih_epoch ? prev->ih_epoch : 1;
	w->prev_gen = prev->ih_generation;
	return 0;
}

/* The registry's line-0 header as this writer writes it (w->ctl_copy). */
static void ctl_plan(struct kvidx *w, uint64_t k)
{
	struct kvidx_ctl_hdr *h = &w->ctl_copy;

	memset(h, 0, sizeof(*h));
	h->ch_magic = KV_CTL_MAGIC;
	h->ch_stamp = KV_STAMP;
	h->ch_size = kv_ctl_size(w->max_readers, w->ring_entries);
	h->ch_max_readers = w->max_readers;
	h->ch_slots_off = sizeof(struct kvidx_ctl_hdr);
	h->ch_created_ns = kvidx_now_ns();
	h->ch_ring_off = kv_ctl_ring_off(w->max_readers);
	h->ch_ring_entries = w->ring_entries;
	h->ch_reg_gen = k;
}

/* Maps registry fd (w->ctl_size bytes) into w under the SIGBUS guard. */
static int reg_map(struct kvidx *w, int fd, uint64_t k)
{
	void *p = kv_map(fd, w->ctl_size, PROT_READ | PROT_WRITE);
	int rc;

	if (!p)
		return -errno;
	w->reg_hit = 0;
	if ((rc = kv_guard_add(p, w->ctl_size, &w->reg_hit)) < 0) {
		munmap(p, w->ctl_size);
		return rc;
	}
	w->ctl_fd = fd;
	w->ctl = p;
	w->reg_gen = k;
	w->rslots = (struct kvidx_reader_slot *)((char *)p + sizeof(struct kvidx_ctl_hdr));
	return 0;
}

/* Unmaps and closes the registry w uses (its name stays unless unlink). */
static void reg_unmap(struct kvidx *w, bool unlink)
{
	char path[KV_SHM_PATH_MAX];

	if (w->ctl) {
		kv_guard_del(w->ctl);
		munmap(w->ctl, w->ctl_size);
		w->ctl = NULL;
		w->rslots = NULL;
	}
	if (w->ctl_fd >= 0)
		close(w->ctl_fd); /* drops no lock of ours: the writer lock is on /NAME.lock */
	w->ctl_fd = -1;
	if (unlink && w->reg_gen) {
		kv_reg_shm_name(path, w->name, w->reg_gen);
		shm_unlink(path);
	}
}

/* Creates registry k or, if that name is taken by someone else's object, the next free one
 * (at most 64 tries); maps it. Returns 0 or -errno. */
static int reg_create(struct kvidx *w, const struct kvidx_writer_opts *o, uint64_t k)
{
	char path[KV_SHM_PATH_MAX];
	int fd = -1, rc;

	w->ctl_size = kv_ctl_size(w->max_readers, w->ring_entries);
	for (int tries = 0; tries < 64; tries++, k++) {
		kv_reg_shm_name(path, w->name, k);
		shm_unlink(path); /* ours, left by a predecessor; someone else's stays (EPERM) */
		fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)w->ctl_size) < 0 ||
	    (rc = kv_set_perms(fd, o->group ? o->group : (gid_t)-1, true)) < 0) {
		rc = -errno;
		goto fail;
	}
	if ((rc = reg_map(w, fd, k)) < 0)
		goto fail;
	ctl_plan(w, k);
	memcpy(w->ctl, &w->ctl_copy, sizeof(w->ctl_copy));
	free(w->ring_tail);
	w->ring_tail = calloc(w->max_readers, sizeof(uint64_t));
	if (!w->ring_tail)
		return -ENOMEM;
	return 0;
fail:
	close(fd);
	shm_unlink(path);
	return rc;
}

/*
 * Takes over registry k of a predecessor if it is intact and of the asked geometry: our own
 * object, of the size the index header says, with exactly the header it names. 0 if taken,
 * 1 if it must be recreated, or -errno.
 */
static int reg_take(struct kvidx *w, const struct kvidx_idx_hdr *prev)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_ctl_hdr h;
	struct stat sb;
	int fd, rc;

	if (!prev->ih_reg_gen || prev->ih_max_readers != w->max_readers ||
	    prev->ih_ring_entries != w->ring_entries)
		return 1;
	kv_reg_shm_name(path, w->name, prev->ih_reg_gen);
	fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return 1;
	w->ctl_size = kv_ctl_size(w->max_readers, w->ring_entries);
	if (check_owner(fd) < 0 || fstat(fd, &sb) < 0 || (uint64_t)sb.st_size != w->ctl_size ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    !kv_ctl_matches(&h, prev, prev->ih_reg_gen)) {
		close(fd);
		return 1;
	}
	if ((rc = reg_map(w, fd, prev->ih_reg_gen)) < 0) {
		close(fd);
		return rc;
	}
	w->ctl_copy = h;
	w->ring_tail = calloc(w->max_readers, sizeof(uint64_t));
	if (!w->ring_tail)
		return -ENOMEM;
	/* The consumer continues where the predecessor stopped. Untrusted like every ring word:
	 * drain_one() (route.c) bounds the head against this tail. Nothing to pair with (the
	 * previous consumer is gone), so relaxed. */
	for (uint32_t i = 0; i < w->max_readers; i++)
		w->ring_tail[i] = ld_relaxed(&kv_ring_at(w->ctl, w->max_readers, w->ring_entries, i)->rh_tail);
	return 0;
}

/* Names the registry w uses in the index header: geometry first, then (release) K. Pairs
 * with the acquire load of ih_reg_gen in rd_reg_attach() (reader.c). */
static void reg_publish(struct kvidx *w)
{
	st_relaxed(&w->ih->ih_max_readers, w->max_readers);
	st_relaxed(&w->ih->ih_ring_entries, w->ring_entries);
	st_relaxed(&w->ih->ih_reg_size, (uint64_t)w->ctl_size);
	st_release(&w->ih->ih_reg_gen, w->reg_gen);
}

/* The index header, the writer lock and the registry: taken over, or created. */
static int ctl_open(struct kvidx *w, const struct kvidx_writer_opts *o, uint32_t opts_readers,
		    uint32_t opts_ring)
{
	struct kvidx_idx_hdr prev;
	int rc;

	if ((rc = lock_open(w)) < 0 || (rc = idx_open(w, o, &prev)) < 0)
		return rc;
	/* 0 (the default) for the reader geometry keeps an existing index's. */
	w->max_readers = opts_readers ? opts_readers : o->geo.max_readers;
	w->ring_entries = opts_ring ? opts_ring : o->geo.ring_entries;
	if (prev.ih_reg_gen && !opts_readers)
		w->max_readers = prev.ih_max_readers;
	if (prev.ih_reg_gen && !opts_ring)
		w->ring_entries = prev.ih_ring_entries;
	rc = reg_take(w, &prev);
	if (rc > 0) {
		uint64_t k = prev.ih_reg_gen + 1;
		if (prev.ih_reg_gen)
			w->info.flags |= KVIDX_OPEN_REGISTRY;
		if (prev.ih_reg_gen && (prev.ih_max_readers != w->max_readers ||
					prev.ih_ring_entries != w->ring_entries))
			w->info.flags |= KVIDX_OPEN_GEOMETRY;
		w->old_reg_gen = prev.ih_reg_gen; /* unlinked once the new one is named */
		rc = reg_create(w, o, k);
	}
	if (rc < 0)
		return rc;
	if (w->created_idx || (w->info.flags & KVIDX_OPEN_REBUILT)) {
		/* A fresh header: everything but the magic, which goes last (readers treat a
		 * header without it as not there yet). No acquire load pairs with the release
		 * store: readers pread() the header in kvidx_reader_open() and validate the copy;
		 * it orders the magic after the rest for anyone who loads it from a mapping. */
		struct kvidx_idx_hdr *h = w->ih;
		st_relaxed(&h->ih_magic, 0);
		memset((char *)h + 8, 0, KV_IDX_SIZE - 8);
		h->ih_stamp = KV_STAMP;
		h->ih_size = KV_IDX_SIZE;
		h->ih_created_ns = kvidx_now_ns();
		h->ih_epoch = w->epoch0;
		h->ih_generation = 0;
		reg_publish(w);
		st_release(&h->ih_magic, KV_IDX_MAGIC);
	} else {
		reg_publish(w);
	}
	if (w->old_reg_gen && w->old_reg_gen != w->reg_gen) {
		char path[KV_SHM_PATH_MAX];
		kv_reg_shm_name(path, w->name, w->old_reg_gen);
		shm_unlink(path); /* readers still mapping it keep it until they move */
	}
	return 0;
}

/* A fresh shared mapping of the damaged registry, under its own guard. */
struct reg_view {
	struct kvidx_ctl_hdr *p;
	size_t len;
	uint32_t hit;
};

static void reg_view_drop(struct reg_view *v)
{
	if (!v->p)
		return;
	kv_guard_del(v->p);
	munmap(v->p, v->len);
	v->p = NULL;
}

/*
 * Expels every reader recorded in the damaged registry, through a fresh MAP_SHARED mapping of
 * its file (after a fault, the writer's own mapping is private zero pages: what it stores
 * there no reader sees). The file is first given its size back (the writer owns it; it is
 * unlinked once replaced), so that the slots and the doorbell word a truncation took are
 * there again, as zeros: a reader of the old registry reads a state that is not its own, or
 * EXPELLED, and discards its answer (reader.c, rule 5); the stores stay under a guard in
 * case the file is truncated again meanwhile. Leaves the view in *v (NULL if none could be
 * made: then the writer's own mapping is used, as a last resort).
 */
static void reg_expel_all(struct kvidx *w, struct reg_view *v)
{
	struct kvidx_reader_slot *slots = w->rslots;
	struct stat sb;

	v->p = NULL;
	v->len = w->ctl_size;
	v->hit = 0;
	if (fstat(w->ctl_fd, &sb) == 0 && (uint64_t)sb.st_size < w->ctl_size)
		(void)!ftruncate(w->ctl_fd, (off_t)w->ctl_size);
	v->p = kv_map(w->ctl_fd, v->len, PROT_READ | PROT_WRITE);
	if (v->p && kv_guard_add(v->p, v->len, &v->hit) < 0) {
		munmap(v->p, v->len);
		v->p = NULL;
	}
	if (v->p)
		slots = (struct kvidx_reader_slot *)((char *)v->p + sizeof(struct kvidx_ctl_hdr));
	for (uint32_t i = 0; i < w->max_readers; i++) {
		/* seq_cst CAS against the reader's (reader.c, rule 6). */
		uint64_t st = ld_seqcst(&slots[i].rs_state);
		if (KV_RS_STATE(st) == KV_RS_ACTIVE)
			cas_u64(&slots[i].rs_state, st, (KV_RS_GEN(st) << 8) | KV_RS_EXPELLED);
	}
	/* The expulsions above are ordered before anything stored after this, reused entries
	 * included (those wait for the hold and a grace period, whose own fence in
	 * kv_rcu_reclaim() comes later still). Pairs with the acquire fence in rd_exit()
	 * (reader.c). */
	fence_release();
}

/*
 * Registry health, from the writer's tick: a fault seen in it (the guard's flag) or a file
 * shorter than the writer's mapping means a reader truncated it: the writer expels every
 * reader still recorded in it (reg_expel_all()), creates registry K+1, names it, and holds back reuse of what
 * was retired so far for one stall limit (readers that were inside a read-side section in
 * the old registry are invisible now; none is allowed a section longer than that). A
 * scribbled header line (which only attaching readers read) is rewritten. Returns true if
 * the registry was replaced.
 */
static bool reg_check(struct kvidx *w, uint64_t now)
{
	struct stat sb;
	bool damaged = ld_relaxed(&w->reg_hit) != 0;

	if (!damaged && fstat(w->ctl_fd, &sb) == 0 && (uint64_t)sb.st_size < w->ctl_size)
		damaged = true;
	if (!damaged) {
		if (memcmp(w->ctl, &w->ctl_copy, KVIDX_CACHELINE) != 0) {
			memcpy(w->ctl, &w->ctl_copy, KVIDX_CACHELINE);
			stat_add(&w->st->registry_repairs, 1);
		}
		/* The truncation may have raced the check: a fault now still sets the flag. */
		return false;
	}
	struct reg_view fresh;
	reg_expel_all(w, &fresh);
	struct kvidx old = *w; /* the registry fields of the damaged one */
	struct kvidx_writer_opts o = { .group = w->group };
	/* The helper waits on the file's futex key: wake it through the shared view, not the
	 * private zero pages the guard may have mapped over w->ctl (it would sit out its
	 * KV_BELL_WAIT_NS timeout, stalling this tick). */
	kv_bell_stop_thread(w, fresh.p ? &fresh.p->ch_bell : NULL);
	reg_view_drop(&fresh);
	w->ring_tail = NULL;
	if (reg_create(w, &o, old.reg_gen + 1) < 0) {
		/* No new registry (out of memory or descriptors): keep the damaged one (zeros
		 * after a fault: nothing to read) and try again at the next tick. Until then
		 * nothing retired is reused. */
		free(w->ring_tail);
		w->ctl = old.ctl;
		w->ctl_fd = old.ctl_fd;
		w->reg_gen = old.reg_gen;
		w->rslots = old.rslots;
		w->ring_tail = old.ring_tail;
		w->ctl_size = old.ctl_size;
		kv_rcu_hold(&w->rcu, now, true); /* the damaged registry is still in use */
		kv_bell_start_thread(w, true);
		return false;
	}
	free(old.ring_tail);
	old.bell = NULL;
	reg_unmap(&old, true);
	reg_publish(w);
	kv_rcu_rebind(&w->rcu, w->rslots, w->ctl_fd, now);
	kv_bell_start_thread(w, true);
	stat_add(&w->st->registry_rebuilds, 1);
	return true;
}

/* What the previous generation's header says of its geometry, for kvidx_writer_open_info().
 * Read with pread() from a validated copy: the segment is the predecessor's, trusted no more
 * than any. */
static void read_prev(struct kvidx *w, const struct kvidx_writer_opts *o)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_data_hdr h;
	struct stat sb;
	int fd;

	w->info.prev_generation = w->prev_gen;
	if (!w->prev_gen)
		return;
	kv_data_shm_name(path, w->name, w->prev_gen);
	fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (fstat(fd, &sb) == 0 && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    kv_data_validate(&h, (size_t)sb.st_size) == 0) {
		struct kvidx_geometry *p = &w->info.prev;
		p->capacity = h.dh_capacity;
		p->records = h.dh_records;
		p->pods_per_key = h.dh_pods_per_key;
		p->max_pods = h.dh_max_pods;
		p->max_readers = h.dh_max_readers;
		p->ring_entries = w->ring_entries;
		if (p->capacity != o->geo.capacity || p->records != o->geo.records ||
		    p->pods_per_key != o->geo.pods_per_key || p->max_pods != o->geo.max_pods ||
		    p->max_readers != w->max_readers)
			w->info.flags |= KVIDX_OPEN_GEOMETRY;
	}
	close(fd);
}

/* Builds a fresh data generation and publishes it. */
static int data_create(struct kvidx *w, const struct kvidx_writer_opts *o)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_data_hdr plan;
	uint64_t gen = w->prev_gen + 1;
	int rc;

	memset(&plan, 0, sizeof(plan));
	rc = kv_data_plan(&plan, o->geo.capacity, o->geo.records, o->geo.pods_per_key,
			  o->geo.max_pods, w->max_readers);
	if (rc < 0)
		return rc;
	if (gen > KV_GEN_MAX)
		gen = 1;
	/* A name someone else took (another user's object: it cannot be unlinked by us) is
	 * skipped; readers learn the generation from the index header, not by guessing. */
	for (int tries = 0; tries < 64; tries++, gen++) {
		kv_data_shm_name(path, o->name, gen);
		shm_unlink(path); /* a leftover of a writer that died while building it */
		w->data_fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (w->data_fd >= 0 || errno != EEXIST)
			break;
	}
	if (w->data_fd < 0)
		return -errno;
	w->gen = gen;
	if (ftruncate(w->data_fd, (off_t)plan.dh_size) < 0)
		return -errno;
	rc = kv_set_perms(w->data_fd, o->group ? o->group : (gid_t)-1, false);
	if (rc < 0)
		return rc;
	w->data = kv_map(w->data_fd, plan.dh_size, PROT_READ | PROT_WRITE);
	if (!w->data)
		return -errno;
	w->data_size = plan.dh_size;
	w->gen = gen;
	w->hdr = w->data;
	*w->hdr = plan;
	w->hdr->dh_stamp = KV_STAMP;
	w->hdr->dh_generation = gen;
	w->hdr->dh_created_ns = kvidx_now_ns();
	w->hdr->dh_algo = o->algo;
	w->hdr->dh_block_size = o->block_size;
	strncpy(w->hdr->dh_seed, o->seed, sizeof(w->hdr->dh_seed) - 1);
	w->hdr->dh_writer_pid = getpid();
	w->hdr->dh_heartbeat_ns = kvidx_now_ns();
	w->hdr->dh_magic = KV_DATA_MAGIC;

	w->st = (struct kvidx_stats *)((char *)w->data + plan.dh_stats_off);
	w->pods = (struct kvidx_pod *)((char *)w->data + plan.dh_pods_off);
	w->slots = (uint64_t *)((char *)w->data + plan.dh_slots_off);
	w->hist = (uint64_t *)((char *)w->data + plan.dh_hist_off);
	w->routers = (struct kvidx_router *)((char *)w->data + plan.dh_routers_off);
	w->load = (struct kvidx_load_row *)((char *)w->data + plan.dh_load_off);
	w->nslots = plan.dh_nslots;
	w->capacity = plan.dh_capacity;
	w->ppk = plan.dh_pods_per_key;
	w->max_pods = plan.dh_max_pods;
	w->max_probe = plan.dh_max_probe;
	kv_arena_init(&w->arena, (uint64_t *)((char *)w->data + plan.dh_arena_off),
		      plan.dh_arena_units, plan.dh_pods_per_key, w->st);

	/* Pairs with the acquire load of dh_state in rd_map_gen() (reader.c): a reader that
	 * maps this generation sees it initialised. */
	st_release(&w->hdr->dh_state, (uint64_t)KV_DATA_LIVE);
	st_relaxed(&w->ih->ih_writer_pid, (int32_t)getpid());
	return 0;
}

int kvidx_writer_publish(struct kvidx *w)
{
	char path[KV_SHM_PATH_MAX];

	if (w->published)
		return -EALREADY;
	/* Release: the whole generation is built before readers are told about it. Pairs with the
	 * acquire load of ih_generation in rd_switch() (reader.c). */
	st_release(&w->ih->ih_generation, w->gen);
	w->published = true;
	if (w->prev_gen) {
		/* Readers still mapping the old generation keep it until they switch. */
		kv_data_shm_name(path, w->name, w->prev_gen);
		shm_unlink(path);
	}
	return 0;
}

struct kvidx *kvidx_writer_open(const struct kvidx_writer_opts *opts)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_writer_opts o;
	struct kvidx *w;
	int rc;

	if (!opts) {
		errno = EINVAL;
		return NULL;
	}
	set_defaults(&o, opts);
	/* Everything is checked before anything is created (kvidx_writer_check()). */
	if (check_opts(&o, NULL) < 0) {
		errno = EINVAL;
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	w->ctl_fd = w->data_fd = w->idx_fd = w->lock_fd = -1;
	w->drain_slot = -1;
	w->group = o.group ? o.group : (gid_t)-1;
	strcpy(w->name, o.name);
	w->stall_ns = (uint64_t)o.stall_ms * 1000000ull;
	rc = ctl_open(w, &o, opts->geo.max_readers, opts->geo.ring_entries);
	if (rc == 0) {
		read_prev(w, &o);
		rc = data_create(w, &o);
		w->info.generation = w->gen;
	}
	if (rc == 0)
		rc = kv_rcu_init(&w->rcu, &w->ih->ih_epoch, w->rslots, w->ctl_fd, w->max_readers,
				 w->epoch0, w->stall_ns, &w->arena, w->st);
	if (rc == 0 && !o.defer_publish)
		rc = kvidx_writer_publish(w);
	if (rc < 0) {
		/* Nothing left behind: what this call created goes (a registry that existed
		 * before stays, with its readers). */
		if (w->data_fd >= 0) {
			kv_data_shm_name(path, w->name, w->gen);
			shm_unlink(path);
		}
		if (w->created_idx) {
			/* Nothing existed: all of it goes. (A takeover keeps the index header and
			 * the registry it names: readers use them.) */
			if (w->ctl)
				reg_unmap(w, true);
			kv_ctl_shm_name(path, w->name);
			shm_unlink(path);
			kv_lock_shm_name(path, w->name);
			shm_unlink(path);
		}
		kvidx_writer_close(w, false);
		errno = -rc;
		return NULL;
	}
	memcpy(w->ih_line0, w->ih, sizeof(w->ih_line0)); /* hdr_check() */
	memcpy(w->dh_fixed, w->hdr, sizeof(w->dh_fixed));
	w->hdr_copied = true;
	return w;
}

int kvidx_writer_open_info(const struct kvidx *w, struct kvidx_open_info *out)
{
	*out = w->info;
	return 0;
}

void kvidx_writer_close(struct kvidx *w, bool unlink)
{
	char path[KV_SHM_PATH_MAX];

	if (!w)
		return;
	if (unlink && w->hdr) {
		kv_data_shm_name(path, w->name, w->gen);
		shm_unlink(path);
		kv_ctl_shm_name(path, w->name);
		shm_unlink(path);
		kv_lock_shm_name(path, w->name);
		shm_unlink(path);
	}
	kv_bell_stop(w); /* before the registry it waits on is unmapped */
	if (w->data)
		munmap(w->data, w->data_size);
	reg_unmap(w, unlink && w->hdr);
	if (w->ih) {
		st_relaxed(&w->ih->ih_writer_idle, 0); /* no one to wake */
		munmap(w->ih, KV_IDX_SIZE);
	}
	if (w->idx_fd >= 0)
		close(w->idx_fd);
	if (w->data_fd >= 0)
		close(w->data_fd);
	if (w->lock_fd >= 0)
		close(w->lock_fd); /* drops the writer lock */
	kv_rcu_fini(&w->rcu);
	kv_arena_fini(&w->arena);
	free(w->ring_tail);
	free(w);
}

/* ---- pods ---- */

static void pod_write_names(struct kvidx_pod *p, const char *name, const char *model)
{
	/* A seqlock: pd_seq odd while the names change. The release fence orders the odd pd_seq
	 * before the name stores; it pairs with the acquire fence before the re-check of pd_seq
	 * in kvidx_reader_pod() (reader.c). */
	st_relaxed(&p->pd_seq, ld_relaxed(&p->pd_seq) + 1);
	fence_release();
	for (size_t i = 0; i < sizeof(p->pd_name); i++)
		st_relaxed(&p->pd_name[i], '\0');
	for (size_t i = 0; i < sizeof(p->pd_model); i++)
		st_relaxed(&p->pd_model[i], '\0');
	for (size_t i = 0; name[i]; i++)
		st_relaxed(&p->pd_name[i], name[i]);
	for (size_t i = 0; model && model[i]; i++)
		st_relaxed(&p->pd_model[i], model[i]);
	/* Release: the names are complete before pd_seq is even again. Pairs with the acquire
	 * load of pd_seq in kvidx_reader_pod(). */
	st_release(&p->pd_seq, ld_relaxed(&p->pd_seq) + 1);
}

/* Writes pod's load row under its seqlock (kvidx_pod_set_load()). */
static void load_write(struct kvidx_load_row *lr, uint64_t inflight, uint64_t tokens,
		       uint64_t lost, uint64_t t_ns)
{
	/* lr_seq odd while the row changes. The release fence orders the odd lr_seq before the
	 * field stores; it pairs with the acquire fence before the re-check of lr_seq in
	 * kvidx_pod_load() (reader.c). */
	st_relaxed(&lr->lr_seq, ld_relaxed(&lr->lr_seq) + 1);
	fence_release();
	st_relaxed(&lr->lr_inflight, inflight);
	st_relaxed(&lr->lr_prefill_tokens, tokens);
	st_relaxed(&lr->lr_updated_ns, t_ns);
	st_relaxed(&lr->lr_lost, lost);
	/* Release: the fields are complete before lr_seq is even again. Pairs with the acquire
	 * load of lr_seq in kvidx_pod_load(). */
	st_release(&lr->lr_seq, ld_relaxed(&lr->lr_seq) + 1);
}

int kvidx_pod_set_load(struct kvidx *w, int pod, const struct kvidx_load *load)
{
	if (!load)
		return -EINVAL;
	if (pod < 0 || (unsigned)pod >= w->max_pods ||
	    KV_POD_STATE(w->pods[pod].pd_word) != KV_POD_ACTIVE)
		return -KVIDX_ENOPOD;
	load_write(&w->load[pod], load->inflight, load->prefill_tokens, load->lost,
		   load->updated_ns ? load->updated_ns : kvidx_now_ns());
	return 0;
}

int kvidx_pod_add(struct kvidx *w, const char *name, const char *model)
{
	int free_idx = -1;

	char m[KVIDX_POD_NAME_MAX];

	if (!name || !*name || strlen(name) >= KVIDX_POD_NAME_MAX)
		return -EINVAL;
	if (model) {
		/* The pod table's model is for display: a longer name is cut, not refused. */
		snprintf(m, sizeof(m), "%s", model);
		model = m;
	}
	for (uint32_t i = 0; i < w->max_pods; i++) {
		struct kvidx_pod *p = &w->pods[i];
		if (KV_POD_STATE(p->pd_word) == KV_POD_ACTIVE) {
			/* Bounded: the names are the writer's, but in shared memory (table.c,
			 * rule 6). */
			if (strncmp(p->pd_name, name, sizeof(p->pd_name)) == 0) {
				if (model && strncmp(p->pd_model, model, sizeof(p->pd_model)) != 0)
					pod_write_names(p, name, model);
				return (int)i;
			}
		} else if (free_idx < 0) {
			free_idx = (int)i;
		}
	}
	if (free_idx < 0)
		return -KVIDX_ENOPOD;
	struct kvidx_pod *p = &w->pods[free_idx];
	pod_write_names(p, name, model);
	for (int c = 0; c < KV_POD_COUNTERS; c++)
		st_relaxed(&p->pd_ctr[c], 0);
	for (int g = 0; g < KV_POD_GROUPS; g++) /* a previous occupant's KV-cache groups */
		st_relaxed(&p->pd_groups[g], 0);
	load_write(&w->load[free_idx], 0, 0, 0, kvidx_now_ns()); /* a previous occupant's load */
	for (int which = 0; which < KV_HIST_PER_POD; which++) {
		uint64_t *h = kv_writer_pod_hist(w, free_idx, which);
		for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
			st_relaxed(&h[b], 0);
	}
	/* A new generation, modulo 2^16 as in pod_bump(): records a previous occupant of this
	 * index left behind stay dead. (An add follows a removal, so a generation comes round
	 * only after 32768 removals and clears, and pod_bump()'s full sweep runs within those.)
	 * Release (the names and zeroed counters first) pairs with the acquire pod-word loads in
	 * rd_rec_visible() and kvidx_reader_pod() (reader.c). */
	st_release(&p->pd_word,
		   KV_POD_WORD(KV_POD_ACTIVE, 0, (KV_POD_GEN(p->pd_word) + 1) & 0xffff));
	return free_idx;
}

static int pod_bump(struct kvidx *w, int pod, unsigned state)
{
	if (pod < 0 || (unsigned)pod >= w->max_pods ||
	    KV_POD_STATE(w->pods[pod].pd_word) != KV_POD_ACTIVE)
		return -KVIDX_ENOPOD;
	uint64_t pw = w->pods[pod].pd_word;
	/* A new generation hides every record of the pod at once. Release pairs with the
	 * acquire pod-word loads in rd_rec_visible() and kvidx_reader_pod() (reader.c). */
	st_release(&w->pods[pod].pd_word,
		   KV_POD_WORD(state, KV_POD_FLAGS(pw), (KV_POD_GEN(pw) + 1) & 0xffff));
	stat_add(&w->st->pod_clears, 1);
	if (state == KV_POD_FREE)
		load_write(&w->load[pod], 0, 0, 0, kvidx_now_ns());
	kv_sweep_start(w);
	/*
	 * Generations are 16 bits: before one could come round to a value that records still
	 * carry, finish the sweep synchronously (a full pass removes every stale record).
	 */
	if (ld_relaxed(&w->st->pod_clears) % 32768 == 0)
		kv_sweep_step(w, w->nslots + w->max_probe);
	if (w->obs.on_clear)
		w->obs.on_clear(w->obs.ctx, pod, state == KV_POD_FREE);
	return 0;
}

int kvidx_clear_pod(struct kvidx *w, int pod)
{
	return pod_bump(w, pod, KV_POD_ACTIVE);
}

int kvidx_pod_remove(struct kvidx *w, int pod)
{
	return pod_bump(w, pod, KV_POD_FREE);
}

uint64_t *kv_writer_pod_ctrs(struct kvidx *w, int pod)
{
	if (pod < 0 || (unsigned)pod >= w->max_pods)
		return NULL;
	return w->pods[pod].pd_ctr;
}

uint64_t *kv_writer_pod_hist(struct kvidx *w, int pod, int which)
{
	if (pod < 0 || (unsigned)pod >= w->max_pods || which < 0 || which >= KV_HIST_PER_POD)
		return NULL;
	return w->hist + ((uint64_t)pod * KV_HIST_PER_POD + (unsigned)which) * KV_HIST_BUCKETS;
}

struct kvidx_router *kv_writer_router(struct kvidx *w, int slot)
{
	if (slot < 0 || (unsigned)slot >= w->max_readers)
		return NULL;
	return &w->routers[slot];
}

int kv_writer_drain_slot(const struct kvidx *w, int32_t *pid)
{
	if (w->drain_slot < 0)
		return -1;
	if (pid)
		*pid = ld_relaxed(&w->rslots[w->drain_slot].rs_pid); /* untrusted: display only */
	return w->drain_slot;
}

int kv_writer_drain_origin(const struct kvidx *w, uint64_t *claimed_ns)
{
	*claimed_ns = 0;
	if (w->drain_slot < 0)
		return -1;
	*claimed_ns = ld_relaxed(&w->rslots[w->drain_slot].rs_claimed_ns); /* untrusted */
	return w->drain_slot;
}

const struct kvidx_stats *kv_writer_stats(struct kvidx *w)
{
	return w->st;
}

uint64_t kv_writer_slots(const struct kvidx *w)
{
	return w->nslots + w->max_probe;
}

int kvidx_pod_set_spec_paused(struct kvidx *w, int pod, bool paused)
{
	if (pod < 0 || (unsigned)pod >= w->max_pods ||
	    KV_POD_STATE(w->pods[pod].pd_word) != KV_POD_ACTIVE)
		return -KVIDX_ENOPOD;
	uint64_t pw = w->pods[pod].pd_word;
	unsigned fl = paused ? KV_POD_FLAGS(pw) | KV_POD_SPEC_PAUSED :
			       KV_POD_FLAGS(pw) & ~KV_POD_SPEC_PAUSED;
	/* Pairs with the acquire pod-word loads in rd_rec_visible() and kvidx_reader_pod()
	 * (reader.c). */
	st_release(&w->pods[pod].pd_word, KV_POD_WORD(KV_POD_STATE(pw), fl, KV_POD_GEN(pw)));
	return 0;
}

/* ---- tick ---- */

/*
 * The index header's line 0 and the data header's fixed part are written once; a copy that
 * differs was scribbled (by the owner or root: no one else may write them), and keeps every
 * new reader out (KVIDX_ECORRUPT) until rewritten: it is, from the writer's copy, every 100 ms
 * (stat registry_repairs, which counts every header line rewritten). A data generation not
 * LIVE any more is marked LIVE again (release, as in data_create()).
 */
static void hdr_check(struct kvidx *w)
{
	if (!w->hdr_copied)
		return;
	if (memcmp(w->ih, w->ih_line0, sizeof(w->ih_line0)) != 0) {
		memcpy(w->ih, w->ih_line0, sizeof(w->ih_line0));
		stat_add(&w->st->registry_repairs, 1);
	}
	if (memcmp(w->hdr, w->dh_fixed, sizeof(w->dh_fixed)) != 0) {
		memcpy(w->hdr, w->dh_fixed, sizeof(w->dh_fixed));
		stat_add(&w->st->registry_repairs, 1);
	}
	if (ld_relaxed(&w->hdr->dh_state) != KV_DATA_LIVE) {
		/* Pairs with the acquire load of dh_state in rd_map_gen() (reader.c). */
		st_release(&w->hdr->dh_state, (uint64_t)KV_DATA_LIVE);
		stat_add(&w->st->registry_repairs, 1);
	}
}

void kvidx_writer_tick(struct kvidx *w, uint64_t now)
{
	st_relaxed(&w->hdr->dh_heartbeat_ns, now);
	/* A reader may have truncated or scribbled the registry: the guard's flag at once, its
	 * size and header every 100 ms (reg_check()). */
	if (ld_relaxed(&w->reg_hit) || now - w->last_reap_ns >= 100000000ull) {
		reg_check(w, now);
		hdr_check(w);
		kv_rcu_reap_dead(&w->rcu);
		w->last_reap_ns = now;
	}
	kv_rcu_reclaim(&w->rcu, now);
	kv_sweep_step(w, 4096);
	st_relaxed(&w->st->tombstones, w->tombs);
}
