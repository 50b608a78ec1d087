/*
 * route.c — route commits and outcome reports, from router workers to the writer, through one
 * single-producer single-consumer ring per registry slot (layout: shm/layout.h, kv_ring_hdr).
 *
 * Concurrency model:
 *
 *  1. Producer: the reader owning the slot (one thread). It reads rh_tail with acquire in
 *     ring_room() (pairs with the consumer's release store of rh_tail in drain_one(): the
 *     consumer is done reading the messages it passed before the producer overwrites them),
 *     writes all the messages of one commit, then publishes them with one release store of
 *     rh_head in ring_put().
 *  2. Consumer: the writer (one thread). It reads rh_head with acquire in drain_one() (pairs
 *     with the producer's release store in ring_put(): the messages are complete), copies them
 *     out, then release-stores rh_tail.
 *  3. The consumer trusts nothing in the ring: its geometry is its own, a head more than
 *     ring_entries ahead of its tail is treated as corruption (everything queued is dropped
 *     and counted), every message is type- and range-checked, and a commit whose key messages
 *     do not follow it whole is dropped.
 *  4. A slot's next owner continues at the head the previous one left, so a dead producer
 *     (SIGKILL between two messages) leaves nothing half-published: rh_head moves only after
 *     a whole commit is written.
 *  5. Doorbell: the writer stores ih_writer_idle = 1, full fence, then looks at every ring's
 *     head (kvidx_writer_idle()); a producer publishes its head, full fence, then reads the
 *     flag (doorbell_ring()). Store-load on both sides: a commit is either seen by the writer
 *     before it sleeps, or the producer rings.
 *  6. Ringing is a futex on the registry word ch_bell: the producer adds 1 and FUTEX_WAKEs;
 *     the writer's helper thread (bell_main()) reads the word with pread(), signals its
 *     eventfd if the word moved, and FUTEX_WAITs on the value it read. The kernel compares
 *     the word with that value under the futex's hash-bucket lock, so an increment made
 *     after the pread either makes the wait return at once or wakes it: none is lost. Only a
 *     process that can map the registry (the index's owner and group) can ring, from any
 *     namespace that shares /dev/shm; the helper rate-limits what it passes on.
 *
 * Progress: kvidx_commit() and kvidx_report_outcome() are wait-free: a full ring drops the
 * message and counts it (rs_dropped); they never wait for the writer. kvidx_drain() is bounded
 * by its budget.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static long futex(uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

/* Rings the writer's doorbell if it announced it may sleep. */
static void doorbell_ring(struct kvidx_reader *r)
{
	/* Rule 5: the head published by ring_put() is ordered before the idle flag is read.
	 * Pairs with the full fence in kvidx_writer_idle(): either the writer sees the new head
	 * before sleeping, or this reader sees the flag and rings. */
	fence_seqcst();
	if (!ld_relaxed(&r->ih->ih_writer_idle))
		return;
	/* Rule 6: the new value is what the helper's FUTEX_WAIT compares; the wake is a shared
	 * futex (no FUTEX_PRIVATE_FLAG), keyed on the registry's page, so it reaches the writer
	 * in whatever process, network or PID namespace it runs. */
	add_relaxed(&r->ctl->ch_bell, 1);
	futex(&r->ctl->ch_bell, FUTEX_WAKE, 1, NULL);
}

/* Producer: room for need messages? */
static bool ring_room(struct kvidx_reader *r, uint64_t need)
{
	/* Rule 1: pairs with the release store of rh_tail in drain_one(). */
	uint64_t tail = ld_acquire(&r->ring->rh_tail);
	uint64_t used = r->ring_head - tail;

	if (used > r->ring_entries) {
		/* Nonsense left by a previous owner or a corruption: start over from the tail. */
		r->ring_head = tail;
		used = 0;
	}
	return r->ring_entries - used >= need;
}

static struct kv_msg *ring_slot(struct kvidx_reader *r, uint64_t i)
{
	return &r->ring_msgs[(r->ring_head + i) & (r->ring_entries - 1)];
}

