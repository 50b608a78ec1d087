/*
 * torture_util.h — what the stress_* torture programs share: the splitmix64 random numbers,
 * short sleeps, mapping and removing an index's shared-memory objects, killing and reaping the
 * forked children, the supervisor's bound on the whole run's time, and the first-violation-wins
 * failure report that children post through the run's shared region.
 */
#ifndef KVIDX_TORTURE_UTIL_H
#define KVIDX_TORTURE_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Where a child leaves the run's first violation; it lives in the shared anonymous region. */
struct tt_failbox {
	uint32_t claim, set;
	char msg[1024];
};

/* The splitmix64 finalizer: a well-mixed 64-bit word from any 64-bit word. */
static inline uint64_t tt_splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The next random word of the splitmix64 stream whose state is *s. */
static inline uint64_t tt_rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return tt_splitmix64(*s);
}

/* A random number below n (n > 0). */
static inline uint32_t tt_rnd_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(tt_rnd(s) % n);
}

void tt_sleep_us(unsigned us);
void tt_unlink_index(const char *name);
void *tt_map_shm(const char *path, bool rw, size_t *size, const char **what);
void tt_kill_children(const pid_t *pids, unsigned n, bool reap);
bool tt_fail_posted(struct tt_failbox *box);
int tt_reap(pid_t pid, const char *what, bool block, struct tt_failbox *box, unsigned hang_s,
	    char *why, size_t len);
void tt_time_bound(const char *prog, unsigned seconds, const pid_t *pids, const unsigned *n,
		   const char *const *indexes);
void tt_fail_report(struct tt_failbox *box, const char *prog, const char *who, const char *fmt,
		    va_list ap);

#endif
