/*
 * test_index.c — unit tests of the index: segments and their checks, every writer operation,
 * lookups and prefix scoring, pods, eviction, and reader liveness (dead and stalled readers).
 * Each test uses its own index name and unlinks it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "telemetry.h"
#include "util_index.h"

static char name[64];
static struct kvidx *w;

static void setup(void)
{
	tu_index_name(name, sizeof(name), "index");
}

static void teardown(void)
{
	tu_index_remove(name, &w);
}

static struct kvidx *open_w(uint64_t capacity, uint32_t ppk)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = capacity, .pods_per_key = ppk } };

	return tu_writer_open(name, &o);
}

static const struct kvidx_stats *stats(struct kvidx_reader *r)
{
	return kv_reader_view(r)->st;
}

TestSuite(index, .init = setup, .fini = teardown);

Test(index, open_defaults_and_info)
{
	w = open_w(0, 0);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	struct kvidx_info info;
	cr_assert_eq(kvidx_reader_info(r, &info), 0);
	cr_assert_eq(info.geo.capacity, 1u << 20);
	cr_assert_eq(info.geo.pods_per_key, 10);
	cr_assert_eq(info.block_size, 16);
	cr_assert_eq(info.algo, KVIDX_KEY_CBOR_FNV);
	cr_assert_eq(info.writer_pid, getpid());
	cr_assert_eq(info.generation, 1);
	kvidx_reader_close(r);
}

Test(index, segments_are_private)
{
	char path[128];
	struct stat sb;

	w = open_w(100, 4);
	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0600);
	snprintf(path, sizeof(path), "/dev/shm/%s.data.1", name);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0600);
}

Test(index, bad_names_and_options)
{
	struct kvidx_writer_opts o = { .name = "a/b" };
	cr_assert_null(kvidx_writer_open(&o));
	cr_assert_eq(errno, EINVAL);
	o.name = "";
	cr_assert_null(kvidx_writer_open(&o));
	o.name = name;
	o.geo.pods_per_key = 65;
	cr_assert_null(kvidx_writer_open(&o));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(kvidx_reader_open("../etc"));
	cr_assert_eq(errno, EINVAL);
}

Test(index, missing_index)
{
	cr_assert_null(kvidx_reader_open(name));
	cr_assert_eq(errno, ENOENT);
}

Test(index, second_writer_refused_then_takeover)
{
	w = open_w(100, 4);
	struct kvidx_writer_opts o = { .name = name };
	cr_assert_null(kvidx_writer_open(&o));
	cr_assert_eq(errno, KVIDX_EWRITER, "errno %d", errno);
	cr_assert_str_eq(kvidx_strerror(-KVIDX_EWRITER), "another writer holds this index");

	int pod = kvidx_pod_add(w, "10.0.0.1:8000", "m");
	uint64_t k = 42;
	cr_assert_eq(kvidx_store(w, pod, &k, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[4];
	cr_assert_eq(kvidx_lookup(r, k, rec, 4), 1);

	/* Writer restart: a new generation; the reader switches on its next lookup and keeps
	 * its registry slot. */
	kvidx_writer_close(w, false);
	w = open_w(100, 4);
	cr_assert_eq(kvidx_lookup(r, k, rec, 4), 0);
	struct kvidx_info info;
	cr_assert_eq(kvidx_reader_info(r, &info), 0);
	cr_assert_eq(info.generation, 2);
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/%s.data.1", name);
	cr_assert_eq(access(path, F_OK), -1, "old generation unlinked");
	kvidx_reader_close(r);
}

static void *map_ctl(size_t *size)
{
	char path[128];
	struct stat sb;

	snprintf(path, sizeof(path), "/%s", name);
	int fd = shm_open(path, O_RDWR, 0);
	cr_assert_geq(fd, 0);
	fstat(fd, &sb);
	*size = (size_t)sb.st_size;
	void *p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(p, MAP_FAILED);
	return p;
}

Test(index, version_mismatch_refused)
{
	size_t size;

	w = open_w(100, 4);
	kvidx_writer_close(w, false);
	w = NULL;
	struct kvidx_ctl_hdr *h = map_ctl(&size);
	h->ch_stamp ^= 1ull << 48;
	struct kvidx_writer_opts o = { .name = name };
	cr_assert_null(kvidx_writer_open(&o));
	cr_assert_eq(errno, KVIDX_EVERSION);
	cr_assert_null(kvidx_reader_open(name));
	cr_assert_eq(errno, KVIDX_EVERSION);
	h->ch_magic = 0x1234;
	cr_assert_null(kvidx_reader_open(name));
	cr_assert_eq(errno, KVIDX_ECORRUPT);
	munmap(h, size);
	char path[128];
	snprintf(path, sizeof(path), "/%s.data.1", name);
	shm_unlink(path);
}

Test(index, truncated_segments_refused)
{
	char path[128];

	w = open_w(100, 4);
	/* A data segment shorter than its header claims. */
	snprintf(path, sizeof(path), "/%s.data.1", name);
	int fd = shm_open(path, O_RDWR, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 8192), 0);
	close(fd);
	cr_assert_null(kvidx_reader_open(name));
	cr_assert_eq(errno, KVIDX_ECORRUPT);
	/* A registry shorter than its header. */
	snprintf(path, sizeof(path), "/%s", name);
	fd = shm_open(path, O_RDWR, 0);
	cr_assert_eq(ftruncate(fd, 16), 0);
	close(fd);
	cr_assert_null(kvidx_reader_open(name));
	cr_assert_eq(errno, KVIDX_ECORRUPT);
}