static void ring_put(struct kvidx_reader *r, uint64_t n)
{
	r->ring_head += n;
	/* Rule 1: the messages are written before the head says so. Pairs with the acquire loads
	 * of rh_head in drain_one() and kvidx_writer_idle(). */
	st_release(&r->ring->rh_head, r->ring_head);
	st_relaxed(&r->me->rs_commits, ld_relaxed(&r->me->rs_commits) + 1);
	doorbell_ring(r);
}

static int ring_drop(struct kvidx_reader *r)
{
	st_relaxed(&r->me->rs_dropped, ld_relaxed(&r->me->rs_dropped) + 1);
	return -EAGAIN;
}

_Static_assert(offsetof(struct kvidx_route, prompt_tokens) == KVIDX_ROUTE_SIZE_1_0,
	       "1.1 fields follow the 1.0 struct");

/* Commits rt, whose fields past what the caller's struct held are zero. */
static int commit(struct kvidx_reader *r, const struct kvidx_route *rt)
{
	if ((!rt->keys && rt->nkeys) || rt->pod < 0 || rt->pod >= KV_MAX_PODS ||
	    rt->prefill_pod >= KV_MAX_PODS || rt->prefill_pod < -1)
		return -EINVAL;
	/* The writer speculates at most KVIDX_MAX_COMMIT_KEYS blocks: a longer prompt sends that
	 * prefix, and its length for the load view (the whole prompt's tokens). */
	uint64_t nkeys = rt->nkeys < KVIDX_MAX_COMMIT_KEYS ? rt->nkeys : KVIDX_MAX_COMMIT_KEYS;
	uint64_t prompt = rt->prompt_tokens;
	if (!prompt && rt->nkeys > nkeys)
		prompt = (uint64_t)rt->nkeys * ld_relaxed(&r->v.hdr->dh_block_size);
	uint64_t nmsg = 1 + (nkeys + KV_MSG_KEYS_PER - 1) / KV_MSG_KEYS_PER;
	int rc = kv_rd_follow(r); /* the ring of the registry the writer reads now */
	if (rc < 0)
		return rc;
	if (!ring_room(r, nmsg))
		return ring_drop(r);
	uint32_t seq = ++r->commit_seq;
	struct kv_msg *m = ring_slot(r, 0);
	memset(m, 0, sizeof(*m));
	m->m_type = KV_MSG_COMMIT;
	m->m_seq = seq;
	m->m_corr = rt->corr_id;
	m->u.commit.t_ns = kvidx_now_ns();
	m->u.commit.gen = r->v.gen;
	m->u.commit.pod = (uint16_t)rt->pod;
	m->u.commit.prefill_pod = rt->prefill_pod < 0 ? UINT16_MAX : (uint16_t)rt->prefill_pod;
	m->u.commit.nkeys = (uint32_t)nkeys;
	m->u.commit.matched = rt->matched_blocks;
	m->u.commit.matched_spec = rt->matched_spec;
	m->u.commit.prompt_tokens = prompt > UINT32_MAX ? UINT32_MAX : (uint32_t)prompt;
	for (uint64_t i = 1, k = 0; i < nmsg; i++) {
		struct kv_msg *km = ring_slot(r, i);
		unsigned n = nkeys - k < KV_MSG_KEYS_PER ? (unsigned)(nkeys - k) : KV_MSG_KEYS_PER;
		memset(km, 0, sizeof(*km));
		km->m_type = KV_MSG_KEYS;
		km->m_n = (uint8_t)n;
		km->m_seq = seq;
		km->m_corr = rt->corr_id;
		memcpy(km->u.keys, rt->keys + k, n * sizeof(uint64_t));
		k += n;
	}
	ring_put(r, nmsg);
	return 0;
}

int kvidx_commit_sized(struct kvidx_reader *r, const struct kvidx_route *rt, size_t size)
{
	struct kvidx_route c = { 0 };

	if (!rt || size < KVIDX_ROUTE_SIZE_1_0)
		return -EINVAL;
	memcpy(&c, rt, size < sizeof(c) ? size : sizeof(c));
	return commit(r, &c);
}

/* 1.0's symbol (kvidx.h defines a macro of this name over kvidx_commit_sized()). */
int (kvidx_commit)(struct kvidx_reader *r, const struct kvidx_route *rt)
{
	return kvidx_commit_sized(r, rt, KVIDX_ROUTE_SIZE_1_0);
}

