/*
 * fixture.c — pod names and a kvidx writer with the pods added (see fixture.h).
 */
#include <errno.h>
#include <stdio.h>

#include "benchlib.h"
#include "fixture.h"
#include "inspect.h"

int pod_name(char *buf, size_t len, unsigned p)
{
	return snprintf(buf, len, "10.%u.%u.%u:8000", p >> 16, (p >> 8) & 255, p & 255);
}

struct kvidx *writer_with_pods(const struct kvidx_writer_opts *wo, uint32_t npods, bool strict)
{
	struct kvidx *w = kvidx_writer_open(wo);

	if (!w)
		bdie("kvidx_writer_open: %s", kvidx_strerror(-errno));
	for (uint32_t p = 0; p < npods; p++) {
		char pn[KVIDX_POD_NAME_MAX];
		int rc;

		pod_name(pn, sizeof(pn), p);
		rc = kvidx_pod_add(w, pn, BENCH_MODEL);
		if (strict && rc != (int)p)
			bdie("kvidx_pod_add gave %d for pod %u", rc, p);
	}
	return w;
}

uint64_t fx_pods_sum(const struct kv_view *v, enum kv_pod_ctr c)
{
	uint64_t s = 0;

	for (uint32_t i = 0; i < v->max_pods; i++)
		if (KV_POD_STATE(ld_relaxed(&v->pods[i].pd_word)) == KV_POD_ACTIVE)
			s += ld_relaxed(&v->pods[i].pd_ctr[c]);
	return s;
}