Test(index, store_lookup_tiers_remove)
{
	w = open_w(1000, 4);
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "m"), b = kvidx_pod_add(w, "10.0.0.2:8000", NULL);
	cr_assert(a >= 0 && b >= 0 && a != b);
	cr_assert_eq(kvidx_pod_add(w, "10.0.0.1:8000", "m"), a, "same name, same index");
	uint64_t keys[3] = { 1, 2, 3 }, t0 = kvidx_now_ns();
	cr_assert_eq(kvidx_store(w, a, keys, 3, KVIDX_TIER_GPU, t0), 3);
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_CPU, t0), 1);
	cr_assert_eq(kvidx_store(w, b, keys, 2, KVIDX_TIER_CPU, t0), 2);

	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[4];
	int n = kvidx_lookup(r, 1, rec, 4);
	cr_assert_eq(n, 2);
	for (int i = 0; i < n; i++) {
		cr_assert_not(rec[i].speculative);
		cr_assert_eq(rec[i].t_ns, t0);
		if (rec[i].pod == a)
			cr_assert_eq(rec[i].tiers, KVIDX_TIER_GPU | KVIDX_TIER_CPU);
		else
			cr_assert_eq(rec[i].tiers, KVIDX_TIER_CPU);
	}
	cr_assert_eq(kvidx_lookup(r, 99, rec, 4), 0);
	cr_assert_eq(kvidx_lookup(r, 1, rec, 1), 1, "max caps the output");

	/* Remove GPU from key 1 on a: CPU stays. Remove everything of b on key 2. */
	cr_assert_eq(kvidx_remove(w, a, keys, 1, KVIDX_TIER_GPU), 1);
	cr_assert_eq(kvidx_lookup(r, 1, rec, 4), 2);
	cr_assert_eq(kvidx_remove(w, b, &keys[1], 1, 0), 1);
	cr_assert_eq(kvidx_lookup(r, 2, rec, 4), 1);
	cr_assert_eq(rec[0].pod, a);
	/* Last record gone: the key is gone. */
	cr_assert_eq(kvidx_remove(w, a, &keys[2], 1, 0), 1);
	cr_assert_eq(kvidx_lookup(r, 3, rec, 4), 0);
	cr_assert_eq(stats(r)->keys, 2);
	cr_assert_eq(stats(r)->records, 3);
	cr_assert_eq(kvidx_remove(w, a, &keys[2], 1, 0), 0, "removing an absent key is a no-op");
	/* Removing a tier a record is not on changes nothing: not counted, not republished
	 * (it once counted the record and published a copy of the entry). Key 2 is on a's GPU. */
	uint64_t removes = stats(r)->removes, retired = stats(r)->retired;
	cr_assert_eq(kvidx_remove(w, a, &keys[1], 1, KVIDX_TIER_CPU | KVIDX_TIER_DISK), 0);
	cr_assert_eq(stats(r)->removes, removes);
	cr_assert_eq(stats(r)->retired, retired, "an unchanged entry was republished");
	cr_assert_eq(kvidx_lookup(r, 2, rec, 4), 1);
	cr_assert_eq(rec[0].pod, a);
	cr_assert_eq(rec[0].tiers, KVIDX_TIER_GPU);
	/* KVIDX_REMOVE_SPECULATIVE: predictions go, confirmed records stay unrepublished. */
	uint64_t sk[2] = { 2, 50 };
	cr_assert_eq(kvidx_speculate(w, a, sk, 2, kvidx_now_ns(), 5000), 1, "key 2 is confirmed");
	retired = stats(r)->retired;
	cr_assert_eq(kvidx_remove(w, a, sk, 2, KVIDX_REMOVE_SPECULATIVE), 1);
	cr_assert_eq(kvidx_lookup(r, 50, rec, 4), 0);
	cr_assert_eq(kvidx_lookup(r, 2, rec, 4), 1);
	cr_assert(rec[0].pod == a && !rec[0].speculative && rec[0].tiers == KVIDX_TIER_GPU);
	cr_assert_eq(stats(r)->retired, retired + 1, "only the prediction's entry was replaced");
	cr_assert_eq(kvidx_store(w, 77, keys, 1, KVIDX_TIER_GPU, t0), -KVIDX_ENOPOD);
	kvidx_reader_close(r);
}

Test(index, clear_pod_is_immediate_and_swept)
{
	uint64_t keys[500];

	w = open_w(2000, 4);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	for (int i = 0; i < 500; i++)
		keys[i] = 1000 + (uint64_t)i;
	kvidx_store(w, a, keys, 500, KVIDX_TIER_GPU, kvidx_now_ns());
	kvidx_store(w, b, keys, 10, KVIDX_TIER_GPU, kvidx_now_ns());
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_eq(kvidx_clear_pod(w, a), 0);
	struct kvidx_rec rec[4];
	cr_assert_eq(kvidx_lookup(r, keys[5], rec, 4), 1, "cleared pod invisible at once");
	cr_assert_eq(rec[0].pod, b);
	cr_assert_eq(kvidx_lookup(r, keys[400], rec, 4), 0);
	/* The sweep removes the stale records in bounded steps. */
	for (int i = 0; i < 10; i++)
		kvidx_writer_tick(w, kvidx_now_ns());
	cr_assert_eq(stats(r)->keys, 10);
	cr_assert_eq(stats(r)->records, 10);
	/* The pod stays usable after a clear. */
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);
	cr_assert_eq(kvidx_lookup(r, keys[0], rec, 4), 2);
	/* Removing a pod frees its index; a new pod there does not inherit records. */
	cr_assert_eq(kvidx_pod_remove(w, a), 0);
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_GPU, 0), -KVIDX_ENOPOD);
	int c = kvidx_pod_add(w, "c:1", NULL);
	cr_assert_eq(c, a);
	cr_assert_eq(kvidx_lookup(r, keys[0], rec, 4), 1);
	char pn[KVIDX_POD_NAME_MAX], pm[KVIDX_POD_NAME_MAX];
	cr_assert_eq(kvidx_reader_pod(r, c, pn, pm), 0);
	cr_assert_str_eq(pn, "c:1");
	cr_assert_eq(kvidx_reader_pod_find(r, "b:1"), b);
	cr_assert_eq(kvidx_reader_pod_find(r, "a:1"), -KVIDX_ENOPOD);
	kvidx_reader_close(r);
}

