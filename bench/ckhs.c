/*
 * ckhs.c — the ck_hs baseline's set, allocator, writes and teardown (see ckhs.h).
 */
#include <stdlib.h>

#include "benchlib.h"
#include "ckhs.h"

static void *ck_obj_malloc(size_t n)
{
	return malloc(n);
}

static void *ck_obj_realloc(void *p, size_t old, size_t n, bool defer)
{
	(void)old;
	(void)defer;
	return realloc(p, n);
}

static void ck_obj_free(void *p, size_t n, bool defer)
{
	(void)n;
	(void)defer;
	free(p);
}

/* ck_hs's allocator: malloc, realloc and free, with no deferred freeing. */
static struct ck_malloc ck_obj_alloc = { ck_obj_malloc, ck_obj_realloc, ck_obj_free };

/* ck_hs's comparison: two objects (or keys) are the same if their keys are. */
static bool ck_obj_cmp(const void *a, const void *b)
{
	return *(const uint64_t *)a == *(const uint64_t *)b;
}

void ck_set_init(ck_hs_t *hs, uint64_t capacity, unsigned mode)
{
	if (!ck_hs_init(hs, CK_HS_MODE_SPMC | CK_HS_MODE_OBJECT | mode, ck_obj_hash, ck_obj_cmp,
			&ck_obj_alloc, capacity, 0x5bd1e995))
		bdie("ck_hs_init failed");
}

void ck_set_put(ck_hs_t *hs, struct ck_obj *ob)
{
	if (!ck_hs_put(hs, CK_HS_HASH(hs, ck_obj_hash, ob), ob))
		bdie("ck_hs_put failed");
}

void ck_set_apply(ck_hs_t *hs, const uint64_t *k, uint32_t n, uint16_t pod, bool add)
{
	for (uint32_t i = 0; i < n; i++) {
		if (add) {
			struct ck_obj *ob = malloc(sizeof(*ob));
			if (!ob)
				bdie("out of memory");
			ob->key = k[i];
			ob->pod[0] = pod;
			ob->npods = 1;
			ck_set_put(hs, ob);
		} else {
			free(ck_hs_remove(hs, CK_HS_HASH(hs, ck_obj_hash, &k[i]), &k[i]));
		}
	}
}

void ck_set_destroy(ck_hs_t *hs, bool free_objs)
{
	if (free_objs) {
		struct ck_hs_iterator it = CK_HS_ITERATOR_INITIALIZER;
		void *ob;
		while (ck_hs_next(hs, &it, &ob))
			free(ob);
	}
	ck_hs_destroy(hs);
}