int kvidx_report_outcome(struct kvidx_reader *r, uint64_t corr_id, int pod,
			 uint32_t cached_tokens, uint32_t prompt_tokens)
{
	if (pod < 0 || pod >= KV_MAX_PODS)
		return -EINVAL;
	int rc = kv_rd_follow(r);
	if (rc < 0)
		return rc;
	if (!ring_room(r, 1))
		return ring_drop(r);
	struct kv_msg *m = ring_slot(r, 0);
	memset(m, 0, sizeof(*m));
	m->m_type = KV_MSG_OUTCOME;
	m->m_corr = corr_id;
	m->u.outcome.t_ns = kvidx_now_ns();
	m->u.outcome.gen = r->v.gen;
	m->u.outcome.pod = (uint16_t)pod;
	m->u.outcome.cached_tokens = cached_tokens;
	m->u.outcome.prompt_tokens = prompt_tokens;
	ring_put(r, 1);
	return 0;
}

/* ---- consumer (writer) ---- */

/* Drains ring i. Returns the number of messages consumed. */
static size_t drain_one(struct kvidx *w, uint32_t i, size_t budget,
			const struct kvidx_drain_ops *ops, uint64_t *keybuf)
{
	struct kv_ring_hdr *rh = kv_ring_at(w->ctl, w->max_readers, w->ring_entries, i);
	const struct kv_msg *msgs = (const struct kv_msg *)(rh + 1);
	uint64_t mask = w->ring_entries - 1, t = w->ring_tail[i];
	/* Rule 2: pairs with the release store of rh_head in ring_put(). */
	uint64_t h = ld_acquire(&rh->rh_head);
	size_t used = 0;

	if (h - t > w->ring_entries) {
		/* Rule 3: a head out of range, behind the tail (a truncation zeroed it) or more
		 * than a ring ahead (forged), says nothing of how many messages were lost: count
		 * one ring's worth, never the distance (which wraps to ~2^64 for a head behind). */
		stat_add(&w->st->route_bad, w->ring_entries);
		t = h;
	}
	while (t != h && used < budget) {
		struct kv_msg m;
		memcpy(&m, &msgs[t & mask], sizeof(m));
		t++;
		used++;
		if (m.m_type == KV_MSG_OUTCOME) {
			struct kvidx_outcome o = { .corr_id = m.m_corr, .pod = m.u.outcome.pod,
						   .cached_tokens = m.u.outcome.cached_tokens,
						   .prompt_tokens = m.u.outcome.prompt_tokens,
						   .t_ns = m.u.outcome.t_ns };
			if (m.u.outcome.gen != w->gen || o.pod >= (int)w->max_pods)
				stat_add(&w->st->route_bad, 1);
			else if (ops->outcome)
				ops->outcome(ops->arg, &o);
			continue;
		}
		if (m.m_type != KV_MSG_COMMIT) {
			stat_add(&w->st->route_bad, 1); /* stray keys of a dropped commit */
			continue;
		}
		uint32_t nkeys = m.u.commit.nkeys, got = 0;
		bool ok = nkeys <= KVIDX_MAX_COMMIT_KEYS;
		while (ok && got < nkeys) {
			if (t == h) {
				ok = false;
				break;
			}
			const struct kv_msg *km = &msgs[t & mask];
			unsigned n = ld_relaxed(&km->m_n);
			if (ld_relaxed(&km->m_type) != KV_MSG_KEYS || km->m_seq != m.m_seq ||
			    n == 0 || n > KV_MSG_KEYS_PER || got + n > nkeys) {
				ok = false;
				break;
			}
			memcpy(keybuf + got, km->u.keys, n * sizeof(uint64_t));
			got += n;
			t++;
			used++;
		}
		struct kvidx_route rt = { .corr_id = m.m_corr, .pod = m.u.commit.pod,
					  .prefill_pod = m.u.commit.prefill_pod == UINT16_MAX ?
								 -1 : m.u.commit.prefill_pod,
					  .keys = keybuf, .nkeys = nkeys,
					  .matched_blocks = m.u.commit.matched,
					  .matched_spec = m.u.commit.matched_spec,
					  .prompt_tokens = m.u.commit.prompt_tokens };
		if (!ok || m.u.commit.gen != w->gen ||
		    rt.pod >= (int)w->max_pods || rt.prefill_pod >= (int)w->max_pods) {
			stat_add(&w->st->route_bad, 1);
			continue;
		}
		stat_add(&w->st->route_commits, 1);
		if (ops->route)
			ops->route(ops->arg, &rt, m.u.commit.t_ns);
	}
	w->ring_tail[i] = t;
	/* Rule 1: everything copied out above is done before the producer may reuse it. Pairs
	 * with the acquire load of rh_tail in ring_room(). */
	st_release(&rh->rh_tail, t);
	return used;
}