/*
 * The pod word's generation is 16 bits and the word's bits 32-63 are zero (shm/FORMAT.md),
 * however often a pod index is reused; and a record a previous occupant left behind stays
 * dead when the generation comes round again.
 */
Test(index, pod_generation_wraps_within_its_bits)
{
	w = open_w(1024, 2);
	cr_assert_not_null(w);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	uint64_t key = 0x1234;
	struct kvidx_rec rec[4];

	int p = kvidx_pod_add(w, "p:1", NULL);
	cr_assert_geq(p, 0);
	cr_assert_eq(kvidx_store(w, p, &key, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);
	/* Clears bump the generation by one each: walk it to 0xfffe, past the record's. */
	const struct kvidx_pod *pd = &kv_reader_view(r)->pods[p];
	for (int i = 0; KV_POD_GEN(pd->pd_word) != 0xfffe; i++) {
		cr_assert_lt(i, 70000, "the generation never reached 0xfffe");
		cr_assert_eq(kvidx_clear_pod(w, p), 0);
		cr_assert_eq(kvidx_lookup(r, key, rec, 4), 0, "clear %d: the old record is back", i);
	}
	/* Removed at 0xffff; added again, the generation comes round to 0 within its bits. */
	cr_assert_eq(kvidx_pod_remove(w, p), 0);
	cr_assert_eq(KV_POD_GEN(pd->pd_word), 0xffff);
	cr_assert_eq(kvidx_pod_add(w, "p:1", NULL), p);
	cr_assert_eq(pd->pd_word >> 32, 0, "pod word %#llx has bits above 31",
		     (unsigned long long)pd->pd_word);
	cr_assert_eq(KV_POD_GEN(pd->pd_word), 0);
	cr_assert_eq(KV_POD_STATE(pd->pd_word), KV_POD_ACTIVE);
	cr_assert_eq(kvidx_lookup(r, key, rec, 4), 0, "the old record is back");
	kvidx_reader_close(r);
}

/* What the writer's observer reported, and the last report of each kind. */
struct seen {
	int stores, confirms, expires, drops[3], clears, pods_removed;
	size_t stored_keys;
	uint64_t created, expires_ns, confirm_now; /* last confirmation */
	uint64_t expired_at;                       /* last expiry's expires-at */
	bool drop_spec;                            /* last drop: of a speculative record */
};

static void seen_store(void *ctx, int pod, const uint64_t *keys, size_t n, uint64_t now)
{
	struct seen *s = ctx;
	s->stores++;
	s->stored_keys += n;
}

static void seen_confirm(void *ctx, uint64_t key, int pod, uint64_t created, uint64_t expires,
			 uint64_t now)
{
	struct seen *s = ctx;
	s->confirms++;
	s->created = created;
	s->expires_ns = expires;
	s->confirm_now = now;
}

static void seen_expire(void *ctx, uint64_t key, int pod, uint64_t created, uint64_t expires)
{
	struct seen *s = ctx;
	s->expires++;
	s->expired_at = expires;
}

static void seen_drop(void *ctx, enum kvidx_drop cause, uint64_t key, int pod, bool spec,
		      uint64_t t_ns, uint64_t expires_ns)
{
	struct seen *s = ctx;
	cr_assert(cause == KVIDX_DROP_REMOVED || cause == KVIDX_DROP_EVICTED);
	s->drops[cause]++;
	s->drop_spec = spec;
}

static void seen_clear(void *ctx, int pod, bool removed)
{
	struct seen *s = ctx;
	if (removed)
		s->pods_removed++;
	else
		s->clears++;
}

/* Makes s the writer's observer (s must outlive the writer calls that follow). */
static void observe(struct kvidx *wr, struct seen *s)
{
	struct kvidx_observer o = { .ctx = s, .on_store = seen_store, .on_confirm = seen_confirm,
				    .on_expire = seen_expire, .on_drop = seen_drop,
				    .on_clear = seen_clear };
	memset(s, 0, sizeof(*s));
	kvidx_writer_set_observer(wr, &o);
}

Test(index, speculate_confirm_expire)
{
	w = open_w(1000, 4);
	int a = kvidx_pod_add(w, "a:1", NULL);
	uint64_t keys[4] = { 11, 12, 13, 14 }, t0 = kvidx_now_ns();
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[4];

	cr_assert_eq(kvidx_speculate(w, a, keys, 4, t0, 0), -EINVAL);
	cr_assert_eq(kvidx_speculate(w, a, keys, 4, t0, 5000), 4);
	cr_assert_eq(kvidx_lookup(r, 11, rec, 4), 1);
	cr_assert(rec[0].speculative);
	cr_assert_eq(rec[0].t_ns, t0);
	cr_assert_eq(rec[0].expires_ns, t0 + 5000 * 1000000ull);

	/* Confirmation: the record turns confirmed; the observer gets created/expires. */
	struct seen c;
	observe(w, &c);
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_GPU, t0 + 10), 1);
	cr_assert_eq(c.confirms, 1);
	cr_assert_eq(c.created, t0);
	cr_assert_eq(c.expires_ns, t0 + 5000 * 1000000ull);
	cr_assert_eq(c.confirm_now, t0 + 10);
	cr_assert_eq(c.stores, 1);
	cr_assert_eq(c.stored_keys, 1);
	cr_assert_eq(kvidx_lookup(r, 11, rec, 4), 1);
	cr_assert_not(rec[0].speculative);
	/* A prediction on a confirmed block changes nothing. */
	cr_assert_eq(kvidx_speculate(w, a, keys, 1, t0, 5000), 0);

	/* Readers ignore expired predictions themselves, before any reaper runs. */
	uint64_t old = kvidx_now_ns() - 10 * 1000000000ull;
	uint64_t k5 = 15;
	cr_assert_eq(kvidx_speculate(w, a, &k5, 1, old, 1000), 1);
	cr_assert_eq(kvidx_lookup(r, 15, rec, 4), 0);
	/* The reaper removes expired ones and reports them. */
	int got = kvidx_expire(w, kvidx_now_ns(), 100000);
	cr_assert_eq(got, 1);
	cr_assert_eq(stats(r)->expirations, 1);
	cr_assert_eq(c.expires, 1);
	cr_assert_eq(kvidx_expire(w, t0 + 6000 * 1000000ull, 100000), 3);
	cr_assert_eq(stats(r)->spec_records, 0);
	cr_assert_eq(stats(r)->keys, 1);

	/* Paused speculation: no new predictions and existing ones stop counting. */
	cr_assert_eq(kvidx_speculate(w, a, &keys[1], 1, kvidx_now_ns(), 5000), 1);
	cr_assert_eq(kvidx_pod_set_spec_paused(w, a, true), 0);
	cr_assert_eq(kvidx_lookup(r, 12, rec, 4), 0);
	cr_assert_eq(kvidx_speculate(w, a, &keys[2], 1, kvidx_now_ns(), 5000), 0);
	cr_assert_eq(kvidx_pod_set_spec_paused(w, a, false), 0);
	cr_assert_eq(kvidx_lookup(r, 12, rec, 4), 1);
	kvidx_reader_close(r);
}

