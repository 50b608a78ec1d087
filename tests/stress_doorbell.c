/*
 * stress_doorbell.c — the commit doorbell (issue 10, item 6), through the public writer API
 * only (kvidx_writer_doorbell(), kvidx_writer_idle(), kvidx_drain()), so that the same program
 * measures any implementation of it.
 *
 * The parent runs ingestd's loop shape: announce idle, poll the doorbell descriptor with a long
 * timeout (200 ms, so that only the doorbell can wake it in time), clear idle, drain. Phases:
 *
 *   1. latency: a reader process commits a route every 1-3 ms (after the writer has gone idle);
 *      the writer takes commit -> drained latency (CLOCK_MONOTONIC is system-wide). Reported as
 *      percentiles; a commit drained only after a poll timeout counts as a missed wake-up.
 *   2. squatter: a process of the same host binds the old abstract doorbell name
 *      ("\0kvidx-doorbell-NAME") before the writer starts; the doorbell must still work and
 *      the squatter must receive nothing.
 *   3. another network namespace: the committing reader first unshare(CLONE_NEWNET)s (needs
 *      root; skipped otherwise); its wake-ups must still arrive.
 *   4. spam (layout 3 and later, where the doorbell is the registry's futex word): a hostile
 *      reader bumps the word and FUTEX_WAKEs without pause while the writer idles; the writer
 *      must wake at most about 20,000 times a second (the helper's limit, with slack) and
 *      honest commits must still be drained on wake-ups.
 *
 *   5. truncations (issue 24, fault 3): a member of the group truncates the current registry
 *      every 20 ms (to 4096 bytes, then to 0, alternately) while the writer runs ingestd's
 *      loop with the doorbell on and a 2 ms tick; every truncation makes the writer replace
 *      the registry, which stops and restarts the doorbell helper. Reported: replacements and
 *      the worst kvidx_writer_tick(). The helper's wake used to land on the guard's private
 *      zero page, so the tick sat out the helper's 100 ms timeout (98.5 ms measured); fails if
 *      the worst tick reaches 50 ms (the figure is the point; the bound only catches that).
 *
 * Fails (exit 1) on a missed wake-up in any phase or a byte received by the squatter.
 * Usage: stress_doorbell --seconds N
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/futex.h>
#include <sys/syscall.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "layout.h"
#include "segment.h"
#include "telemetry.h"
#include "torture_util.h"

#define NS_MS 1000000ull
#define MAXS 100000

static char name[KVIDX_NAME_MAX];
static unsigned seconds = 10;

struct shared {
	uint32_t go, stop, commits;
	uint64_t rings;
};
static struct shared *sh;

struct acc {
	uint64_t lat[MAXS];
	size_t n;
	uint64_t missed; /* drained after a poll timeout */
};
static struct acc acc;
static int woke_by_timeout;

static void on_route(void *arg, const struct kvidx_route *rt, uint64_t commit_ns)
{
	uint64_t now = kvidx_now_ns();

	(void)arg;
	(void)rt;
	if (woke_by_timeout)
		acc.missed++;
	else if (acc.n < MAXS)
		acc.lat[acc.n++] = now - commit_ns;
}

static void __attribute__((noreturn)) die(const char *msg)
{
	fprintf(stderr, "stress_doorbell: FAIL: %s\n", msg);
	tt_unlink_index(name);
	exit(1);
}

#ifdef KV_IDX_MAGIC
/* The hostile reader: rings the doorbell word as fast as it can until stop. */
static void __attribute__((noreturn)) spammer(void)
{
	struct kvidx_reader *r = kvidx_reader_open(name);
	if (!r)
		_exit(4);
	uint32_t *bell = (uint32_t *)&kv_reader_ctl(r)->ch_bell;
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		tt_sleep_us(100);
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		__atomic_add_fetch(bell, 1, __ATOMIC_RELAXED);
		syscall(SYS_futex, bell, FUTEX_WAKE, 1, NULL, NULL, 0);
		__atomic_add_fetch(&sh->rings, 1, __ATOMIC_RELAXED);
	}
	kvidx_reader_close(r);
	_exit(0);
}
#endif