/*
 * The writer's side of the doorbell: a helper thread waits on the registry's futex word and
 * turns wake-ups into an eventfd the writer polls. It never loads the word itself (a reader
 * may truncate the registry: a load would be SIGBUS, a futex call is -EFAULT); it reads it with
 * pread() on the registry's descriptor. Rate limit: after signalling, it waits at least
 * KV_BELL_MIN_NS before it looks again, so a reader ringing without pause wakes the writer at
 * most 1 s / KV_BELL_MIN_NS times a second.
 */
#define KV_BELL_MIN_NS 50000ull       /* 50 us: at most 20,000 wake-ups a second */
#define KV_BELL_WAIT_NS 100000000ull  /* re-check the word (and the stop flag) every 100 ms */

struct kv_bell {
	pthread_t th;
	int efd;        /* the eventfd kvidx_writer_doorbell() returns */
	int ctl_fd;     /* the registry's descriptor (for pread) */
	uint32_t *word; /* &ctl->ch_bell in the writer's mapping (only passed to futex()) */
	uint32_t stop;  /* set by kv_bell_stop_thread() (release), read by bell_main() (acquire) */
	bool running;   /* th exists */
	uint32_t base;  /* the word when the thread was started (base_ok: read) */
	bool base_ok;
};

static void *bell_main(void *arg)
{
	struct kv_bell *b = arg;
	const off_t off = offsetof(struct kvidx_ctl_hdr, ch_bell);
	const struct timespec wait = { 0, (long)KV_BELL_WAIT_NS };
	const struct timespec gap = { 0, (long)KV_BELL_MIN_NS };
	/* The baseline was read before the thread existed (kv_bell_start_thread()), so a ring
	 * between pthread_create() and this thread's first pread is not taken for it. */
	uint32_t seen = b->base;
	bool first = !b->base_ok;

	/* Acquire pairs with the release store of stop in kv_bell_stop_thread(); it publishes
	 * nothing else (the thread reads only what existed before pthread_create()). */
	while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
		uint32_t v;
		if (pread(b->ctl_fd, &v, sizeof(v), off) != (ssize_t)sizeof(v)) {
			/* Registry truncated: the writer recreates it, and stops this thread first
			 * (kv_bell_stop_thread() wakes this wait at once). */
			futex(&b->stop, FUTEX_WAIT_PRIVATE, 0, &wait);
			continue;
		}
		if (!first && v != seen) {
			uint64_t one = 1;
			(void)!write(b->efd, &one, sizeof(one));
			nanosleep(&gap, NULL);
		}
		first = false;
		seen = v;
		/* Returns at once if the word moved since the pread (EAGAIN), on a wake, after
		 * the timeout, or with EFAULT (a truncated page): all just loop. */
		futex(b->word, FUTEX_WAIT, v, &wait);
	}
	return NULL;
}

void kv_bell_start_thread(struct kvidx *w, bool ring)
{
	struct kv_bell *b = w->bell;

	if (!b || b->running)
		return;
	b->stop = 0;
	b->ctl_fd = w->ctl_fd;
	b->word = &w->ctl->ch_bell;
	b->base_ok = pread(b->ctl_fd, &b->base, sizeof(b->base),
			   offsetof(struct kvidx_ctl_hdr, ch_bell)) == (ssize_t)sizeof(b->base);
	b->running = pthread_create(&b->th, NULL, bell_main, b) == 0;
	/* Commits made while no thread waited (a restart): let the writer look at the rings. */
	uint64_t one = 1;
	if (ring)
		(void)!write(b->efd, &one, sizeof(one));
}

