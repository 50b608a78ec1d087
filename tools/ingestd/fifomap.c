/*
 * fifomap.c — the bounded FIFO map of kvidx-ingestd's private maps (see fifomap.h): memory,
 * index insertion and backward-shift deletion.
 */
#include "fifomap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE (2ul << 20)

void *fm_zalloc(size_t n)
{
	size_t len = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	char *p, *a;

	if (n < HUGE_PAGE)
		return calloc(1, n);
	/* Over-map by a huge page, then trim both ends so the table starts on a boundary. */
	p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (p + len + HUGE_PAGE > a + len)
		munmap(a + len, (size_t)(p + len + HUGE_PAGE - (a + len)));
	(void)madvise(a, len, MADV_HUGEPAGE); /* a hint: without it, ordinary pages */
	return a;
}

void fm_zfree(void *p, size_t n)
{
	if (!p)
		return;
	if (n < HUGE_PAGE)
		free(p);
	else
		munmap(p, (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}

int fm_init(struct fifomap *m, uint64_t cap, size_t esize)
{
	uint64_t words = 16;

	memset(m, 0, sizeof(*m));
	/* Homes come from 32 hash bits, so at most 2^32 words, and cap < 2^32 - 1 leaves a free
	 * word for every probe to end on. */
	if (cap == 0 || cap >= UINT32_MAX - 1 || esize == 0)
		return -EINVAL;
	while (words < 2 * cap && words < (1ull << 32))
		words <<= 1;
	m->idx = fm_zalloc((size_t)words * sizeof(*m->idx));
	m->slots = fm_zalloc((size_t)cap * esize);
	if (!m->idx || !m->slots) {
		fm_zfree(m->idx, (size_t)words * sizeof(*m->idx));
		fm_zfree(m->slots, (size_t)cap * esize);
		memset(m, 0, sizeof(*m));
		return -ENOMEM;
	}
	m->imask = words - 1;
	m->esize = esize;
	m->cap = cap;
	return 0;
}

void fm_free(struct fifomap *m)
{
	if (m->idx) {
		fm_zfree(m->idx, (size_t)(m->imask + 1) * sizeof(*m->idx));
		fm_zfree(m->slots, (size_t)m->cap * m->esize);
	}
	memset(m, 0, sizeof(*m));
}

uint64_t fm_push(struct fifomap *m, uint32_t h)
{
	uint64_t no = m->next, i = h & m->imask;

	m->pushes++;
	m->next = fm_slot_after(m, no);
	while (m->idx[i])
		i = (i + 1) & m->imask;
	m->idx[i] = (uint64_t)h << 32 | (no + 1);
	return no;
}

void fm_unindex(struct fifomap *m, uint32_t h, uint64_t no)
{
	uint64_t want = (uint64_t)h << 32 | (no + 1), i, j;

	for (i = h & m->imask; m->idx[i] != want; i = (i + 1) & m->imask)
		if (!m->idx[i])
			return; /* not indexed: the user's bookkeeping says it cannot happen */
	m->idx[i] = 0;
	for (j = i;;) {
		j = (j + 1) & m->imask;
		uint64_t w = m->idx[j];
		if (!w)
			return;
		uint64_t k = (uint32_t)(w >> 32) & m->imask;
		/* Word j stays if its home lies cyclically in (i, j]; else it fills the hole. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		m->idx[i] = w;
		m->idx[j] = 0;
		i = j;
	}
}
