/*
 * torture_util.c — helpers the stress_* torture programs share (see torture_util.h): sleeping,
 * cleaning up an index's shared-memory objects and the forked children, and reporting the
 * first violation of a run whichever process finds it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
