/*
 * fixture.c — pod names, a kvidx writer with the pods added, and watching an end-to-end run's
 * index fill (see fixture.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "benchlib.h"
#include "fixture.h"
#include "host.h"
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
			s += kv_tm_view_pod(v, (int)i, c);
	return s;
}

struct kvidx_reader *fx_wait_index(const char *name, pid_t ingestd, const char *log)
{
	struct kvidx_reader *r = NULL;

	for (int i = 0; i < 500 && !r; i++) {
		sleep_ns(10000000);
		r = kvidx_reader_open(name);
	}
	if (!r) {
		bl_reap(ingestd, SIGTERM);
		bdie("kvidx-ingestd did not create index %s (log: %s)", name, log);
	}
	return r;
}

void fx_watch(const struct kv_view *v, uint64_t events, pid_t ingestd,
	      void (*on_first)(void *arg), void *arg, struct fx_window *w)
{
	uint64_t t_last = now_ns();

	memset(w, 0, sizeof(*w));
	for (;;) {
		sleep_ns(1000000);
		uint64_t now = now_ns();
		uint64_t b = fx_pods_sum(v, KV_PC_blocks_stored) + fx_pods_sum(v, KV_PC_blocks_removed);
		w->events = fx_pods_sum(v, KV_PC_events);
		if (!w->t_first && b > 0) {
			w->t_first = now;
			w->b_first = b;
			w->cpu_first = proc_cpu_s(ingestd);
			if (on_first)
				on_first(arg);
		}
		if (b != w->b_last) {
			w->b_last = b;
			t_last = now;
		}
		if (w->events >= events) {
			w->complete = true;
			break;
		}
		if (now - t_last > 3000000000ull)
			break; /* no progress for 3 s */
	}
	w->t_end = now_ns();
}