Test(index, score_prefixes_candidates_weights)
{
	w = open_w(1000, 4);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	int c = kvidx_pod_add(w, "c:1", NULL);
	uint64_t k[8] = { 101, 102, 103, 104, 105, 106, 107, 108 }, now = kvidx_now_ns();
	kvidx_store(w, a, k, 8, KVIDX_TIER_GPU, now);
	kvidx_store(w, b, k, 3, KVIDX_TIER_CPU, now);
	kvidx_store(w, b, &k[4], 4, KVIDX_TIER_GPU, now); /* gap at block 3 */
	kvidx_speculate(w, c, k, 2, now, 5000);
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_score s[8];

	int n = kvidx_score(r, k, 8, NULL, 0, NULL, s, 8);
	cr_assert_eq(n, 3);
	cr_assert_eq(s[0].pod, a);
	cr_assert_eq(s[0].blocks, 8);
	cr_assert_float_eq(s[0].score, 8.0, 1e-9);
	cr_assert_eq(s[1].pod, b);
	cr_assert_eq(s[1].blocks, 3, "consecutive from block 0 only");
	cr_assert_float_eq(s[1].score, 3 * 0.8, 1e-9);
	cr_assert_eq(s[2].pod, c);
	cr_assert_eq(s[2].blocks, 2);
	cr_assert_eq(s[2].spec_blocks, 2);

	/* Candidates: rows for exactly those pods, even at zero. */
	int cand[2] = { c, -1 };
	n = kvidx_score(r, k, 8, cand, 2, NULL, s, 8);
	cr_assert_eq(n, 1);
	cr_assert_eq(s[0].pod, c);
	uint64_t miss[2] = { 999, 101 };
	int cb[1] = { b };
	n = kvidx_score(r, miss, 2, cb, 1, NULL, s, 8);
	cr_assert_eq(n, 1);
	cr_assert_eq(s[0].blocks, 0);

	struct kvidx_weights wt;
	kvidx_weights_default(&wt);
	wt.tier[1] = 0.25;
	wt.speculative = 0.5;
	n = kvidx_score(r, k, 8, NULL, 0, &wt, s, 8);
	cr_assert_float_eq(s[1].score, 0.75, 1e-9);
	cr_assert_float_eq(s[2].score, 1.0, 1e-9);
	cr_assert_eq(kvidx_score(r, k, 8, NULL, 0, NULL, s, 1), 1, "max caps rows");
	cr_assert_eq(kvidx_score(r, NULL, 3, NULL, 0, NULL, s, 8), -EINVAL);
	/* A long prompt crosses many prefetch chunks. */
	uint64_t longk[300];
	for (int i = 0; i < 300; i++)
		longk[i] = 5000 + (uint64_t)i;
	kvidx_store(w, b, longk, 300, KVIDX_TIER_GPU, now);
	kvidx_store(w, a, longk, 150, KVIDX_TIER_GPU, now);
	n = kvidx_score(r, longk, 300, NULL, 0, NULL, s, 8);
	cr_assert_eq(n, 2);
	cr_assert_eq(s[0].blocks, 150);
	cr_assert_eq(s[1].blocks, 300);
	kvidx_reader_close(r);
}

