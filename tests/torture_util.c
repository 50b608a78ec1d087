/*
 * torture_util.c — helpers the stress_* torture programs share (see torture_util.h): sleeping,
 * mapping and cleaning up an index's shared-memory objects, killing and reaping the forked
 * children, bounding a run's time, and reporting the first violation of a run whichever
 * process finds it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "segment.h"
#include "torture_util.h"

/* Sleeps for us microseconds (an interrupted sleep is cut short). */
void tt_sleep_us(unsigned us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/*
 * Removes the shared-memory objects of index name: its data generations (up to 64) and the
 * registry.
 * An empty name (no index made yet) does nothing.
 */
void tt_unlink_index(const char *name)
{
	char path[KV_SHM_PATH_MAX];

	if (!name[0])
		return;
	/* Registries past 64 (a run whose registry was replaced many times): the one the index
	 * header names, and the 64 before it. */
	kv_ctl_shm_name(path, name);
	int fd = shm_open(path, O_RDONLY, 0);
	struct kvidx_idx_hdr ih;
	if (fd >= 0 && pread(fd, &ih, sizeof(ih), 0) == (ssize_t)sizeof(ih) && ih.ih_reg_gen > 64)
		for (uint64_t k = ih.ih_reg_gen - 64; k <= ih.ih_reg_gen + 1; k++) {
			kv_reg_shm_name(path, name, k);
			shm_unlink(path);
		}
	if (fd >= 0)
		close(fd);
	for (unsigned g = 1; g <= 64; g++) {
		kv_data_shm_name(path, name, g);
		shm_unlink(path);
		kv_reg_shm_name(path, name, g);
		shm_unlink(path);
	}
	kv_lock_shm_name(path, name);
	shm_unlink(path);
	kv_ctl_shm_name(path, name);
	shm_unlink(path);
}

/*
 * Maps the whole of shm object path ("/..."), read-write if rw, else read-only; *size (when
 * not NULL) gets its size. Returns NULL with errno set and *what naming the call that failed
 * ("shm_open", "fstat" or "mmap"), for the caller's failure report.
 */
void *tt_map_shm(const char *path, bool rw, size_t *size, const char **what)
{
	struct stat sb;
	int fd = shm_open(path, rw ? O_RDWR : O_RDONLY, 0), e;
	void *p;

	if (fd < 0) {
		*what = "shm_open";
		return NULL;
	}
	if (fstat(fd, &sb) < 0) {
		e = errno;
		close(fd);
		errno = e;
		*what = "fstat";
		return NULL;
	}
	p = mmap(NULL, (size_t)sb.st_size, rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd,
		 0);
	e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		errno = e;
		*what = "mmap";
		return NULL;
	}
	if (size)
		*size = (size_t)sb.st_size;
	return p;
}

/*
 * SIGKILLs the n children in pids (0 marks a free entry) and, if reap is set, waits for each.
 * Without reap it is safe in a signal handler.
 */
void tt_kill_children(const pid_t *pids, unsigned n, bool reap)
{
	for (unsigned i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGKILL);
	if (!reap)
		return;
	for (unsigned i = 0; i < n; i++)
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
}

/*
 * Reaps child pid, named what, if it has exited (block: waits until it does). Returns 0 if it
 * still runs, 1 if it exited with status 0, and -1 with the failure in why (len bytes) if
 * waitpid failed, a child posted a violation to box, or pid died of a signal (SIGALRM: hung,
 * when the child arms an alarm of hang_s seconds; 0 for none) or exited non-zero.
 */
int tt_reap(pid_t pid, const char *what, bool block, struct tt_failbox *box, unsigned hang_s,
	    char *why, size_t len)
{
	int st;
	pid_t r = waitpid(pid, &st, block ? 0 : WNOHANG);

	if (r == 0)
		return 0;
	if (r < 0)
		snprintf(why, len, "waitpid(%s %d): %s", what, (int)pid, strerror(errno));
	else if (tt_fail_posted(box))
		snprintf(why, len, "%s failed", what);
	else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM && hang_s)
		snprintf(why, len, "%s (pid %d) hung (no progress for %u s): signal %d (%s)", what,
			 (int)pid, hang_s, WTERMSIG(st), strsignal(WTERMSIG(st)));
	else if (WIFSIGNALED(st))
		snprintf(why, len, "%s (pid %d) died of signal %d (%s)", what, (int)pid,
			 WTERMSIG(st), strsignal(WTERMSIG(st)));
	else if (WEXITSTATUS(st) != 0)
		snprintf(why, len, "%s (pid %d) exited with status %d", what, (int)pid,
			 WEXITSTATUS(st));
	else
		return 1;
	return -1;
}

/* What tt_time_bound()'s SIGALRM handler reports and cleans up. */
static struct {
	char msg[128];
	size_t len;
	const pid_t *pids;
	const unsigned *n;
	const char *const *indexes;
} bound;

static void on_time_bound(int sig)
{
	(void)sig;
	if (write(2, bound.msg, bound.len) < 0) {
	}
	tt_kill_children(bound.pids, *bound.n, false);
	for (const char *const *ix = bound.indexes; ix && *ix; ix++)
		tt_unlink_index(*ix);
	_exit(3);
}

/*
 * Bounds the supervisor's run to seconds from now: if it still runs then, SIGALRM prints
 * "prog: FAIL: supervisor: run exceeded its time bound", kills the *n children of pids,
 * removes the indexes named in the NULL-terminated list indexes (NULL: none), all read when
 * the alarm fires, and exits with status 3. Forked children do not inherit the alarm.
 */
void tt_time_bound(const char *prog, unsigned seconds, const pid_t *pids, const unsigned *n,
		   const char *const *indexes)
{
	int len = snprintf(bound.msg, sizeof(bound.msg),
			   "%s: FAIL: supervisor: run exceeded its time bound\n", prog);

	bound.len = len < 0 ? 0 : (size_t)len < sizeof(bound.msg) ? (size_t)len :
								   sizeof(bound.msg) - 1;
	bound.pids = pids;
	bound.n = n;
	bound.indexes = indexes;
	signal(SIGALRM, on_time_bound);
	alarm(seconds);
}

/* Whether a child has posted a violation to box. */
bool tt_fail_posted(struct tt_failbox *box)
{
	return __atomic_load_n(&box->set, __ATOMIC_ACQUIRE);
}

/*
 * Reports a violation as "who (pid N): message". A child (who is not "supervisor") posts it to
 * box, unless another child got there first, and exits with status 2. The supervisor prints
 * "prog: FAIL: " and the posted message if there is one, else its own, and returns so that its
 * caller can clean up and exit. box may be NULL before the shared region exists.
 */
void tt_fail_report(struct tt_failbox *box, const char *prog, const char *who, const char *fmt,
		    va_list ap)
{
	char msg[sizeof(box->msg)];
	int n;

	n = snprintf(msg, sizeof(msg), "%s (pid %d): ", who, (int)getpid());
	vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	if (box && strcmp(who, "supervisor") != 0) {
		if (__atomic_exchange_n(&box->claim, 1, __ATOMIC_SEQ_CST) == 0) {
			memcpy(box->msg, msg, sizeof(msg));
			__atomic_store_n(&box->set, 1, __ATOMIC_RELEASE);
		}
		_exit(2);
	}
	if (box && tt_fail_posted(box))
		fprintf(stderr, "%s: FAIL: %s\n", prog, box->msg);
	else
		fprintf(stderr, "%s: FAIL: %s\n", prog, msg);
}
