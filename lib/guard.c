/*
 * guard.c — the writer's SIGBUS guard (guard.h): a table of guarded ranges and one SIGBUS
 * handler for the process.
 *
 * Concurrency model:
 *
 *  1. The table is changed under a mutex (kv_guard_add(), kv_guard_del()); the handler reads
 *     it without one. An entry is published by a release store of its base after its length
 *     and flag are set, and retired by storing base 0 first; the handler loads base with
 *     acquire (pairs with those stores), then length and flag.
 *  2. The handler calls only mmap(), which is async-signal-safe in practice (one system call),
 *     and sigaction() to fall back to the default action.
 *  3. The zero pages are MAP_PRIVATE anonymous: what the writer stores there afterwards is
 *     seen by no one, which is what a range it no longer trusts deserves.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "atomics.h"
#include "guard.h"

struct guard {
	uintptr_t base; /* 0: free */
	size_t len;
	uint32_t *hit;
};

static struct guard table[KV_GUARD_MAX];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction prev;
static int installed;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	for (unsigned i = 0; i < KV_GUARD_MAX; i++) {
		/* Rule 1: pairs with the release stores of base in kv_guard_add() and
		 * kv_guard_del(). */
		uintptr_t b = ld_acquire(&table[i].base);
		size_t len = ld_relaxed(&table[i].len);
		if (!b || a < b || a - b >= len)
			continue;
		if (mmap((void *)b, len, PROT_READ | PROT_WRITE,
			 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
			break;
		st_relaxed(ld_relaxed(&table[i].hit), 1);
		return; /* the access is retried on the zero pages */
	}
	/* Not ours: what was there before. */
	if (prev.sa_flags & SA_SIGINFO) {
		if (prev.sa_sigaction) {
			prev.sa_sigaction(sig, si, uc);
			return;
		}
	} else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
		prev.sa_handler(sig);
		return;
	}
	/* Default action: the fault repeats on return and kills the process with SIGBUS. */
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(SIGBUS, &dfl, NULL);
}

int kv_guard_add(void *base, size_t len, uint32_t *hit)
{
	int rc = -ENOSPC;

	pthread_mutex_lock(&table_lock);
	if (!installed) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &prev) < 0) {
			rc = -errno;
			goto out;
		}
		installed = 1;
	}
	for (unsigned i = 0; i < KV_GUARD_MAX; i++) {
		if (ld_relaxed(&table[i].base))
			continue;
		st_relaxed(&table[i].len, len);
		st_relaxed(&table[i].hit, hit);
		/* Rule 1: pairs with the acquire load of base in on_sigbus(). */
		st_release(&table[i].base, (uintptr_t)base);
		rc = 0;
		break;
	}
out:
	pthread_mutex_unlock(&table_lock);
	return rc;
}

void kv_guard_del(void *base)
{
	pthread_mutex_lock(&table_lock);
	for (unsigned i = 0; i < KV_GUARD_MAX; i++) {
		/* Rule 1: pairs with the acquire load of base in on_sigbus(), which then skips
		 * the entry. */
		if (ld_relaxed(&table[i].base) == (uintptr_t)base)
			st_release(&table[i].base, (uintptr_t)0);
	}
	pthread_mutex_unlock(&table_lock);
}