Test(index, score_runs_per_tier)
{
	w = open_w(1000, 4);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	int c = kvidx_pod_add(w, "c:1", NULL), d = kvidx_pod_add(w, "d:1", NULL);
	uint64_t k[6] = { 201, 202, 203, 204, 205, 206 }, now = kvidx_now_ns();
	/* a: gpu on 0-3, cpu on 0-1 and 3-5 (so cpu's run stops at the gap at block 2). */
	kvidx_store(w, a, k, 4, KVIDX_TIER_GPU, now);
	kvidx_store(w, a, k, 2, KVIDX_TIER_CPU, now);
	kvidx_store(w, a, &k[3], 3, KVIDX_TIER_CPU, now);
	/* b: disk on 0-1, predicted 2-3, disk on 5 (past the gap at block 4, where b stops). */
	kvidx_store(w, b, k, 2, KVIDX_TIER_DISK, now);
	kvidx_speculate(w, b, &k[2], 2, now, 5000);
	kvidx_store(w, b, &k[5], 1, KVIDX_TIER_DISK, now);
	/* c: predicted 0-2, then gpu on 3: its speculative run is 3, gpu's 0. */
	kvidx_speculate(w, c, k, 3, now, 5000);
	kvidx_store(w, c, &k[3], 1, KVIDX_TIER_GPU, now);
	/* d: an unknown medium on 0. */
	kvidx_store(w, d, k, 1, KVIDX_TIER_OTHER, now);
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_score s[8];

	int n = kvidx_score(r, k, 6, NULL, 0, NULL, s, 8);
	cr_assert_eq(n, 4);
	cr_assert_eq(s[0].pod, a);
	cr_assert_eq(s[0].blocks, 6);
	cr_assert_eq(s[0].run[0], 4, "gpu run");
	cr_assert_eq(s[0].run[1], 2, "cpu run ends at its first gap");
	cr_assert_eq(s[0].run[2], 0);
	cr_assert_eq(s[0].spec_run, 0);
	cr_assert_float_eq(s[0].score, 4 * 1.0 + 2 * 0.8, 1e-9);
	cr_assert_eq(s[1].pod, b);
	cr_assert_eq(s[1].blocks, 4);
	cr_assert_eq(s[1].spec_blocks, 2);
	cr_assert_eq(s[1].run[2], 2, "disk run");
	cr_assert_eq(s[1].run[0] + s[1].run[1] + s[1].run[3], 0);
	cr_assert_eq(s[1].spec_run, 0, "predictions after block 0 are no run from block 0");
	cr_assert_eq(s[2].pod, c);
	cr_assert_eq(s[2].blocks, 4);
	cr_assert_eq(s[2].spec_run, 3);
	cr_assert_eq(s[2].run[0], 0, "a prediction is not a gpu block");
	cr_assert_eq(s[3].pod, d);
	cr_assert_eq(s[3].blocks, 1);
	cr_assert_eq(s[3].run[3], 1, "other run");
	cr_assert_eq(s[3].run[0], 0);

	/* Paused speculation: c's predictions stop counting, so c no longer holds block 0. */
	cr_assert_eq(kvidx_pod_set_spec_paused(w, c, true), 0);
	int cand[1] = { c };
	cr_assert_eq(kvidx_score(r, k, 6, cand, 1, NULL, s, 8), 1);
	cr_assert_eq(s[0].blocks, 0);
	cr_assert_eq(s[0].spec_run, 0);
	cr_assert_eq(s[0].run[0], 0);
	kvidx_reader_close(r);
}

Test(index, score_row_size)
{
	w = open_w(1000, 4);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	uint64_t k[3] = { 301, 302, 303 }, now = kvidx_now_ns();
	kvidx_store(w, a, k, 3, KVIDX_TIER_GPU, now);
	kvidx_store(w, b, k, 2, KVIDX_TIER_CPU, now);
	struct kvidx_reader *r = kvidx_reader_open(name);

	/* A caller built against a later header (a bigger row): rows at its stride, the part
	 * this library does not know zeroed. */
	struct big { struct kvidx_score s; uint64_t later[3]; } big[2];
	memset(big, 0xa5, sizeof(big));
	cr_assert_eq(kvidx_score_sized(r, k, 3, NULL, 0, NULL, big, 2, sizeof(big[0])), 2);
	cr_assert_eq(big[0].s.pod, a);
	cr_assert_eq(big[0].s.run[0], 3);
	cr_assert_eq(big[1].s.pod, b);
	cr_assert_eq(big[1].s.run[1], 2);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			cr_assert_eq(big[i].later[j], 0, "row %d: unknown tail zeroed", i);
	/* The 1.0 size, and smaller ones refused. */
	cr_assert_eq(kvidx_score_sized(r, k, 3, NULL, 0, NULL, big, 2, KVIDX_SCORE_SIZE_1_0), 2);
	cr_assert_eq(kvidx_score_sized(r, k, 3, NULL, 0, NULL, big, 2, KVIDX_SCORE_SIZE_1_0 - 8),
		     -EINVAL);
	cr_assert_eq(kvidx_score_sized(r, k, 3, NULL, 0, NULL, big, 2, 0), -EINVAL);
	kvidx_reader_close(r);
}

