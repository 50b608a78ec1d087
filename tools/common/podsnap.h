/*
 * podsnap.h — a copy of an index's active pods (index, name, model, pod word, counters),
 * taken by a tool that reads the index, so that what it prints about a pod comes from one
 * consistent look at the pod table rather than from loads spread over its output.
 */
#ifndef KVIDX_TOOLS_PODSNAP_H
#define KVIDX_TOOLS_PODSNAP_H

#include <stdint.h>

#include "kvidx.h"
#include "layout.h"

struct tc_pod {
	int idx;                        /* the pod's index in the pod table */
	unsigned gen, flags;            /* from its pod word */
	char name[KVIDX_POD_NAME_MAX];
	char model[KVIDX_POD_NAME_MAX];
	uint64_t ctr[KV_PC_COUNT];      /* relaxed loads: they may lag each other a moment */
};

/*
 * Copies the active pods of the generation r views into a malloc'd array in *out (the
 * caller frees it). A pod removed, or renamed twice, while it is being read is left out.
 * Returns the number of pods, or -ENOMEM.
 */
int tc_pods_snapshot(struct kvidx_reader *r, struct tc_pod **out);

#endif /* KVIDX_TOOLS_PODSNAP_H */
