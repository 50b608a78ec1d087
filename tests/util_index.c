/*
 * util_index.c — naming, writing, inspecting and removing a test's own index (see
 * util_index.h).
 */
#include "util_index.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hist.h"
#include "inspect.h"
#include "telemetry.h"

void tu_index_name(char *name, size_t len, const char *tag)
{
	static int n;

	snprintf(name, len, "t-%s-%d-%d", tag, getpid(), n++);
}

void tu_index_remove(const char *name, struct kvidx **w)
{
	char path[128];

	if (w && *w)
		kvidx_writer_close(*w, true);
	if (w)
		*w = NULL;
	snprintf(path, sizeof(path), "/%s", name);
	shm_unlink(path);
	snprintf(path, sizeof(path), "/%s.lock", name);
	shm_unlink(path);
	for (int g = 1; g <= 8; g++) {
		snprintf(path, sizeof(path), "/%s.data.%d", name, g);
		shm_unlink(path);
		snprintf(path, sizeof(path), "/%s.reg.%d", name, g);
		shm_unlink(path);
	}
}

void tu_reader_close(struct kvidx_reader **rd)
{
	if (*rd)
		kvidx_reader_close(*rd);
	*rd = NULL;
}

struct kvidx *tu_writer_open(const char *name, const struct kvidx_writer_opts *opts)
{
	struct kvidx_writer_opts o = *opts;
	struct kvidx *w;

	o.name = name;
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w, "writer open %s: %s", name, kvidx_strerror(-errno));
	return w;
}

void tu_set_pod_ctr(struct kvidx *w, int pod, unsigned c, uint64_t v)
{
	uint64_t *ctr = kv_writer_pod_ctrs(w, pod);

	cr_assert_not_null(ctr);
	cr_assert_lt(c, KV_POD_COUNTERS);
	st_relaxed(&ctr[c], v);
}

void tu_add_latency(struct kvidx *w, int pod, enum kv_hist_id which, uint64_t us, int n)
{
	struct kv_tm_hist h = kv_tm_hist(w, pod, which);

	cr_assert(kv_tm_hist_ok(h));
	for (int i = 0; i < n; i++)
		kv_tm_hist_add(h, us);
}

bool tu_pod_paused(struct kvidx_reader *r, int pod)
{
	const struct kv_view *v = kv_reader_view(r);

	return KV_POD_FLAGS(ld_acquire(&v->pods[pod].pd_word)) & KV_POD_SPEC_PAUSED;
}

int tu_rec_state(struct kvidx_reader *r, uint64_t key, int pod, struct kvidx_rec *rec)
{
	struct kvidx_rec recs[64];
	int n;

	do
		n = kvidx_lookup(r, key, recs, 64);
	while (n == -KVIDX_ERETRY);
	if (n < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		if (recs[i].pod != pod)
			continue;
		if (rec)
			*rec = recs[i];
		return recs[i].speculative ? TU_SPEC : TU_CONF;
	}
	return TU_ABSENT;
}

struct kvidx_reader_slot *tu_reader_slot(struct kvidx_reader *r)
{
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(r);

	return (struct kvidx_reader_slot *)((char *)ctl + ctl->ch_slots_off) +
	       kv_reader_slot_index(r);
}

struct kvidx_reader_slot *tu_reader_stall(struct kvidx_reader *r)
{
	struct kvidx_reader_slot *rs = tu_reader_slot(r);

	__atomic_store_n(&rs->rs_ctr, __atomic_load_n(&kv_reader_idx(r)->ih_epoch, __ATOMIC_SEQ_CST),
			 __ATOMIC_SEQ_CST);
	return rs;
}
