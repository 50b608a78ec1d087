/*
 * score.c — the out-of-line part of scoring (see score.h): allocating and freeing the
 * per-pod rows.
 */
#include <stdlib.h>

#include "score.h"

void rows_init(struct rows *rw, unsigned max_pods)
{
	rw->blocks = xcalloc(max_pods, sizeof(uint32_t));
	rw->touched = xcalloc(max_pods, sizeof(uint16_t));
	rw->ntouched = 0;
}

void rows_free(struct rows *rw)
{
	free(rw->blocks);
	free(rw->touched);
	rw->blocks = NULL;
	rw->touched = NULL;
}