/* The hostile member: truncates the registry the index header names every 20 ms. */
static void __attribute__((noreturn)) truncator(void)
{
	char path[KV_SHM_PATH_MAX];
	struct kvidx_idx_hdr ih;
	unsigned n = 0;

	snprintf(path, sizeof(path), "/%s", name);
	int ifd = shm_open(path, O_RDONLY, 0);
	if (ifd < 0)
		_exit(4);
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		tt_sleep_us(100);
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		tt_sleep_us(20000);
		if (pread(ifd, &ih, sizeof(ih), 0) != (ssize_t)sizeof(ih))
			continue;
		snprintf(path, sizeof(path), "/%s.reg.%llu", name,
			 (unsigned long long)ih.ih_reg_gen);
		int fd = shm_open(path, O_RDWR, 0);
		if (fd < 0)
			continue;
		if (ftruncate(fd, n++ % 2 ? 0 : 4096) == 0)
			__atomic_add_fetch(&sh->rings, 1, __ATOMIC_RELAXED);
		close(fd);
	}
	_exit(0);
}

/* Phase 5: the writer loop under truncations; returns 0, or dies. */
static int phase_truncate(unsigned secs)
{
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 1024, .max_readers = 8 } };
	struct kvidx_drain_ops ops = { .route = on_route };
	struct kvidx *w = kvidx_writer_open(&o);

	if (!w)
		die("kvidx_writer_open");
	memset(sh, 0, sizeof(*sh));
	int fd = kvidx_writer_doorbell(w);
	if (fd < 0)
		die("no doorbell");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		truncator();
	uint64_t worst = 0, ticks = 0, slow = 0, sum = 0;
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	uint64_t end = kvidx_now_ns() + secs * 1000000000ull;
	while (kvidx_now_ns() < end) {
		uint64_t t = kvidx_now_ns();
		kvidx_writer_tick(w, t);
		uint64_t d = kvidx_now_ns() - t;
		worst = d > worst ? d : worst;
		sum += d;
		ticks++;
		slow += d >= NS_MS;
		if (!kvidx_writer_idle(w, true)) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			poll(&p, 1, 2);
		}
		kvidx_writer_idle(w, false);
		kvidx_drain(w, 4096, &ops);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	int st;
	waitpid(pid, &st, 0);
	uint64_t rebuilt = kv_writer_stats(w)->registry_rebuilds;
	kvidx_writer_close(w, true);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("the truncator failed");
	printf("stress_doorbell: truncate: truncations=%llu registry_rebuilds=%llu ticks=%llu "
	       "mean_tick_us=%.1f worst_tick_us=%.1f ticks_over_1ms=%llu\n",
	       (unsigned long long)sh->rings, (unsigned long long)rebuilt,
	       (unsigned long long)ticks, ticks ? sum / 1e3 / (double)ticks : 0, worst / 1e3,
	       (unsigned long long)slow);
	if (!rebuilt)
		die("no truncation made the writer replace the registry");
	if (worst >= 50 * NS_MS)
		die("a tick under truncations took 50 ms or more (the doorbell helper's stop)");
	return 0;
}

/* The committing reader: waits for go, then commits every 1-3 ms until stop. */
static void __attribute__((noreturn)) committer(bool netns)
{
	uint64_t rng = (uint64_t)getpid();

	if (netns && unshare(CLONE_NEWNET) < 0)
		_exit(3);
	struct kvidx_reader *r = kvidx_reader_open(name);
	if (!r)
		_exit(4);
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		tt_sleep_us(100);
	uint64_t key = 1;
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		struct kvidx_route rt = { .corr_id = key, .pod = 0, .prefill_pod = -1, .keys = &key,
					  .nkeys = 1 };
		key++;
		if (kvidx_commit(r, &rt) == 0)
			__atomic_add_fetch(&sh->commits, 1, __ATOMIC_RELAXED);
		tt_sleep_us(1000 + tt_rnd_below(&rng, 2000));
	}
	kvidx_reader_close(r);
	_exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One phase: a writer loop for secs seconds with one committer. Returns 0 or -1 (no doorbell). */
