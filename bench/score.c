/*
 * score.c — the out-of-line part of scoring (see score.h): allocating the per-pod rows.
 */
#include "score.h"

void rows_init(struct rows *rw, unsigned max_pods)
{
	rw->blocks = xcalloc(max_pods, sizeof(uint32_t));
	rw->touched = xcalloc(max_pods, sizeof(uint16_t));
	rw->ntouched = 0;
}
