/*
 * test_attack.c — issue 10, item 1: what a member of the index's group, who can write (and
 * truncate) the reader registry, can do to the writer. Each test plays one attack against a
 * writer in this process, then checks that the writer survived it, that reclamation still
 * works and never frees memory a reader in a section may hold, and that a fresh writer can
 * take the index over. Written against the library's API and the registry's object only (found
 * by name), so that the same file builds against the code before the fix; there every one of
 * these tests failed (SIGBUS, a refused takeover, a reader never expelled, memory reclaimed
 * under a reader).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "telemetry.h"
#include "util_index.h"

#define NS_MS 1000000ull
#define NKEYS 100

static char name[64];
static struct kvidx *w;
static uint64_t keys[NKEYS];

static void init(void)
{
	tu_index_name(name, sizeof(name), "attack");
	for (int i = 0; i < NKEYS; i++)
		keys[i] = 0xa77ac0000ull + (uint64_t)i * 7919;
}

static pid_t child; /* a reader process a test stopped: never left behind */

static void fini(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = 0;
	}
	tu_index_remove(name, &w);
}

TestSuite(attack, .init = init, .fini = fini);

/* The registry object readers write: "/NAME.reg.K" for the K the index header names, else
 * for the highest K up to 8 that exists, else "/NAME" (where the layout before the fix kept
 * it). */
static const char *registry_path(void)
{
	static char path[128];
	char p[128];

	snprintf(path, sizeof(path), "/%s", name);
	struct kvidx_idx_hdr ih;
	int fd = shm_open(path, O_RDONLY, 0);
	bool named = fd >= 0 && pread(fd, &ih, sizeof(ih), 0) == (ssize_t)sizeof(ih) &&
		     ih.ih_magic == KV_IDX_MAGIC && ih.ih_reg_gen;
	if (fd >= 0)
		close(fd);
	if (named) { /* the one the index header names */
		snprintf(path, sizeof(path), "/%s.reg.%llu", name, (unsigned long long)ih.ih_reg_gen);
		return path;
	}
	for (int k = 1; k <= 8; k++) {
		snprintf(p, sizeof(p), "/dev/shm/%s.reg.%d", name, k);
		if (access(p, F_OK) == 0)
			snprintf(path, sizeof(path), "/%s.reg.%d", name, k);
	}
	return path;
}

static void reg_write(off_t off, const void *buf, size_t n)
{
	int fd = shm_open(registry_path(), O_RDWR, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, buf, n, off), (ssize_t)n);
	close(fd);
}

static void reg_truncate(off_t len)
{
	int fd = shm_open(registry_path(), O_RDWR, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, len), 0);
	close(fd);
}

static struct kvidx *open_writer(uint32_t stall_ms)
{
	struct kvidx_writer_opts o = { .name = name,
				       .geo = { .capacity = 200, .pods_per_key = 2, .max_pods = 4,
						.max_readers = 4 },
				       .stall_ms = stall_ms };
	struct kvidx *x = kvidx_writer_open(&o);

	cr_assert_not_null(x, "writer open: %s", kvidx_strerror(-errno));
	cr_assert_eq(kvidx_pod_add(x, "10.9.9.9:8000", NULL), 0);
	cr_assert_eq(kvidx_store(x, 0, keys, NKEYS, KVIDX_TIER_GPU, kvidx_now_ns()), NKEYS);
	return x;
}

/* A fresh reader finds every stored key. */
static void assert_serves(const char *what)
{
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_rec rec[2];
	int found = 0;

	cr_assert_not_null(r, "%s: reader open: %s", what, kvidx_strerror(-errno));
	for (int i = 0; i < NKEYS; i++)
		found += kvidx_lookup(r, keys[i], rec, 2) == 1;
	cr_assert_eq(found, NKEYS, "%s: %d of %d keys found", what, found, NKEYS);
	kvidx_reader_close(r);
}

/* The writer is gone (as if killed); a new one must take the index over. */
static void assert_takeover(const char *what)
{
	kvidx_writer_close(w, false);
	w = NULL;
	struct kvidx_writer_opts o = { .name = name,
				       .geo = { .capacity = 200, .pods_per_key = 2, .max_pods = 4,
						.max_readers = 4 } };
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w, "%s: takeover refused: %s", what, kvidx_strerror(-errno));
	cr_assert_eq(kvidx_pod_add(w, "10.9.9.9:8000", NULL), 0);
	cr_assert_eq(kvidx_store(w, 0, keys, NKEYS, KVIDX_TIER_GPU, kvidx_now_ns()), NKEYS);
	kvidx_writer_tick(w, kvidx_now_ns());
	assert_serves(what);
}

