/*
 * fifomap.h — internal to kvidx-ingestd: the one bounded map with FIFO eviction under its
 * writer-private maps (the engine-key map of emap.c; the outcome, late and route maps of
 * spec.c). Its one job is where entries live and how they are found; what an entry holds,
 * what makes it live and what evicting it means belong to the user.
 *
 * Entries are fixed-size slots of a ring, written in insertion order: insertion n takes slot
 * n % cap, so once the ring is full an insertion takes the oldest slot (the user evicts what
 * is there first). An index of 64-bit words finds them: open addressing with linear probing
 * at a load of at most 1/2, each word holding 32 bits of its entry's hash (the low bits give
 * its home) and the slot number + 1 (0: empty). A probe reads words and looks at an entry
 * only when the hash bits match, so a miss costs one cache line; deletion shifts later members
 * of the probe run back (no tombstones, no clean-up), computing homes from the words alone.
 * A key may be indexed more than once (a multimap): each insertion has a word of its own.
 *
 * Nothing is allocated after fm_init(): esize bytes per slot plus 8 bytes per index word (the
 * next power of two >= 2 x cap), mapped at start, committed by the kernel as it is touched,
 * and from 2 MiB up advised onto transparent huge pages (a TLB miss per access otherwise costs
 * about as much as the access). Single-threaded, like every user.
 */
#ifndef KVIDX_INGEST_FIFOMAP_H
#define KVIDX_INGEST_FIFOMAP_H

#include <stddef.h>
#include <stdint.h>

#define FM_NONE UINT64_MAX /* no slot; as a probe position: start at the home */

struct fifomap {
	uint64_t *idx;   /* index words: hash32 << 32 | slot + 1; 0 empty */
	uint64_t imask;  /* index words - 1 */
	char *slots;     /* cap slots of esize bytes, zeroed at start */
	size_t esize;
	uint64_t cap;    /* slots, 1 <= cap < 2^32 - 1 */
	uint64_t pushes; /* insertions so far */
	uint64_t next;   /* pushes % cap, the slot the next insertion takes (kept, so that an
			  * insertion divides nothing) */
};

/* An empty map of cap slots of esize bytes. 0, -EINVAL (cap out of range) or -ENOMEM. */
int fm_init(struct fifomap *m, uint64_t cap, size_t esize);
void fm_free(struct fifomap *m);

static inline void *fm_slot(const struct fifomap *m, uint64_t no)
{
	return m->slots + no * m->esize;
}

static inline uint64_t fm_slotno(const struct fifomap *m, const void *e)
{
	return (uint64_t)((const char *)e - m->slots) / m->esize;
}

/* The slot insertion number n took (valid for the last cap insertions). */
static inline uint64_t fm_slot_of(const struct fifomap *m, uint64_t n)
{
	return n % m->cap;
}

/* The slot after slot no, in insertion order. */
static inline uint64_t fm_slot_after(const struct fifomap *m, uint64_t no)
{
	return no + 1 == m->cap ? 0 : no + 1;
}

/* The oldest insertion whose slot has not been taken again since. */
static inline uint64_t fm_oldest(const struct fifomap *m)
{
	return m->pushes > m->cap ? m->pushes - m->cap : 0;
}

/*
 * The next slot after *pos (FM_NONE: from the home) of the probe run of hash h whose word
 * carries h, or FM_NONE when the run ends; *pos becomes that word's position. A lookup:
 *
 *	for (uint64_t pos = FM_NONE, no; (no = fm_scan(m, h, &pos)) != FM_NONE;)
 *		if (matches(fm_slot(m, no)))
 *			return no;
 */
static inline uint64_t fm_scan(const struct fifomap *m, uint32_t h, uint64_t *pos)
{
	uint64_t i = *pos == FM_NONE ? (h & m->imask) : ((*pos + 1) & m->imask);

	for (;; i = (i + 1) & m->imask) {
		uint64_t w = m->idx[i];
		if (!w)
			return FM_NONE;
		if ((uint32_t)(w >> 32) == h) {
			*pos = i;
			return (uint32_t)w - 1;
		}
	}
}

/* The splitmix64 finaliser: keys in tests and some engines' block hashes are small integers,
 * so every bit of the input must reach the low bits the index takes its homes from. */
static inline uint64_t fm_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* The 32 hash bits of a key of two words (a, b) that the index keeps. */
static inline uint32_t fm_hash(uint64_t a, uint64_t b)
{
	return (uint32_t)fm_mix64(a ^ (b * 0x9e3779b97f4a7c15ull) ^ 0x5bd1e995);
}

/* Indexes slot m->next (its contents written or about to be) under hash h and counts the
 * insertion. Returns the slot number. */
uint64_t fm_push(struct fifomap *m, uint32_t h);

/* Removes the index word of slot no, indexed under hash h; the slot's contents are the
 * user's to clear. */
void fm_unindex(struct fifomap *m, uint32_t h, uint64_t no);

/* Hints (no effect on the map): start loading the index line a lookup of h reads first; and,
 * once that line is in, the entry of the first word carrying h in the first few. */
static inline void fm_prefetch(const struct fifomap *m, uint32_t h)
{
	__builtin_prefetch(&m->idx[h & m->imask]);
}

static inline void fm_prefetch_entry(const struct fifomap *m, uint32_t h)
{
	for (uint64_t i = h & m->imask, n = 0; n < 4; i = (i + 1) & m->imask, n++) {
		uint64_t w = m->idx[i];
		if (!w)
			return;
		if ((uint32_t)(w >> 32) == h) {
			__builtin_prefetch(fm_slot(m, (uint32_t)w - 1));
			return;
		}
	}
}

/* Zeroed memory for a big table accessed at random places (see the top of this file), and
 * its release, which takes the same size. Also used by emap's held counts. */
void *fm_zalloc(size_t n);
void fm_zfree(void *p, size_t n);

#endif /* KVIDX_INGEST_FIFOMAP_H */
