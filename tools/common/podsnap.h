/*
 * podsnap.h — a copy of an index's active pods (index, name, model, pod word, counters),
 * taken by a tool that reads the index, so that what it prints about a pod comes from one
 * consistent look at the pod table rather than from loads spread over its output; and the
 * same for a router slot's counters.
 */
#ifndef KVIDX_TOOLS_PODSNAP_H
#define KVIDX_TOOLS_PODSNAP_H

#include <stdbool.h>
#include <stdint.h>

#include "kvidx.h"
#include "telemetry.h"

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

struct kv_view;

/*
 * Copies the counters of registry slot s's router statistics (telemetry.h KV_ROUTER_CTRS,
 * relaxed loads) into c. Returns false, c then undefined, if the view has none for s or the slot
 * neither routed nor reported an outcome.
 */
bool tc_router_snapshot(const struct kv_view *v, uint32_t s, uint64_t c[KV_RT_COUNT]);

#endif /* KVIDX_TOOLS_PODSNAP_H */
