/*
 * naive.c — the naive process-shared rwlock table's set-up and writes (see naive.h).
 */
#include <string.h>
#include <sys/mman.h>

#include "benchlib.h"
#include "host.h"
#include "naive.h"

void naive_lock_init(struct naive_tab *t, bool writer_pref)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (writer_pref)
		pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	if (pthread_rwlock_init(&t->lock, &a))
		bdie("pthread_rwlock_init failed");
	pthread_rwlockattr_destroy(&a);
}

struct naive_tab *naive_new(uint64_t capacity, bool writer_pref)
{
	uint64_t nslots = capacity * 4 / 3 + 1;
	size_t len = sizeof(struct naive_tab) + nslots * sizeof(struct naive_slot);
	struct naive_tab *t = shared_alloc(len);

	naive_lock_init(t, writer_pref);
	t->nslots = nslots;
	t->map_len = len;
	return t;
}

void naive_free(struct naive_tab *t)
{
	if (t)
		munmap(t, t->map_len);
}

bool naive_add(struct naive_tab *t, uint64_t key, uint16_t pod)
{
	uint64_t i = naive_home(t, key);

	for (;;) {
		struct naive_slot *s = &t->slots[i];
		if (s->key == key) {
			for (unsigned j = 0; j < s->n; j++)
				if (s->pod[j] == pod)
					return true;
			if (s->n < NAIVE_PPK)
				s->pod[s->n++] = pod;
			else
				s->pod[NAIVE_PPK - 1] = pod; /* displace the newest */
			return true;
		}
		if (s->key == 0) {
			if (t->keys + 1 >= t->nslots)
				return false;
			s->key = key;
			s->n = 1;
			s->pod[0] = pod;
			t->keys++;
			return true;
		}
		if (++i == t->nslots)
			i = 0;
	}
}

void naive_del(struct naive_tab *t, uint64_t key, uint16_t pod)
{
	uint64_t i = naive_home(t, key);
	struct naive_slot *s;

	for (;;) {
		s = &t->slots[i];
		if (s->key == 0)
			return;
		if (s->key == key)
			break;
		if (++i == t->nslots)
			i = 0;
	}
	for (unsigned j = 0; j < s->n; j++)
		if (s->pod[j] == pod) {
			s->pod[j] = s->pod[--s->n];
			break;
		}
	if (s->n)
		return;
	/* Backward-shift deletion: pull later members of the cluster into the hole. */
	uint64_t hole = i;
	for (;;) {
		if (++i == t->nslots)
			i = 0;
		struct naive_slot *n = &t->slots[i];
		if (n->key == 0)
			break;
		uint64_t h = naive_home(t, n->key);
		/* n may move to hole iff its home is not in (hole, i] cyclically. */
		bool stay = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
		if (stay)
			continue;
		t->slots[hole] = *n;
		hole = i;
	}
	memset(&t->slots[hole], 0, sizeof(t->slots[hole]));
	t->keys--;
}

bool naive_apply(struct naive_tab *t, const uint64_t *k, uint32_t n, uint16_t pod, bool add)
{
	bool ok = true;

	for (uint32_t i = 0; i < n; i++) {
		if (add)
			ok &= naive_add(t, k[i], pod);
		else
			naive_del(t, k[i], pod);
	}
	return ok;
}