/* A reader truncates the registry under a running writer: the writer must not die of
 * SIGBUS, must give readers a registry again, and a successor must be able to take over. */
Test(attack, truncated_registry)
{
	w = open_writer(1000);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	uint64_t now = kvidx_now_ns();
	kvidx_writer_tick(w, now);
	reg_truncate(0);
	/* Every writer call that touches the registry, after the truncation. */
	kvidx_remove(w, 0, keys, 10, 0);
	kvidx_writer_tick(w, now + 1 * NS_MS);
	kvidx_drain(w, 100, &(struct kvidx_drain_ops){ 0 });
	kvidx_writer_idle(w, true);
	kvidx_writer_idle(w, false);
	kvidx_writer_tick(w, now + 200 * NS_MS);
	cr_assert_eq(kvidx_store(w, 0, keys, 10, KVIDX_TIER_GPU, now), 10);
	/* The reader that was attached moves to the new registry by itself. */
	struct kvidx_rec rec[2];
	int rc = kvidx_lookup(r, keys[0], rec, 2);
	if (rc == -KVIDX_ERETRY)
		rc = kvidx_lookup(r, keys[0], rec, 2);
	cr_assert_eq(rc, 1, "the attached reader: %s", kvidx_strerror(rc));
	kvidx_reader_close(r);
	assert_serves("after the truncation");
	/* Half a registry, then a takeover of the damaged index. */
	reg_truncate(4096);
	assert_takeover("truncated to 4096 bytes");
	reg_truncate(0);
	assert_takeover("truncated to 0 bytes");
}

/* A reader scribbles over the registry's header: readers must still be able to attach (the
 * writer repairs it), and a successor must be able to take over. */
Test(attack, scribbled_registry_header)
{
	uint8_t junk[128];

	w = open_writer(1000);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	reg_write(0, junk, sizeof(junk));
	kvidx_writer_tick(w, kvidx_now_ns() + 200 * NS_MS);
	assert_serves("after the header was scribbled");
	reg_write(0, junk, sizeof(junk));
	assert_takeover("scribbled header");
}

/* Root (or the writer's own user) scribbles the index header /NAME: a successor rebuilds. */
Test(attack, scribbled_index_header)
{
	uint8_t junk[256];
	char path[128];

	w = open_writer(1000);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 53 + 5);
	snprintf(path, sizeof(path), "/%s", name);
	int fd = shm_open(path, O_RDWR, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	close(fd);
	assert_takeover("scribbled index header");
}

/* Offset of the epoch word in the layout before the fix (ch_epoch, in the registry). */
#define OLD_CH_EPOCH 72

/*
 * A reader sets the registry's epoch word to UINT64_MAX and the writer restarts. The old
 * writer took its epoch from there: the next one wrapped to 0, which means "quiescent", and a
 * reader inside a section was not waited for. The oracle: entries retired while the only
 * reader is inside a read-side section must not be reclaimed before the section ends.
 */
static struct kvidx_reader *walk_r;
static int walk_calls;
static uint64_t reclaimed_in_section;

static void in_section(void *arg, uint64_t key, const struct kvidx_rec *recs, int n)
{
	(void)arg;
	(void)key;
	(void)recs;
	(void)n;
	if (walk_calls++)
		return;
	const struct kvidx_stats *st = kv_writer_stats(w);
	uint64_t r0 = st->reclaimed, now = kvidx_now_ns();
	cr_assert_eq(kvidx_remove(w, 0, keys, NKEYS, 0), NKEYS);
	for (int i = 1; i <= 5; i++)
		kvidx_writer_tick(w, now + (uint64_t)i * NS_MS);
	reclaimed_in_section = st->reclaimed - r0;
}

Test(attack, epoch_wrap)
{
	uint64_t max = UINT64_MAX;

	w = open_writer(1000);
	reg_write(OLD_CH_EPOCH, &max, sizeof(max));
	kvidx_writer_close(w, false);
	w = open_writer(1000);
	kvidx_writer_tick(w, kvidx_now_ns()); /* the old writer's epoch wrapped to 0 here */
	walk_r = kvidx_reader_open(name);
	cr_assert_not_null(walk_r);
	int64_t n = kv_reader_walk(walk_r, 0, 1024, kvidx_now_ns(), in_section, NULL);
	cr_assert_geq(n, 1, "walk: %lld", (long long)n);
	cr_assert_eq(reclaimed_in_section, 0,
		     "%llu entries retired during a reader's section were reclaimed in it",
		     (unsigned long long)reclaimed_in_section);
	/* Once the section is over, they are reclaimed. */
	uint64_t now = kvidx_now_ns();
	kvidx_writer_tick(w, now + 10 * NS_MS);
	kvidx_writer_tick(w, now + 11 * NS_MS);
	cr_assert_geq(kv_writer_stats(w)->reclaimed, NKEYS);
	kvidx_reader_close(walk_r);
	assert_takeover("epoch set to UINT64_MAX");
}