Test(index, full_table_evicts_speculative_first)
{
	/* 16 keys: the eviction sample (32 live entries) covers the whole table, so the policy
	 * is exact here; on large tables it is sampled (docs/limits.md "Full tables"). */
	w = open_w(16, 2);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	uint64_t now = kvidx_now_ns();
	struct kvidx_reader *r = kvidx_reader_open(name);
	for (uint64_t k = 1; k <= 8; k++)
		cr_assert_eq(kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, now + k), 1);
	for (uint64_t k = 101; k <= 108; k++)
		cr_assert_eq(kvidx_speculate(w, b, &k, 1, now, 5000), 1);
	cr_assert_eq(stats(r)->keys, 16);
	/* 8 more confirmed keys: every eviction takes a speculative-only key. */
	for (uint64_t k = 201; k <= 208; k++)
		cr_assert_eq(kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, now + k), 1);
	cr_assert_eq(stats(r)->evict_spec, 8);
	cr_assert_eq(stats(r)->evict_confirmed, 0);
	struct kvidx_rec rec[2];
	for (uint64_t k = 1; k <= 8; k++)
		cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1, "confirmed key %llu kept",
			     (unsigned long long)k);
	/* Now only confirmed keys: the oldest-stored goes, and it is counted. */
	uint64_t k = 301;
	cr_assert_eq(kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, now + 1000), 1);
	cr_assert_eq(stats(r)->evict_confirmed, 1);
	cr_assert_eq(stats(r)->keys, 16);
	cr_assert_eq(kvidx_lookup(r, 1, rec, 2), 0, "key 1 was the oldest");
	/* Pods per key is bounded: a third pod displaces a record, counted. */
	int c = kvidx_pod_add(w, "c:1", NULL);
	k = 2;
	kvidx_speculate(w, b, &k, 1, now, 5000);
	kvidx_store(w, c, &k, 1, KVIDX_TIER_GPU, now);
	cr_assert_eq(kvidx_lookup(r, 2, rec, 2), 2);
	cr_assert_eq(stats(r)->rec_evictions, 1);
	cr_assert(rec[0].pod != b && rec[1].pod != b, "the speculative record went first");
	kvidx_reader_close(r);
}

Test(index, churn_reuses_memory)
{
	w = open_w(256, 4);
	int a = kvidx_pod_add(w, "a:1", NULL);
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[4];
	/* Far more updates than the arena holds: only reclamation makes this work. */
	for (uint64_t round = 0; round < 200; round++) {
		for (uint64_t k = 1; k <= 200; k++) {
			uint64_t key = round * 1000 + k;
			cr_assert_eq(kvidx_store(w, a, &key, 1, KVIDX_TIER_GPU, 1), 1);
			cr_assert_eq(kvidx_remove(w, a, &key, 1, 0), 1);
		}
		kvidx_writer_tick(w, kvidx_now_ns());
		cr_assert_eq(kvidx_lookup(r, round * 1000 + 7, rec, 4), 0);
	}
	cr_assert_eq(stats(r)->keys, 0);
	cr_assert_eq(stats(r)->store_failed, 0);
	cr_assert_eq(stats(r)->evict_confirmed, 0);
	cr_assert_gt(stats(r)->reclaimed, 30000);
	kvidx_reader_close(r);
}

Test(index, dead_reader_slot_freed)
{
	w = open_w(100, 4);
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct kvidx_reader *r = kvidx_reader_open(name);
		char c = r ? 'y' : 'n';
		if (write(fds[1], &c, 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	char c;
	cr_assert_eq(read(fds[0], &c, 1), 1);
	cr_assert_eq(c, 'y');
	struct kvidx_reader *me = kvidx_reader_open(name);
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(me);
	const struct kvidx_reader_slot *rs = (const void *)((const char *)ctl + ctl->ch_slots_off);
	int active = 0;
	for (uint32_t i = 0; i < ctl->ch_max_readers; i++)
		active += KV_RS_STATE(rs[i].rs_state) == KV_RS_ACTIVE;
	cr_assert_eq(active, 2);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	kvidx_writer_tick(w, kvidx_now_ns() + 1000000000ull);
	active = 0;
	for (uint32_t i = 0; i < ctl->ch_max_readers; i++)
		active += KV_RS_STATE(rs[i].rs_state) == KV_RS_ACTIVE;
	cr_assert_eq(active, 1);
	cr_assert_eq(stats(me)->readers_dead, 1);
	kvidx_reader_close(me);
}

/*
 * A writer with a stall limit of 5 ms, a reader that stopped inside a read-side section
 * (tu_reader_stall; its slot in *rs), returned, and key 5 stored on a pod, then removed at *t:
 * its memory waits for that reader.
 */
static struct kvidx_reader *stalled_reader(struct kvidx_reader_slot **rs, uint64_t *t)
{
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 100 }, .stall_ms = 5 };
	struct kvidx_reader *r;
	uint64_t k = 5;
	int a;

	w = kvidx_writer_open(&o);
	cr_assert_not_null(w);
	a = kvidx_pod_add(w, "a:1", NULL);
	kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, 1);
	r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	*rs = tu_reader_stall(r);
	*t = kvidx_now_ns();
	kvidx_remove(w, a, &k, 1, 0);
	return r;
}