void kv_bell_stop_thread(struct kvidx *w, uint32_t *wake)
{
	struct kv_bell *b = w->bell;

	if (!b || !b->running)
		return;
	/* Pairs with the acquire load of stop in bell_main(); pthread_join() below is what
	 * orders the thread's end before b is reused or freed. */
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
	/* Else it notices within KV_BELL_WAIT_NS. Wherever it waits: on the registry word
	 * (b->word; after a guard fault a private zero page, guard.h, whose futex key is not
	 * the file's: a helper that waited before the fault is keyed on the file, and only a
	 * wake through another shared mapping of it, wake, reaches it), or on stop itself. */
	futex(b->word, FUTEX_WAKE, 1, NULL);
	if (wake)
		futex(wake, FUTEX_WAKE, 1, NULL);
	futex(&b->stop, FUTEX_WAKE_PRIVATE, 1, NULL);
	pthread_join(b->th, NULL);
	b->running = false;
}

int kvidx_writer_doorbell(struct kvidx *w)
{
	struct kv_bell *b;

	if (w->bell)
		return w->bell->efd;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (b->efd < 0) {
		int rc = -errno;
		free(b);
		return rc;
	}
	w->bell = b;
	kv_bell_start_thread(w, false);
	if (!b->running) {
		close(b->efd);
		free(b);
		w->bell = NULL;
		return -EAGAIN;
	}
	return b->efd;
}

void kv_bell_stop(struct kvidx *w)
{
	struct kv_bell *b = w->bell;

	if (!b)
		return;
	kv_bell_stop_thread(w, NULL);
	close(b->efd);
	free(b);
	w->bell = NULL;
}

bool kvidx_writer_idle(struct kvidx *w, bool idle)
{
	uint64_t buf;

	if (!idle) {
		st_relaxed(&w->ih->ih_writer_idle, 0);
		if (w->bell)
			(void)!read(w->bell->efd, &buf, sizeof(buf)); /* empties the counter */
		return false;
	}
	st_relaxed(&w->ih->ih_writer_idle, 1);
	fence_seqcst(); /* rule 5: pairs with the fence in doorbell_ring() */
	for (uint32_t i = 0; i < w->max_readers; i++) {
		struct kv_ring_hdr *rh = kv_ring_at(w->ctl, w->max_readers, w->ring_entries, i);
		/* Pairs with the release store of rh_head in ring_put() (only compared here; the
		 * messages are read after drain_one()'s own acquire load). */
		if (ld_acquire(&rh->rh_head) != w->ring_tail[i])
			return true;
	}
	return false;
}

int kvidx_drain(struct kvidx *w, size_t budget, const struct kvidx_drain_ops *ops)
{
	static __thread uint64_t keybuf[KVIDX_MAX_COMMIT_KEYS];
	size_t used = 0;

	char *ring0 = (char *)kv_ring_at(w->ctl, w->max_readers, w->ring_entries, 0);
	uint64_t stride = kv_ctl_ring_bytes(w->ring_entries);

	/* Start where the last call stopped, so that a small budget cannot starve later rings.
	 * Rings of free slots may still hold what a dead owner sent: drain them too. ingestd
	 * calls this between every two events, so an empty ring costs one load: relaxed, since
	 * it only decides whether to look; drain_one()'s acquire load of rh_head orders the
	 * messages it reads. */
	for (uint32_t n = 0; n < w->max_readers && used < budget; n++) {
		uint32_t i = w->drain_next;
		const struct kv_ring_hdr *rh = (const void *)(ring0 + (uint64_t)i * stride);
		w->drain_next = i + 1 == w->max_readers ? 0 : i + 1;
		if (ld_relaxed(&rh->rh_head) == w->ring_tail[i])
			continue;
		w->drain_slot = (int)i; /* kv_writer_drain_slot() */
		used += drain_one(w, i, budget - used, ops, keybuf);
	}
	w->drain_slot = -1;
	return (int)used;
}