/*
 * A reader that keeps announcing different old epochs: the old writer restarted the stall
 * timer whenever the announced value changed, so it was never expelled and nothing retired
 * was ever reclaimed. Stall detection is about not reaching the current epoch in time.
 */
Test(attack, changing_old_epochs_expelled)
{
	w = open_writer(50);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	struct kvidx_reader_slot *rs = tu_reader_slot(r);
	uint64_t t = kvidx_now_ns();
	for (int i = 0; i < 5; i++)
		kvidx_writer_tick(w, t + (uint64_t)i * NS_MS); /* epoch well above 2 */
	const struct kvidx_stats *st = kv_writer_stats(w);
	cr_assert_eq(kvidx_remove(w, 0, keys, NKEYS, 0), NKEYS);
	for (int i = 0; i < 40; i++) {
		__atomic_store_n(&rs->rs_ctr, (uint64_t)(1 + i % 2), __ATOMIC_SEQ_CST);
		kvidx_writer_tick(w, t + (uint64_t)(10 + 10 * i) * NS_MS);
	}
	cr_assert_geq(st->readers_expelled, 1, "a reader announcing old epochs was never expelled");
	cr_assert_geq(st->reclaimed, NKEYS, "reclamation stopped: %llu reclaimed",
		      (unsigned long long)st->reclaimed);
	/* The expelled reader finds out and re-registers by itself. */
	__atomic_store_n(&rs->rs_ctr, 0, __ATOMIC_SEQ_CST);
	struct kvidx_rec rec[2];
	int rc = kvidx_lookup(r, keys[0], rec, 2);
	if (rc == -KVIDX_ERETRY)
		rc = kvidx_lookup(r, keys[0], rec, 2);
	cr_assert_geq(rc, 0);
	kvidx_reader_close(r);
	assert_takeover("after an expulsion");
}

/* An announcement from the future (above the current epoch) must not count as "passed". */
Test(attack, future_epoch_is_not_quiescent)
{
	w = open_writer(1000);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	struct kvidx_reader_slot *rs = tu_reader_slot(r);
	const struct kvidx_stats *st = kv_writer_stats(w);
	uint64_t t = kvidx_now_ns();
	/* The reader is "inside a section" with an announcement no writer ever made. */
	__atomic_store_n(&rs->rs_ctr, UINT64_MAX, __ATOMIC_SEQ_CST);
	cr_assert_eq(kvidx_remove(w, 0, keys, NKEYS, 0), NKEYS);
	for (int i = 1; i <= 5; i++)
		kvidx_writer_tick(w, t + (uint64_t)i * NS_MS);
	cr_assert_eq(st->reclaimed, 0, "reclaimed under a reader announcing UINT64_MAX");
	/* Past the stall limit it is expelled, and reclamation goes on. */
	kvidx_writer_tick(w, t + 1100 * NS_MS);
	kvidx_writer_tick(w, t + 1200 * NS_MS);
	kvidx_writer_tick(w, t + 1201 * NS_MS);
	cr_assert_geq(st->readers_expelled, 1);
	cr_assert_geq(st->reclaimed, NKEYS);
	kvidx_reader_close(r);
}

/*
 * Issue 24, fault 1: a reader stopped (SIGSTOP) inside a read-side section while a member of
 * the group truncates the registry and the writer replaces it. Before the fix the hold after
 * the replacement kept only entries retired at or after the hold epoch (the 2048 retired
 * just before were reclaimed and reused within ~150 ms), and the expulsion of the old
 * registry's readers went into the private zero pages of the writer's guard: the reader's
 * walk came back with success over reused memory. Now nothing retired before the replacement
 * is reused for one stall limit, and the stopped reader gets -KVIDX_ERETRY.
 */
#define REPL_KEYS 2048