Test(index, stalled_reader_expelled_and_recovers)
{
	struct kvidx_reader_slot *rs;
	uint64_t t;
	/* Pretend the reader stopped inside a read-side section: it announced an old epoch. */
	struct kvidx_reader *r = stalled_reader(&rs, &t);

	/* Retired memory waits for it... */
	kvidx_writer_tick(w, t);
	cr_assert_eq(stats(r)->limbo, 1);
	/* ...until the stall limit, then it is expelled and memory is reclaimed. */
	kvidx_writer_tick(w, t + 10 * 1000000ull);
	cr_assert_eq(stats(r)->readers_expelled, 1);
	cr_assert_eq(KV_RS_STATE(rs->rs_state), KV_RS_EXPELLED);
	kvidx_writer_tick(w, t + 11 * 1000000ull);
	cr_assert_eq(stats(r)->limbo, 0);
	/* The reader re-registers by itself on its next call. */
	struct kvidx_rec rec[2];
	cr_assert_eq(kvidx_lookup(r, 5, rec, 2), 0);
	cr_assert_eq(KV_RS_STATE(rs->rs_state), KV_RS_ACTIVE);
	cr_assert_eq(rs->rs_expelled, 1);
	kvidx_reader_close(r);
}

/* A tick with a time earlier than one a reclaim already used (the publish path reads its own
 * clock) is no stall: the reader stays, and the stall clock still runs from the first time. */
Test(index, earlier_now_does_not_expel)
{
	struct kvidx_reader_slot *rs;
	uint64_t t;
	struct kvidx_reader *r = stalled_reader(&rs, &t);

	kvidx_writer_tick(w, t + 100 * 1000000ull); /* the stall clock starts at t + 100 ms */
	kvidx_writer_tick(w, t);                    /* earlier: no stall */
	cr_assert_eq(stats(r)->readers_expelled, 0);
	cr_assert_eq(KV_RS_STATE(rs->rs_state), KV_RS_ACTIVE);
	cr_assert_eq(stats(r)->limbo, 1);
	kvidx_writer_tick(w, t + 103 * 1000000ull); /* 3 ms after the start: still none */
	cr_assert_eq(stats(r)->readers_expelled, 0);
	kvidx_writer_tick(w, t + 106 * 1000000ull); /* 6 ms: past the limit */
	cr_assert_eq(stats(r)->readers_expelled, 1);
	cr_assert_eq(KV_RS_STATE(rs->rs_state), KV_RS_EXPELLED);
	kvidx_reader_close(r);
}

Test(index, registry_full)
{
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 10, .max_readers = 2 } };
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w);
	struct kvidx_reader *r1 = kvidx_reader_open(name), *r2 = kvidx_reader_open(name);
	cr_assert(r1 && r2);
	cr_assert_null(kvidx_reader_open(name));
	cr_assert_eq(errno, KVIDX_ENOSLOT);
	kvidx_reader_close(r1);
	struct kvidx_reader *r3 = kvidx_reader_open(name);
	cr_assert_not_null(r3, "a closed reader's slot is reusable");
	kvidx_reader_close(r2);
	kvidx_reader_close(r3);
}


Test(index, predictions_are_not_stretched)
{
	w = open_w(100, 4);
	int a = kvidx_pod_add(w, "a:1", NULL);
	uint64_t k = 7, t0 = kvidx_now_ns();
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[2];
	struct seen s;

	observe(w, &s);
	cr_assert_eq(kvidx_speculate(w, a, &k, 1, t0, 1000), 1);
	/* A second route within the TTL adds nothing and does not move the expiry. */
	cr_assert_eq(kvidx_speculate(w, a, &k, 1, t0 + 500000000ull, 1000), 0);
	cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1);
	cr_assert_eq(rec[0].expires_ns, t0 + 1000000000ull);
	/* After the TTL (reaper not run): the expiry is reported, a new prediction starts. */
	uint64_t t1 = t0 + 1500000000ull;
	cr_assert_eq(kvidx_speculate(w, a, &k, 1, t1, 1000), 1);
	cr_assert_eq(s.expires, 1);
	cr_assert_eq(s.expired_at, t0 + 1000000000ull);
	cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1);
	cr_assert_eq(rec[0].t_ns, t1);
	kvidx_reader_close(r);
}

/*
 * A confirmation whose entry cannot be published (no arena memory: a reader stuck in a
 * read-side section holds every retired entry) changes nothing and is not reported; the
 * store that later succeeds reports it, once. Reporting before publishing counted it twice.
 */
