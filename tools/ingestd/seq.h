/*
 * seq.h — internal to kvidx-ingestd: its one job is judging one pod's sequence numbers.
 * A pure state machine (no I/O, no clock), so every rule is unit-testable.
 *
 * vLLM numbers each published batch from 0 per publisher process, +1 per batch. Given the
 * next expected number E, a batch numbered s is:
 *
 *   FIRST     no batch seen yet (or the state was reset): s sets the sequence.
 *   IN_ORDER  s == E.
 *   COVERED   s lies in the range a finished replay already applied (live messages that waited
 *             in the SUB socket's queue while the replay ran): dropped silently.
 *   GAP       s > E: batches E..s-1 were lost (replay them, or clear the pod).
 *   DUP       s < E by at most SEQ_DUP_WINDOW and s != 0 (or s == 0 == E - 1): ignored.
 *   RESTART   s < E by more than SEQ_DUP_WINDOW, or s == 0 when E > 1, or any s < E after the
 *             connection was re-established: the publisher restarted (clear the pod, resync).
 *
 * A publisher id in the sequence frame (pods.c) is judged before these rules: a new id is a
 * restart whatever s is.
 */
#ifndef KVIDX_INGEST_SEQ_H
#define KVIDX_INGEST_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#define SEQ_DUP_WINDOW 16

enum seq_verdict {
	SEQ_FIRST,
	SEQ_IN_ORDER,
	SEQ_COVERED,
	SEQ_GAP,
	SEQ_DUP,
	SEQ_RESTART,
};

struct seq_state {
	bool have;          /* a batch was accepted: next is meaningful */
	uint64_t next;      /* E: the next expected number */
	bool covered;       /* [cov_lo, cov_hi] was applied by a replay */
	uint64_t cov_lo, cov_hi;
	bool reconnected;   /* the SUB reconnected since the last accepted batch */
};

/* Judges s; does not change the state. */
enum seq_verdict seq_classify(const struct seq_state *st, uint64_t s);

/* Records that batch s was consumed (applied, or skipped as malformed): next = s + 1. Also ends
 * the covered range once s is past it, and clears the reconnected flag. */
void seq_accept(struct seq_state *st, uint64_t s);

/* Forgets everything: the next batch is FIRST. */
void seq_reset(struct seq_state *st);

#endif /* KVIDX_INGEST_SEQ_H */