static void stop_inside(void *arg, uint64_t key, const struct kvidx_rec *recs, int n)
{
	int *calls = arg;

	(void)key;
	(void)recs;
	(void)n;
	if ((*calls)++ == 0)
		raise(SIGSTOP); /* inside the section: the parent plays the attack now */
}

/* The child: walks the first slots of the table, stopping itself inside the section.
 * Exit 0: -KVIDX_ERETRY (right); 1: success over what may be reused memory; 2: other. */
static void reader_child(void)
{
	struct kvidx_reader *r = kvidx_reader_open(name);
	int calls = 0;

	if (!r)
		_exit(2);
	int64_t n = kv_reader_walk(r, 0, 1024, kvidx_now_ns(), stop_inside, &calls);
	_exit(n == -KVIDX_ERETRY ? 0 : calls > 0 && n > 0 ? 1 : 2);
}

static struct kvidx *open_big_writer(uint32_t stall_ms)
{
	struct kvidx_writer_opts o = { .name = name,
				       .geo = { .capacity = 4 * REPL_KEYS, .pods_per_key = 2,
						.max_pods = 4, .max_readers = 8 },
				       .stall_ms = stall_ms };
	struct kvidx *x = kvidx_writer_open(&o);

	cr_assert_not_null(x, "writer open: %s", kvidx_strerror(-errno));
	cr_assert_eq(kvidx_pod_add(x, "10.9.9.9:8000", NULL), 0);
	cr_assert_eq(kvidx_pod_add(x, "10.9.9.10:8000", NULL), 1);
	return x;
}