Test(index, confirm_reported_once_when_publish_fails)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 8, .records = 16, .pods_per_key = 2 },
				       .stall_ms = 600000 };
	w = tu_writer_open(name, &o);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	int c = kvidx_pod_add(w, "c:1", NULL);
	uint64_t k = 42, x = 43, t0 = kvidx_now_ns();
	const struct kvidx_stats *st = kv_writer_stats(w);
	struct seen s;

	observe(w, &s);
	/* k holds a confirmed record too, so that making room never evicts it. */
	cr_assert_eq(kvidx_store(w, b, &k, 1, KVIDX_TIER_GPU, t0), 1);
	cr_assert_eq(kvidx_speculate(w, a, &k, 1, t0, 60000), 1);
	/* x's entry has two records, as k's will: churning it spends entries of k's size class. */
	cr_assert_eq(kvidx_store(w, b, &x, 1, KVIDX_TIER_GPU, t0), 1);
	cr_assert_eq(kvidx_store(w, c, &x, 1, KVIDX_TIER_GPU, t0), 1);

	/* A reader stops inside a section: nothing retired from now on can be reused. */
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	struct kvidx_reader_slot *rs = tu_reader_stall(r);
	/* Churn x (each change retires its entry) until the arena is spent. */
	int rc = 0, rounds = 0;
	for (; rounds < 100000 && rc != -KVIDX_EFULL; rounds++)
		rc = rounds % 2 ? kvidx_remove(w, b, &x, 1, KVIDX_TIER_CPU) :
				  kvidx_store(w, b, &x, 1, KVIDX_TIER_CPU, t0);
	cr_assert_eq(rc, -KVIDX_EFULL, "the arena never filled (%d rounds)", rounds);

	uint64_t failed = st->store_failed;
	cr_assert_eq(kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, t0 + 5), -KVIDX_EFULL);
	cr_assert_eq(st->store_failed, failed + 1);
	cr_assert_eq(s.confirms, 0, "a confirmation that was not published was reported");
	cr_assert_eq(st->confirms, 0);

	/* The reader leaves its section; a grace period gives the memory back. */
	__atomic_store_n(&rs->rs_ctr, 0, __ATOMIC_SEQ_CST);
	kvidx_writer_tick(w, kvidx_now_ns());
	cr_assert_eq(kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, t0 + 10), 1);
	cr_assert_eq(s.confirms, 1, "the confirmation was reported %d times", s.confirms);
	cr_assert_eq(st->confirms, 1);
	cr_assert_eq(s.confirm_now, t0 + 10);
	cr_assert_eq(s.created, t0);
	struct kvidx_rec rec[2];
	cr_assert_eq(tu_rec_state(r, k, a, rec), TU_CONF);
	kvidx_reader_close(r);
}

/* Every kind of change reaches the observer, once, after it is visible to readers. */
Test(index, observer_sees_each_change)
{
	w = open_w(4, 2);
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	uint64_t keys[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, now = kvidx_now_ns();
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct seen s;

	observe(w, &s);
	cr_assert_eq(kvidx_store(w, a, keys, 2, KVIDX_TIER_GPU, now), 2);
	cr_assert_eq(s.stores, 1);
	cr_assert_eq(s.stored_keys, 2);
	/* Removing one tier of two leaves the record: not a drop. */
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_CPU, now), 1);
	cr_assert_eq(kvidx_remove(w, a, keys, 1, KVIDX_TIER_CPU), 1);
	cr_assert_eq(s.drops[KVIDX_DROP_REMOVED], 0);
	cr_assert_eq(kvidx_remove(w, a, keys, 1, 0), 1);
	cr_assert_eq(s.drops[KVIDX_DROP_REMOVED], 1);
	cr_assert_not(s.drop_spec);
	cr_assert_eq(tu_rec_state(r, keys[0], a, NULL), TU_ABSENT);
	/* A removed prediction is a drop of a speculative record. */
	cr_assert_eq(kvidx_speculate(w, b, &keys[1], 1, now, 60000), 1);
	cr_assert_eq(kvidx_remove(w, b, &keys[1], 1, 0), 1);
	cr_assert_eq(s.drops[KVIDX_DROP_REMOVED], 2);
	cr_assert(s.drop_spec);
	/* Past capacity (4 keys) the table evicts: each evicted record is reported. */
	cr_assert_eq(kvidx_store(w, a, keys + 2, 6, KVIDX_TIER_GPU, now), 6);
	cr_assert_geq(s.drops[KVIDX_DROP_EVICTED], 3);
	cr_assert_eq((uint64_t)s.drops[KVIDX_DROP_EVICTED],
		     kv_writer_stats(w)->evict_spec + kv_writer_stats(w)->evict_confirmed);
	/* Clearing and removing pods. */
	cr_assert_eq(kvidx_clear_pod(w, a), 0);
	cr_assert_eq(s.clears, 1);
	cr_assert_eq(s.pods_removed, 0);
	cr_assert_eq(kvidx_pod_remove(w, b), 0);
	cr_assert_eq(s.pods_removed, 1);
	cr_assert_eq(kvidx_clear_pod(w, b), -KVIDX_ENOPOD);
	cr_assert_eq(s.clears, 1, "a refused clear was reported");
	/* No observer: nothing is called. */
	int stores = s.stores;
	kvidx_writer_set_observer(w, NULL);
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_GPU, now), 1);
	cr_assert_eq(s.stores, stores);
	kvidx_reader_close(r);
}

Test(index, deferred_publish_keeps_readers_on_the_old_generation)
{
	w = open_w(100, 4);
	int a = kvidx_pod_add(w, "a:1", NULL);
	uint64_t k = 9;
	kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, 1);
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[2];
	cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1);
	/* The writer dies; its successor rebuilds before readers see the new generation. */
	kvidx_writer_close(w, false);
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 100, .pods_per_key = 4 },
				       .defer_publish = true };
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w);
	cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1, "still serving generation 1");
	a = kvidx_pod_add(w, "a:1", NULL);
	kvidx_store(w, a, &k, 1, KVIDX_TIER_CPU, 2);
	cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1);
	cr_assert_eq(rec[0].tiers, KVIDX_TIER_GPU, "the rebuild is not visible yet");
	cr_assert_eq(kvidx_writer_publish(w), 0);
	cr_assert_eq(kvidx_writer_publish(w), -EALREADY);
	cr_assert_eq(kvidx_lookup(r, k, rec, 2), 1);
	cr_assert_eq(rec[0].tiers, KVIDX_TIER_CPU, "switched to generation 2");
	char path[128];
	snprintf(path, sizeof(path), "/dev/shm/%s.data.1", name);
	cr_assert_eq(access(path, F_OK), -1, "generation 1 unlinked at publish");
	kvidx_reader_close(r);
}