static int phase(const char *what, unsigned secs, bool netns, int squat_fd, bool spam)
{
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 1024, .max_readers = 8 } };
	struct kvidx_drain_ops ops = { .route = on_route };
	struct kvidx *w = kvidx_writer_open(&o);

	if (!w)
		die("kvidx_writer_open");
	if (kvidx_pod_add(w, "10.0.0.1:8000", NULL) != 0)
		die("kvidx_pod_add");
	memset(&acc, 0, sizeof(acc));
	memset(sh, 0, sizeof(*sh));
	int fd = kvidx_writer_doorbell(w);
	if (fd < 0) {
		printf("stress_doorbell: %s: no doorbell (%s)\n", what, strerror(-fd));
		kvidx_writer_close(w, true);
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		committer(netns);
	pid_t spid = -1;
#ifdef KV_IDX_MAGIC
	if (spam && (spid = fork()) == 0)
		spammer();
#endif
	uint64_t wakes = 0, t0 = kvidx_now_ns();
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	uint64_t end = kvidx_now_ns() + secs * 1000000000ull, last_tick = 0;
	while (kvidx_now_ns() < end) {
		uint64_t now = kvidx_now_ns();
		if (now - last_tick > NS_MS) {
			kvidx_writer_tick(w, now);
			last_tick = now;
		}
		woke_by_timeout = 0;
		if (!kvidx_writer_idle(w, true)) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			woke_by_timeout = poll(&p, 1, 200) == 0;
			wakes += !woke_by_timeout;
		}
		kvidx_writer_idle(w, false);
		kvidx_drain(w, 4096, &ops);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	int st;
	double wps = (double)wakes * 1e9 / (double)(kvidx_now_ns() - t0);
	if (spid > 0)
		waitpid(spid, NULL, 0);
	waitpid(pid, &st, 0);
	woke_by_timeout = 0;
	kvidx_drain(w, 4096, &ops);
	kvidx_writer_close(w, true);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
			printf("stress_doorbell: %s: skipped (unshare: not permitted)\n", what);
			return 0;
		}
		die("the committer failed");
	}
	char b[64];
	ssize_t got = squat_fd >= 0 ? recv(squat_fd, b, sizeof(b), MSG_DONTWAIT) : -1;
	qsort(acc.lat, acc.n, sizeof(acc.lat[0]), cmp_u64);
	printf("stress_doorbell: %s: commits=%u drained_on_wake=%zu missed_wakeups=%llu "
	       "p50_us=%.1f p99_us=%.1f max_us=%.1f%s\n",
	       what, sh->commits, acc.n, (unsigned long long)acc.missed,
	       acc.n ? acc.lat[acc.n / 2] / 1e3 : 0, acc.n ? acc.lat[acc.n * 99 / 100] / 1e3 : 0,
	       acc.n ? acc.lat[acc.n - 1] / 1e3 : 0,
	       squat_fd >= 0 ? (got > 0 ? " squatter_received=yes" : " squatter_received=no") : "");
	if (spam)
		printf("stress_doorbell: %s: spammer rang %llu times, writer woke %.0f times/s\n",
		       what, (unsigned long long)sh->rings, wps);
	if (spam && wps > 25000)
		die("the spammer made the writer wake more than 25,000 times a second");
	if (acc.missed)
		die("commits waited for a poll timeout: a wake-up was lost");
	if (!acc.n)
		die("no commit was drained");
	if (got > 0)
		die("the squatter received wake-ups");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "seconds", required_argument, 0, 's' },
					    { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 } };
	int ch, bad = 0;

	while ((ch = getopt_long(argc, argv, "s:h", lo, NULL)) != -1) {
		if (ch == 's') {
			char *end;
			unsigned long v;
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || v > 86400) {
				fprintf(stderr, "stress_doorbell: bad --seconds '%s': expected a "
						"whole number of seconds up to 86400\n",
					optarg);
				return 2;
			}
			seconds = (unsigned)v;
		} else if (ch == 'h') {
			printf("usage: stress_doorbell --seconds N\n");
			return 0;
		} else
			return 2;
	}
	if (seconds < 3)
		seconds = 3;
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(name, sizeof(name), "bell-%d", (int)getpid());
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die("mmap");
	alarm(seconds + 60);
	unsigned each = seconds / 4 ? seconds / 4 : 1;

	bad |= phase("latency", each, false, -1, false) < 0;

	/* The old doorbell's abstract name, taken before the writer starts. */
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "kvidx-doorbell-%s", name);
	int sq = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sq < 0 || bind(sq, (struct sockaddr *)&a,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) < 0)
		die("binding the squatter");
	bad |= phase("squatter", each, false, sq, false) < 0;
	close(sq);

	bad |= phase("netns", each, true, -1, false) < 0;
#ifdef KV_IDX_MAGIC
	bad |= phase("spam", each, false, -1, true) < 0;
	phase_truncate(each);
#endif
	tt_unlink_index(name);
	if (bad)
		die("no doorbell in some phase");
	printf("stress_doorbell: OK secs=%u\n", seconds);
	return 0;
}