Test(attack, stopped_reader_across_registry_replacement)
{
	static uint64_t k[REPL_KEYS], other[REPL_KEYS];
	int status;

	w = open_big_writer(2000);
	for (int i = 0; i < REPL_KEYS; i++) {
		k[i] = 0x5e1ec7000000ull + (uint64_t)i * 104729;
		other[i] = 0x07e40000000ull + (uint64_t)i * 130363;
	}
	cr_assert_eq(kvidx_store(w, 0, k, REPL_KEYS, KVIDX_TIER_GPU, kvidx_now_ns()), REPL_KEYS);
	uint64_t t = kvidx_now_ns();
	kvidx_writer_tick(w, t);
	pid_t pid = child = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		reader_child();
	cr_assert_eq(waitpid(pid, &status, WUNTRACED), pid);
	cr_assert(WIFSTOPPED(status), "the reader did not stop inside its section");
	const struct kvidx_stats *st = kv_writer_stats(w);
	/* Every key's entry is replaced (retired, held by the stopped reader's announcement). */
	cr_assert_eq(kvidx_store(w, 1, k, REPL_KEYS, KVIDX_TIER_GPU, t), REPL_KEYS);
	cr_assert_geq(st->retired, REPL_KEYS, "the entries were not replaced");
	kvidx_writer_tick(w, t + 1 * NS_MS);
	uint64_t r0 = st->reclaimed, rebuilt0 = st->registry_rebuilds;
	reg_truncate(4096); /* the reader's slot survives, the rings do not */
	kvidx_drain(w, 100, &(struct kvidx_drain_ops){ 0 }); /* faults into the guard */
	kvidx_writer_tick(w, t + 2 * NS_MS);                 /* replaces the registry */
	cr_assert_eq(st->registry_rebuilds, rebuilt0 + 1, "the registry was not replaced");
	/* Well inside the stall limit: other keys take entries, many ticks pass. */
	cr_assert_eq(kvidx_store(w, 0, other, REPL_KEYS, KVIDX_TIER_GPU, t), REPL_KEYS);
	for (int i = 0; i < 20; i++)
		kvidx_writer_tick(w, t + (uint64_t)(10 + 10 * i) * NS_MS);
	cr_assert_eq(st->reclaimed, r0,
		     "%llu entries retired before the replacement were reclaimed within the "
		     "stall limit", (unsigned long long)(st->reclaimed - r0));
	cr_assert_eq(kill(pid, SIGCONT), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	child = 0;
	cr_assert(WIFEXITED(status), "the reader died (signal %d)",
		  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	cr_assert_eq(WEXITSTATUS(status), 0, "%s", WEXITSTATUS(status) == 1 ?
		     "the stopped reader's walk returned success" : "the reader failed otherwise");
	/* After one stall limit the hold ends and reclamation goes on. */
	kvidx_writer_tick(w, t + 2100 * NS_MS);
	kvidx_writer_tick(w, t + 2101 * NS_MS);
	cr_assert_geq(st->reclaimed, r0 + REPL_KEYS, "reclamation did not resume: %llu",
		      (unsigned long long)(st->reclaimed - r0));
}

/* Counts what the writer drains. */
struct drained {
	int routes, outcomes;
};

static void on_route(void *arg, const struct kvidx_route *rt, uint64_t t_ns)
{
	(void)rt;
	(void)t_ns;
	((struct drained *)arg)->routes++;
}

static void on_outcome(void *arg, const struct kvidx_outcome *o)
{
	(void)o;
	((struct drained *)arg)->outcomes++;
}

/*
 * Issue 24, fault 2: commits and outcomes follow the registry. Before the fix they went to the
 * ring of the registry the handle last entered: after a replacement, a commit made without a
 * lookup first was lost, or the reader died of SIGBUS on the truncated ring.
 */
Test(attack, commits_follow_replaced_registry)
{
	struct drained d = { 0 };
	struct kvidx_drain_ops ops = { .route = on_route, .outcome = on_outcome, .arg = &d };

	w = open_writer(1000);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	uint64_t t = kvidx_now_ns();
	kvidx_writer_tick(w, t);
	struct kvidx_route rt = { .corr_id = 1, .pod = 0, .prefill_pod = -1, .keys = keys,
				  .nkeys = 4 };
	for (int round = 0; round < 2; round++) {
		reg_truncate(round ? 0 : 4096);
		kvidx_drain(w, 100, &ops);
		kvidx_writer_tick(w, t + (uint64_t)(1 + round) * NS_MS); /* replaced */
		/* No lookup first: straight to the ring. */
		for (int i = 0; i < 3; i++) {
			rt.corr_id = (uint64_t)(round * 10 + i + 1);
			cr_assert_eq(kvidx_commit(r, &rt), 0);
			cr_assert_eq(kvidx_report_outcome(r, rt.corr_id, 0, 16, 64), 0);
		}
		cr_assert_eq(kv_reader_reg_gen(r), kv_reader_idx(r)->ih_reg_gen,
			     "the reader did not follow the registry");
		kvidx_drain(w, 100, &ops);
		cr_assert_eq(d.routes, 3 * (round + 1), "%d of %d commits drained", d.routes,
			     3 * (round + 1));
		cr_assert_eq(d.outcomes, 3 * (round + 1), "%d of %d outcomes drained", d.outcomes,
			     3 * (round + 1));
	}
	kvidx_reader_close(r);
}

/*
 * A member truncating the registry without pause (every 50 ms here, under a 200 ms stall
 * limit): each replacement holds reuse back, but a replacement during a hold does not extend
 * it, so reclamation goes on, one stall limit at a time at worst.
 */
Test(attack, truncations_do_not_stop_reclamation)
{
	w = open_writer(200);
	uint64_t t = kvidx_now_ns();
	const struct kvidx_stats *st = kv_writer_stats(w);
	kvidx_writer_tick(w, t);
	cr_assert_eq(kvidx_store(w, 0, keys, NKEYS, KVIDX_TIER_CPU, t), NKEYS);
	cr_assert_geq(st->retired, NKEYS, "the entries were not replaced");
	uint64_t r0 = st->reclaimed, b0 = st->registry_rebuilds;
	for (int i = 1; i <= 20; i++) {
		reg_truncate(i % 2 ? 4096 : 0);
		kvidx_drain(w, 100, &(struct kvidx_drain_ops){ 0 });
		kvidx_writer_tick(w, t + (uint64_t)i * 50 * NS_MS);
	}
	cr_assert_geq(st->registry_rebuilds, b0 + 10, "only %llu replacements",
		      (unsigned long long)(st->registry_rebuilds - b0));
	cr_assert_geq(st->reclaimed, r0 + NKEYS,
		      "%llu of %d retired entries reclaimed in 1 s of replacements every 50 ms",
		      (unsigned long long)(st->reclaimed - r0), NKEYS);
	assert_serves("after 20 replacements");
}

/* read(2)-family system calls of this process so far (/proc/self/io syscr). */
static uint64_t read_syscalls(void)
{
	char buf[512];
	int fd = open("/proc/self/io", O_RDONLY);
	unsigned long long v = 0;

	cr_assert_geq(fd, 0, "/proc/self/io: %s", strerror(errno));
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert_gt(n, 0);
	buf[n] = 0;
	const char *p = strstr(buf, "syscr:");
	cr_assert_not_null(p);
	sscanf(p, "syscr: %llu", &v);
	return v;
}

/*
 * Issue 24, item 5: a restart with fewer reader slots than attached readers. The reader left
 * without a slot gets -KVIDX_ENOSLOT (documented in kvidx.h), nothing read; it does not
 * re-attach from scratch at every call (open, fstat, two preads, map, a lock try per slot:
 * 5,587 attempts in 1 s were measured) but at most once every 10 ms; and it serves again as
 * soon as a slot is free. The bound on attempts scales with the time the calls took, so it
 * holds however slow the machine.
 */
Test(attack, no_slot_after_restart_is_cheap_and_recovers)
{
	struct kvidx_writer_opts o = { .name = name,
				       .geo = { .capacity = 200, .pods_per_key = 2, .max_pods = 4,
						.max_readers = 2 } };
	struct kvidx_rec rec[2];

	w = kvidx_writer_open(&o);
	cr_assert_not_null(w);
	cr_assert_eq(kvidx_pod_add(w, "10.9.9.9:8000", NULL), 0);
	struct kvidx_reader *r1 = kvidx_reader_open(name), *r2 = kvidx_reader_open(name);
	cr_assert(r1 && r2);
	kvidx_writer_close(w, false);
	o.geo.max_readers = 1; /* another reader geometry: a new registry of one slot */
	w = kvidx_writer_open(&o);
	cr_assert_not_null(w);
	cr_assert_eq(kvidx_pod_add(w, "10.9.9.9:8000", NULL), 0);
	cr_assert_eq(kvidx_store(w, 0, keys, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);
	cr_assert_eq(kvidx_lookup(r1, keys[0], rec, 2), 1);
	int rc = kvidx_lookup(r2, keys[0], rec, 2);
	cr_assert_eq(rc, -KVIDX_ENOSLOT, "the reader without a slot: %d (%s)", rc,
		     kvidx_strerror(rc));
	uint64_t t0 = kvidx_now_ns(), s0 = read_syscalls();
	for (int i = 0; i < 2000; i++) {
		rc = kvidx_lookup(r2, keys[0], rec, 2);
		cr_assert_eq(rc, -KVIDX_ENOSLOT, "call %d: %d", i, rc);
	}
	struct kvidx_route rt = { .corr_id = 1, .pod = 0, .prefill_pod = -1, .keys = keys,
				  .nkeys = 1 };
	cr_assert_eq(kvidx_commit(r2, &rt), -KVIDX_ENOSLOT);
	uint64_t reads = read_syscalls() - s0, ms = (kvidx_now_ns() - t0) / NS_MS;
	/* Each attempt preads the index header and the registry header. */
	cr_assert_leq(reads, 2 * (ms / 10 + 2),
		      "%llu read calls in %llu ms of 2001 calls: re-attaching at every call",
		      (unsigned long long)reads, (unsigned long long)ms);
	kvidx_reader_close(r1);
	uint64_t deadline = kvidx_now_ns() + 10000 * NS_MS;
	while ((rc = kvidx_lookup(r2, keys[0], rec, 2)) == -KVIDX_ENOSLOT &&
	       kvidx_now_ns() < deadline)
		usleep(1000);
	cr_assert_eq(rc, 1, "the reader did not get the freed slot: %d", rc);
	kvidx_reader_close(r2);
}

/*
 * Issue 24, item 7 (the header half): the owner (or root) scribbles the index header's first
 * line and the data header's identity while the writer runs. New readers are refused
 * (KVIDX_ECORRUPT) until the writer rewrites both from its own copy, within its next 100 ms
 * check; before, for as long as that writer lived.
 */
Test(attack, scribbled_headers_repaired_by_the_running_writer)
{
	uint8_t junk[200];
	char path[128];
	struct kvidx_open_info info;

	w = open_writer(1000);
	cr_assert_eq(kvidx_writer_open_info(w, &info), 0);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 29 + 3);
	snprintf(path, sizeof(path), "/%s", name);
	int fd = shm_open(path, O_RDWR, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, junk, 64, 0), 64);
	close(fd);
	snprintf(path, sizeof(path), "/%s.data.%llu", name, (unsigned long long)info.generation);
	fd = shm_open(path, O_RDWR, 0);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	close(fd);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_null(r, "a reader attached to a scribbled index");
	uint64_t rep0 = kv_writer_stats(w)->registry_repairs;
	kvidx_writer_tick(w, kvidx_now_ns() + 200 * NS_MS);
	cr_assert_geq(kv_writer_stats(w)->registry_repairs, rep0 + 2);
	assert_serves("after the writer rewrote both headers");
}
