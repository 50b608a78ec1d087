/*
 * seq.c — the per-pod sequence-number rules of kvidx-ingestd (see seq.h for the rules).
 */
#include "seq.h"

#include <string.h>

enum seq_verdict seq_classify(const struct seq_state *st, uint64_t s)
{
	if (!st->have)
		return SEQ_FIRST;
	if (st->covered && s >= st->cov_lo && s <= st->cov_hi)
		return SEQ_COVERED;
	if (s == st->next)
		return SEQ_IN_ORDER;
	if (s > st->next)
		return SEQ_GAP;
	/* s < next from here on. */
	if (st->reconnected)
		return SEQ_RESTART;
	if (s == 0)
		return st->next == 1 ? SEQ_DUP : SEQ_RESTART;
	if (st->next - s > SEQ_DUP_WINDOW)
		return SEQ_RESTART;
	return SEQ_DUP;
}

void seq_accept(struct seq_state *st, uint64_t s)
{
	st->have = true;
	st->next = s + 1;
	st->reconnected = false;
	if (st->covered && s > st->cov_hi)
		st->covered = false;
}

void seq_reset(struct seq_state *st)
{
	memset(st, 0, sizeof(*st));
}
