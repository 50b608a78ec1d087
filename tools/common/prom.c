/*
 * prom.c — kvidx's state as a Prometheus text exposition (format 0.0.4), for kvidx-dump
 * --prometheus and kvidx-ingestd's --metrics endpoint; see prom.h for the contract.
 *
 * The renderer reads the data segment like kvidx-dump does: relaxed loads of the pod table,
 * the histograms and the stats, which live in fixed regions of the segment (never reclaimed),
 * so no read-side section is needed and a slow consumer of the output never holds up the
 * writer. Pods are copied first (names, models, counters), then printed one metric family at
 * a time, as the format requires every sample of a family to follow its # TYPE line. The
 * pod-word acquire loads pair with the release stores in lib/writer.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "escape.h"
#include "hist.h"
#include "inspect.h"
#include "podsnap.h"
#include "prom.h"
#include "segment.h"

#define NS_PER_S 1000000000ull

/* ---- exposition helpers ---- */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A duration in integer microseconds as seconds, exactly: 1179647 -> "1.179647". */
static void us_as_seconds(FILE *f, uint64_t us)
{
	char frac[8];
	int n = 6;

	snprintf(frac, sizeof(frac), "%06u", (unsigned)(us % 1000000u));
	while (n > 0 && frac[n - 1] == '0')
		n--;
	frac[n] = '\0';
	fprintf(f, "%" PRIu64 "%s%s", us / 1000000u, n ? "." : "", frac);
}

/* ---- what the per-pod values are ---- */

/* Every counter is exported as kvidx_pod_<name>_total (the Prometheus convention; the
 * renames of issue 22 are listed in docs/operations.md). K_TOTAL is K_COUNTER (kept so the
 * table below reads as it did). */
enum ctr_kind { K_UNTYPED = 0, K_COUNTER, K_GAUGE, K_AGE, K_TOTAL };

/* name: the exported name when it is not kvidx_pod_<counter> (a unit in base units); div:
 * the counter's unit per base unit (1000 for milliseconds, 1000000 for microseconds). */
struct ctr_meta {
	enum ctr_kind kind;
	const char *help;
	const char *name;
	unsigned div;
};

/* Names of the per-pod counters from telemetry.h's X-macro. */
static const char *const pod_ctr_names[KV_PC_COUNT] = {
#define POD_CTR_NAME(n) [KV_PC_##n] = #n,
	KV_POD_CTRS(POD_CTR_NAME)
#undef POD_CTR_NAME
};

/*
 * Type and help of each per-pod value. A counter added to KV_POD_CTRS without an entry here
 * is still exported, as untyped with a generic help line.
 */
static const struct ctr_meta pod_meta[KV_PC_COUNT] = {
	[KV_PC_last_event_ns] = { K_AGE, "Seconds since the last event batch or heartbeat from "
					 "the pod was received (+Inf: none yet)." },
	[KV_PC_last_seq] = { K_GAUGE, "Sequence number of the last event batch from the pod." },
	[KV_PC_batches] = { K_COUNTER, "Event batches received from the pod." },
	[KV_PC_events] = { K_COUNTER, "KV events received from the pod." },
	[KV_PC_blocks_stored] = { K_COUNTER, "Blocks recorded as stored on the pod." },
	[KV_PC_blocks_removed] = { K_COUNTER, "Block records removed for the pod." },
	[KV_PC_clears] = { K_COUNTER, "AllBlocksCleared events applied for the pod." },
	[KV_PC_events_per_s] = { K_GAUGE, "Events received from the pod in the last one-second "
					  "window (rate(kvidx_pod_events_total[1m]) for a rate).",
				 "kvidx_pod_events_last_second" },
	[KV_PC_seq_gaps] = { K_COUNTER, "Gaps in the pod's event sequence numbers." },
	[KV_PC_seq_dups] = { K_COUNTER, "Event batches dropped as repeated sequence numbers." },
	[KV_PC_restarts] = { K_TOTAL, "Engine restarts detected (a new publisher id, or the "
				      "sequence went back); each cleared the rank." },
	[KV_PC_replays_ok] = { K_COUNTER, "Replays that covered a sequence gap." },
	[KV_PC_replays_truncated] = { K_COUNTER, "Replays that could not cover a gap (the pod "
					      "was cleared)." },
	[KV_PC_replays_failed] = { K_COUNTER, "Replays that failed or timed out." },
	[KV_PC_decode_errors] = { K_COUNTER, "Malformed messages from the pod, skipped." },
	[KV_PC_skipped_events] = { K_COUNTER, "Events from the pod that could not be applied, "
					      "skipped." },
	[KV_PC_unknown_parent] = { K_COUNTER, "Stored blocks whose parent block was unknown." },
	[KV_PC_queue_depth] = { K_GAUGE, "Messages read from the pod's sockets in the last "
					 "housekeeping round (subscriber backlog)." },
	[KV_PC_connected] = { K_GAUGE, "1 if the pod's event subscriptions (every rank's) are "
				       "connected." },
	[KV_PC_bad_events] = { K_COUNTER, "Malformed events skipped (their batch was kept)." },
	[KV_PC_unknown_type] = { K_COUNTER, "Events of an unknown type, skipped." },
	[KV_PC_skipped_group] = { K_COUNTER, "Events of KV-cache groups that are not "
					     "prefix-reusable (sliding window, Mamba), skipped." },
	[KV_PC_skipped_shape] = { K_COUNTER, "Events whose token count, extra keys or block "
					     "size cannot be indexed, skipped." },
	[KV_PC_skipped_remote] = { K_COUNTER, "Events for blocks of locality REMOTE, skipped." },
	[KV_PC_unknown_removed] = { K_COUNTER, "Removed blocks the engine-key map did not know "
					       "on that tier." },
	[KV_PC_offload_unknown] = { K_COUNTER, "Offload placeholders for blocks the engine-key "
					       "map did not know." },
	[KV_PC_unkeyable_extras] = { K_COUNTER, "Events cut short at a block whose extra keys "
						"no router can reproduce." },
	[KV_PC_offload_applied] = { K_COUNTER, "Offload placeholder blocks applied to known "
					       "blocks." },
	[KV_PC_dup_copies] = { K_COUNTER, "Stored blocks that were another copy of a block "
					  "already held on that tier." },
	[KV_PC_copies_kept] = { K_COUNTER, "Removed blocks of which other copies remain held." },
	[KV_PC_other_medium] = { K_COUNTER, "Stored blocks on a medium of tier other." },
	[KV_PC_ranks] = { K_GAUGE, "Data-parallel ranks subscribed for the pod." },
	[KV_PC_ttl_ms] = { K_GAUGE, "Speculative TTL in force for the pod, seconds.",
			   "kvidx_pod_ttl_seconds", 1000 },
	[KV_PC_speculations] = { K_COUNTER, "Speculative entries created for the pod by route "
					    "commits." },
	[KV_PC_confirmed_in_time] = { K_COUNTER, "Speculative entries confirmed by an event "
						 "before they expired." },
	[KV_PC_early_expiries] = { K_COUNTER, "Speculative entries that expired and were "
					      "confirmed shortly afterwards (TTL shorter than "
					      "the event path)." },
	[KV_PC_stale_expiries] = { K_COUNTER, "Speculative entries that expired without a "
					      "confirmation (failed predictions or lost "
					      "events)." },
	[KV_PC_late_confirmations] = { K_COUNTER, "Confirmations that arrived after their "
						  "speculative entry expired." },
	[KV_PC_routes_predicted] = { K_COUNTER, "Routes to the pod decided on a speculative "
						"match." },
	[KV_PC_routes_confirmed] = { K_COUNTER, "Routes to the pod decided on confirmed "
						"blocks." },
	[KV_PC_routes_nomatch] = { K_COUNTER, "Routes to the pod with no indexed match." },
	[KV_PC_outcomes] = { K_COUNTER, "Outcome reports received for routes to the pod." },
	[KV_PC_false_warm_routes] = { K_COUNTER, "Routes that expected cached blocks the pod "
						 "did not have." },
	[KV_PC_wasted_prefill_tokens] = { K_COUNTER, "Prompt tokens predicted cached on the "
						     "pod but prefilled anyway." },
	[KV_PC_spec_paused] = { K_GAUGE, "Speculation state: 0 fresh, 1 paused while replaying "
					 "or disconnected, 2 paused because the event pipeline "
					 "is broken." },
	[KV_PC_last_route_ns] = { K_AGE, "Seconds since the last route commit to the pod "
					 "(+Inf: none yet)." },
	[KV_PC_lag_negative] = { K_COUNTER, "Event batches stamped after they were applied "
					    "(clock skew between the hosts), counted as lag 0." },
	[KV_PC_lag_last_us] = { K_GAUGE, "Event path lag of the last live batch (applied minus "
					 "its ts, wall clock), seconds.",
				"kvidx_pod_event_lag_last_seconds", 1000000 },
	[KV_PC_queue_depth_peak] = { K_GAUGE, "Largest queue_depth of this and the previous "
					      "minute (subscriber backlog over time)." },
	[KV_PC_spec_routes] = { K_COUNTER, "Routes that added speculative entries to the pod "
					   "(each decided once below)." },
	[KV_PC_routes_in_time] = { K_COUNTER, "Routes whose predictions were first confirmed "
					      "before they expired." },
	[KV_PC_routes_early_expiries] = { K_COUNTER, "Routes whose predictions expired before "
						     "their first confirmation came (within the "
						     "late window)." },
	[KV_PC_routes_late_confirmations] = { K_COUNTER, "Routes first confirmed after their "
							 "predictions expired (= routes_early_"
							 "expiries)." },
	[KV_PC_routes_stale_expiries] = { K_COUNTER, "Routes none of whose predictions was "
						     "confirmed (failed predictions: p per routed "
						     "request, docs/ttl.md)." },
	[KV_PC_routes_dropped_clear] = { K_COUNTER, "Routes whose predictions were dropped "
						    "unconfirmed by a pod clear." },
	[KV_PC_routes_dropped_removed] = { K_COUNTER, "Routes whose predictions were dropped "
						      "unconfirmed by a BlockRemoved." },
	[KV_PC_routes_dropped_evicted] = { K_COUNTER, "Routes whose predictions were dropped "
						      "unconfirmed by evictions." },
	[KV_PC_routes_untracked] = { K_COUNTER, "Routes forgotten undecided by the full route "
						"map (--corr-map)." },
	[KV_PC_dropped_clear] = { K_COUNTER, "Speculative entries dropped unexpired by a pod "
					     "clear." },
	[KV_PC_dropped_removed] = { K_COUNTER, "Speculative entries dropped unexpired by a "
					       "BlockRemoved." },
	[KV_PC_dropped_evicted] = { K_COUNTER, "Speculative entries dropped unexpired to make "
					       "room." },
	[KV_PC_heartbeats] = { K_TOTAL, "Empty event batches (heartbeats) received from the pod." },
	[KV_PC_routed_silent] = { K_GAUGE, "1 while routes were committed to the pod and nothing "
					   "(no batch, no heartbeat) came from it for longer than "
					   "--stale-limit." },
	[KV_PC_remote_speculations] = { K_COUNTER, "Speculative entries created for the pod by "
						   "peer hosts' route commits (the cluster link; "
						   "also in speculations)." },
};

/* Writer counters that are levels, not running totals. */
static bool stat_is_gauge(const char *n)
{
	static const char *const g[] = { "keys", "records", "spec_records", "tombstones",
					 "arena_used", "limbo" };

	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++)
		if (!strcmp(n, g[i]))
			return true;
	return false;
}

static const char *stat_help(const char *n)
{
	static const struct {
		const char *name, *help;
	} h[] = {
		{ "keys", "Keys in the table." },
		{ "records", "Pod records in the table." },
		{ "spec_records", "Speculative pod records in the table." },
		{ "tombstones", "Deleted slots awaiting cleanup." },
		{ "arena_used", "Entry arena units in use (16 bytes each)." },
		{ "limbo", "Retired entries awaiting reclamation." },
		{ "stores", "Keys stored (confirmed) by the writer." },
		{ "confirms", "Speculative records confirmed by events." },
		{ "removes", "Records removed by events." },
		{ "speculations", "Speculative records added or extended." },
		{ "expirations", "Speculative records expired by the reaper." },
		{ "pod_clears", "Pods cleared or removed, index-wide (kvidx_pod_clears_total counts "
				"AllBlocksCleared events per pod)." },
		{ "evict_spec", "Keys evicted to make room, holding only speculative records." },
		{ "evict_confirmed", "Keys evicted to make room, holding confirmed records." },
		{ "rec_evictions", "Records evicted from a key holding its maximum of pods." },
		{ "store_failed", "Keys not stored because the table was full." },
		{ "retired", "Entries retired for reclamation." },
		{ "reclaimed", "Retired entries reclaimed." },
		{ "epochs", "Reclamation epochs advanced." },
		{ "readers_dead", "Dead readers whose registry slots were freed." },
		{ "readers_expelled", "Stalled readers expelled." },
		{ "sweep_passes", "Completed sweeps reclaiming the records of cleared pods." },
		{ "route_commits", "Route commits consumed from the readers' rings." },
		{ "route_bad", "Malformed, stale or truncated ring messages skipped." },
		{ "registry_rebuilds", "Reader registries recreated after damage (truncation)." },
		{ "registry_repairs", "Scribbled registry headers rewritten by the writer." },
		{ "bad_entries", "Damaged table entries or slot words the writer dropped." },
	};

	for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++)
		if (!strcmp(n, h[i].name))
			return h[i].help;
	return "Writer counter of the index (lib/telemetry.h KV_STATS).";
}

/* ---- rendering ---- */

static void pod_labels(FILE *f, const struct tc_pod *p)
{
	fputs("{pod=\"", f);
	tc_escape(f, p->name, TC_ESC_PROM);
	fputs("\",model=\"", f);
	tc_escape(f, p->model, TC_ESC_PROM);
	fputs("\"}", f);
}

/* Seconds from t (CLOCK_MONOTONIC ns, 0: never) to now; +Inf for never. */
static void age_value(FILE *f, uint64_t now, uint64_t t)
{
	if (!t)
		fputs("+Inf", f);
	else
		fprintf(f, "%.6f", now > t ? (double)(now - t) / 1e9 : 0.0);
}

static void render_pod_ctrs(FILE *f, const struct tc_pod *pods, int n, uint64_t now)
{
	for (unsigned c = 0; c < KV_PC_COUNT; c++) {
		const char *cn = pod_ctr_names[c];
		const struct ctr_meta *m = &pod_meta[c];
		char name[96], help[160];

		if (!cn)
			continue;
		if (m->name) {
			snprintf(name, sizeof(name), "%s", m->name);
		} else if (m->kind == K_AGE) {
			/* last_event_ns -> seconds_since_last_event */
			size_t len = strlen(cn);
			int keep = len > 3 && !strcmp(cn + len - 3, "_ns") ? (int)len - 3 : (int)len;
			snprintf(name, sizeof(name), "kvidx_pod_seconds_since_%.*s", keep, cn);
		} else if (m->kind == K_TOTAL || m->kind == K_COUNTER) {
			snprintf(name, sizeof(name), "kvidx_pod_%s_total", cn);
		} else {
			snprintf(name, sizeof(name), "kvidx_pod_%s", cn);
		}
		if (m->help)
			snprintf(help, sizeof(help), "%s", m->help);
		else
			snprintf(help, sizeof(help), "Per-pod value %s (lib/telemetry.h KV_POD_CTRS).",
				 cn);
		family(f, name, m->kind == K_COUNTER || m->kind == K_TOTAL ? "counter" :
				m->kind == K_UNTYPED ? "untyped" : "gauge", help);
		for (int i = 0; i < n; i++) {
			fputs(name, f);
			pod_labels(f, &pods[i]);
			putc(' ', f);
			if (m->kind == K_AGE)
				age_value(f, now, pods[i].ctr[c]);
			else if (m->div == 1000)
				fprintf(f, "%" PRIu64 ".%03u", pods[i].ctr[c] / 1000,
					(unsigned)(pods[i].ctr[c] % 1000));
			else if (m->div == 1000000)
				us_as_seconds(f, pods[i].ctr[c]);
			else
				fprintf(f, "%" PRIu64, pods[i].ctr[c]);
			putc('\n', f);
		}
	}
	family(f, "kvidx_pod_spec_paused_flag", "gauge",
	       "1 while the pod's speculative records do not count for readers (the pod flag "
	       "routers honour).");
	for (int i = 0; i < n; i++) {
		fputs("kvidx_pod_spec_paused_flag", f);
		pod_labels(f, &pods[i]);
		fprintf(f, " %u\n", pods[i].flags & KV_POD_SPEC_PAUSED ? 1u : 0u);
	}
}

/*
 * Whether bucket b's upper bound is exported as an le boundary: the end of the exact region
 * (15 us), then every second bucket (four per power of two, bounds within 25%), which keeps
 * a pod to 88 finite buckets instead of 191. The last two buckets go to +Inf.
 */
static bool le_bucket(unsigned b)
{
	return b == 15 || (b > 16 && b + 2 < KV_HIST_BUCKETS && (b - 16) % 2 == 1);
}

#define HIST_NAME "kvidx_pod_confirmation_latency_seconds"
#define LAG_NAME "kvidx_pod_event_lag_seconds"

static void render_hist(FILE *f, const struct kv_view *v, const struct tc_pod *pods, int n,
			const char *name, enum kv_hist_id which, const char *help)
{
	family(f, name, "histogram", help);
	for (int i = 0; i < n; i++) {
		struct kv_tm_hist_ro h = kv_tm_view_hist(v, pods[i].idx, which);
		uint64_t c[KV_HIST_BUCKETS], acc = 0;
		double sum_us = 0;

		if (!kv_tm_ro_ok(h))
			continue;
		/* One copy, so that the buckets, +Inf and _count agree. */
		kv_tm_ro_buckets(h, c);
		for (unsigned b = 0; b < KV_HIST_BUCKETS; b++) {
			acc += c[b];
			if (b + 1 < KV_HIST_BUCKETS)
				sum_us += (double)c[b] *
					  ((double)kv_hist_lower(b) + (double)kv_hist_upper(b)) / 2;
			else
				sum_us += (double)c[b] * (double)kv_hist_lower(b);
			if (!le_bucket(b))
				continue;
			fprintf(f, "%s_bucket", name);
			fputs("{pod=\"", f);
			tc_escape(f, pods[i].name, TC_ESC_PROM);
			fputs("\",model=\"", f);
			tc_escape(f, pods[i].model, TC_ESC_PROM);
			fputs("\",le=\"", f);
			us_as_seconds(f, kv_hist_upper(b));
			fprintf(f, "\"} %" PRIu64 "\n", acc);
		}
		fprintf(f, "%s_bucket", name);
		fputs("{pod=\"", f);
		tc_escape(f, pods[i].name, TC_ESC_PROM);
		fputs("\",model=\"", f);
		tc_escape(f, pods[i].model, TC_ESC_PROM);
		fprintf(f, "\",le=\"+Inf\"} %" PRIu64 "\n", acc);
		fprintf(f, "%s_sum", name);
		pod_labels(f, &pods[i]);
		fprintf(f, " %.6f\n", sum_us / 1e6);
		fprintf(f, "%s_count", name);
		pod_labels(f, &pods[i]);
		fprintf(f, " %" PRIu64 "\n", acc);
	}
}

/* Quantiles of a recent (decayed) histogram, which is no Prometheus histogram (its counts
 * go down): as a summary's quantiles (a summary is quantiles over a recent window; no _sum
 * or _count, which would have to be cumulative: the cumulative histograms have them).
 * Nothing for an empty histogram. */
static const double q_list[] = { 0.5, 0.95, 0.99 };
static const char *const q_names[] = { "0.5", "0.95", "0.99" };

static void quantiles(FILE *f, const char *name, struct kv_tm_hist_ro h, const char *labels)
{
	uint64_t c[KV_HIST_BUCKETS], us;

	kv_tm_ro_buckets(h, c);
	for (unsigned q = 0; q < 3; q++) {
		if (kv_hist_quantile(c, q_list[q], &us) < 0)
			return;
		fprintf(f, "%s{%s,quantile=\"%s\"} ", name, labels, q_names[q]);
		us_as_seconds(f, us);
		putc('\n', f);
	}
}

/* pod="..",model=".." escaped into buf (for quantiles()). */
static void pod_label_str(char *buf, size_t len, const struct tc_pod *p)
{
	char *m = NULL;
	size_t ml = 0;
	FILE *mf = open_memstream(&m, &ml);

	if (!mf) {
		snprintf(buf, len, "pod=\"\"");
		return;
	}
	fputs("pod=\"", mf);
	tc_escape(mf, p->name, TC_ESC_PROM);
	fputs("\",model=\"", mf);
	tc_escape(mf, p->model, TC_ESC_PROM);
	fputs("\"", mf);
	fclose(mf);
	snprintf(buf, len, "%s", m);
	free(m);
}

static const char *const class_names[KV_PROMPT_CLASSES] = { "lt512", "512-2047", "2048-8191",
							    "ge8192" };

static void render_recent(FILE *f, const struct kv_view *v, const struct tc_pod *pods, int n)
{
	char lab[1024], cl[1100];

	family(f, "kvidx_pod_confirmation_latency_recent_seconds", "summary",
	       "Quantiles of the recent route-to-confirmation latency (the window that halves "
	       "every 60 s, which the adaptive TTL uses); bucket upper bounds.");
	for (int i = 0; i < n; i++) {
		pod_label_str(lab, sizeof(lab), &pods[i]);
		quantiles(f, "kvidx_pod_confirmation_latency_recent_seconds",
			  kv_tm_view_hist(v, pods[i].idx, KV_HIST_CONFIRM_RECENT), lab);
	}
	family(f, "kvidx_pod_event_lag_recent_seconds", "summary",
	       "Quantiles of the recent event path lag (batch ts to applied, wall clock): the "
	       "measured subscriber backlog part of J.");
	for (int i = 0; i < n; i++) {
		pod_label_str(lab, sizeof(lab), &pods[i]);
		quantiles(f, "kvidx_pod_event_lag_recent_seconds",
			  kv_tm_view_hist(v, pods[i].idx, KV_HIST_LAG_RECENT), lab);
	}
	family(f, "kvidx_pod_class_confirmation_latency_seconds", "summary",
	       "Quantiles of the recent route-to-confirmation latency by prompt-length class "
	       "(prompt tokens in full blocks: lt512, 512-2047, 2048-8191, ge8192).");
	for (int i = 0; i < n; i++) {
		pod_label_str(lab, sizeof(lab), &pods[i]);
		for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++) {
			snprintf(cl, sizeof(cl), "%s,prompt_class=\"%s\"", lab, class_names[c]);
			quantiles(f, "kvidx_pod_class_confirmation_latency_seconds",
				  kv_tm_view_hist(v, pods[i].idx, KV_HIST_CLASS(c)), cl);
		}
	}
	family(f, "kvidx_pod_class_confirmations_recent", "gauge",
	       "Samples in the recent latency histogram of each prompt-length class.");
	for (int i = 0; i < n; i++) {
		pod_label_str(lab, sizeof(lab), &pods[i]);
		for (unsigned c = 0; c < KV_PROMPT_CLASSES; c++)
			fprintf(f, "kvidx_pod_class_confirmations_recent{%s,prompt_class=\"%s\"} "
				   "%" PRIu64 "\n", lab, class_names[c],
				kv_tm_ro_count(kv_tm_view_hist(v, pods[i].idx, KV_HIST_CLASS(c))));
	}
}

/* Names of the router counters from telemetry.h's X-macro. */
static const char *const router_ctr_names[KV_RT_COUNT] = {
#define RT_CTR_NAME(n) [KV_RT_##n] = #n,
	KV_ROUTER_CTRS(RT_CTR_NAME)
#undef RT_CTR_NAME
};

/*
 * Per router worker, for registry slots that committed or reported anything, labelled
 * router="PID-CLAIM": the owner's pid and the time it claimed the slot (CLOCK_MONOTONIC
 * milliseconds, registry rs_claimed_ns), so a slot taken over by another process after a
 * restart is another series, never the old one going on. A slot whose statistics are a
 * former owner's (the pid the writer recorded at the last commit is not the registry's) is
 * left out until its new owner commits (ingestd then starts its statistics afresh).
 * kvidx_router_info{router,slot,pid} 1 joins a series to its slot and pid.
 */
static bool router_label(struct kvidx_reader *r, const struct kv_view *v, uint32_t s,
			 char *lab, size_t len)
{
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(r);
	const struct kvidx_reader_slot *slots = (const void *)((const char *)ctl + sizeof(*ctl));
	uint32_t nslots = ld_relaxed(&ctl->ch_max_readers);

	if (nslots > v->hdr->dh_max_readers)
		nslots = v->hdr->dh_max_readers;
	if (s >= v->max_readers || s >= nslots || !(kv_tm_view_router(v, (int)s, KV_RT_routes) |
						    kv_tm_view_router(v, (int)s, KV_RT_outcomes)))
		return false;
	uint64_t pid = kv_tm_view_router(v, (int)s, KV_RT_pid);
	if (pid != (uint64_t)(uint32_t)ld_relaxed(&slots[s].rs_pid))
		return false;
	snprintf(lab, len, "router=\"%" PRIu64 "-%" PRIu64 "\"", pid,
		 ld_relaxed(&slots[s].rs_claimed_ns) / 1000000u);
	return true;
}

static void render_routers(FILE *f, struct kvidx_reader *r, const struct kv_view *v,
			   uint64_t now)
{
	char lab[80];

	family(f, "kvidx_router_info", "gauge",
	       "1 per router worker: its registry slot and process id (router=\"PID-CLAIM\", "
	       "CLAIM the slot's claim time in ms of CLOCK_MONOTONIC).");
	for (uint32_t s = 0; s < v->max_readers; s++) {
		if (router_label(r, v, s, lab, sizeof(lab)))
			fprintf(f, "kvidx_router_info{%s,slot=\"%u\",pid=\"%" PRIu64 "\"} 1\n", lab,
				s, kv_tm_view_router(v, (int)s, KV_RT_pid));
	}
	for (unsigned c = 0; c < KV_RT_COUNT; c++) {
		char name[96];
		bool age = c == KV_RT_last_route_ns;
		if (c == KV_RT_pid)
			continue; /* in kvidx_router_info */
		if (age)
			snprintf(name, sizeof(name), "kvidx_router_seconds_since_last_route");
		else
			snprintf(name, sizeof(name), "kvidx_router_%s_total", router_ctr_names[c]);
		family(f, name, age ? "gauge" : "counter",
		       age ? "Seconds since the router worker's last route commit." :
			     "Per router worker count; see the pod family of the same name.");
		for (uint32_t s = 0; s < v->max_readers; s++) {
			if (!router_label(r, v, s, lab, sizeof(lab)))
				continue;
			uint64_t val = kv_tm_view_router(v, (int)s, (enum kv_router_ctr)c);
			fprintf(f, "%s{%s} ", name, lab);
			if (age)
				age_value(f, now, val);
			else
				fprintf(f, "%" PRIu64, val);
			putc('\n', f);
		}
	}
	family(f, "kvidx_router_confirmation_latency_seconds", "summary",
	       "Quantiles of the recent route-to-confirmation latency of the routes a router "
	       "worker committed.");
	for (uint32_t s = 0; s < v->max_readers; s++) {
		if (!router_label(r, v, s, lab, sizeof(lab)) ||
		    !kv_tm_view_router(v, (int)s, KV_RT_routes))
			continue;
		quantiles(f, "kvidx_router_confirmation_latency_seconds",
			  kv_tm_view_router_hist(v, (int)s), lab);
	}
}

/*
 * One index-wide writer counter, as kvidx_<stat>; or as kvidx_index_<stat> where that name
 * is a per-pod family already (stat pod_clears against the pod counter clears): a name may
 * carry one family only, or Prometheus rejects the whole scrape.
 */
static void stat_out(FILE *f, const char *stat, uint64_t val)
{
	char name[96];
	bool clash = false;

	if (!strncmp(stat, "pod_", 4))
		for (unsigned c = 0; c < KV_PC_COUNT && !clash; c++)
			clash = pod_ctr_names[c] && !strcmp(stat + 4, pod_ctr_names[c]);
	snprintf(name, sizeof(name), "kvidx_%s%s%s", clash ? "index_" : "", stat,
		 stat_is_gauge(stat) ? "" : "_total");
	family(f, name, stat_is_gauge(stat) ? "gauge" : "counter", stat_help(stat));
	fprintf(f, "%s %" PRIu64 "\n", name, val);
}

static void render_index(FILE *f, struct kvidx_reader *r, const struct kv_view *v,
			 const struct kvidx_info *info, int npods, uint64_t now)
{
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(r);
	/* As in kvidx-dump: the registry is writable by every reader, so its slot count is
	 * bounded by what the (writer-only) data segment says. */
	const struct kvidx_reader_slot *slots = (const void *)((const char *)ctl + sizeof(*ctl));
	uint32_t nslots = ld_relaxed(&ctl->ch_max_readers), active = 0, expelled = 0;

	if (nslots > v->hdr->dh_max_readers)
		nslots = v->hdr->dh_max_readers;
	for (uint32_t i = 0; i < nslots; i++) {
		unsigned st = KV_RS_STATE(ld_acquire(&slots[i].rs_state));
		active += st == KV_RS_ACTIVE;
		expelled += st == KV_RS_EXPELLED;
	}

#define STAT_OUT(n) stat_out(f, #n, kv_tm_view_stat(v, KV_ST_##n));
	KV_STATS(STAT_OUT)
#undef STAT_OUT

	family(f, "kvidx_registry_epoch", "gauge", "Reclamation epoch of the reader registry.");
	fprintf(f, "kvidx_registry_epoch %" PRIu64 "\n", ld_relaxed(&kv_reader_idx(r)->ih_epoch));
	family(f, "kvidx_reader_slots", "gauge", "Slots in the reader registry.");
	fprintf(f, "kvidx_reader_slots %" PRIu32 "\n", nslots);
	family(f, "kvidx_readers", "gauge",
	       "Reader registry slots in use, by state (the scraping reader included).");
	fprintf(f, "kvidx_readers{state=\"active\"} %" PRIu32 "\n", active);
	fprintf(f, "kvidx_readers{state=\"expelled\"} %" PRIu32 "\n", expelled);
	family(f, "kvidx_writer_heartbeat_age_seconds", "gauge",
	       "Seconds since the writer's last housekeeping tick (a large value: writer gone).");
	fprintf(f, "kvidx_writer_heartbeat_age_seconds %.6f\n",
		now > info->heartbeat_ns ? (double)(now - info->heartbeat_ns) / 1e9 : 0.0);
	family(f, "kvidx_generation", "gauge", "Data generation readers are served from.");
	fprintf(f, "kvidx_generation %" PRIu64 "\n", info->generation);
	family(f, "kvidx_pods", "gauge", "Active pods.");
	fprintf(f, "kvidx_pods %d\n", npods);
	family(f, "kvidx_pods_max", "gauge", "Pod table size.");
	fprintf(f, "kvidx_pods_max %" PRIu32 "\n", v->max_pods);
}

int prom_render(struct kvidx_reader *r, FILE *out)
{
	struct kvidx_info info;
	struct tc_pod *pods = NULL;
	int rc, n;

	rc = kvidx_reader_info(r, &info);
	if (rc == -KVIDX_ERETRY)
		rc = kvidx_reader_info(r, &info);
	if (rc < 0)
		return rc;
	const struct kv_view *v = kv_reader_view(r);
	uint64_t now = kvidx_now_ns();
	n = tc_pods_snapshot(r, &pods);
	if (n < 0)
		return n;
	render_pod_ctrs(out, pods, n, now);
	render_hist(out, v, pods, n, HIST_NAME, KV_HIST_CONFIRM,
		    "Route-to-confirmation latency (route commit to the confirming event applied), "
		    "cumulative since the pod was added. Boundaries are every second bucket of the "
		    "index's log-linear histogram (upper bounds within 25%). _sum is approximated "
		    "from bucket midpoints (the open last bucket at its lower bound), not measured.");
	render_hist(out, v, pods, n, LAG_NAME, KV_HIST_LAG,
		    "Event path lag per live batch: applied minus published (the batch's ts), wall "
		    "clock, cumulative; negative lags count as 0 (kvidx_pod_lag_negative_total). Buckets "
		    "and _sum as for the confirmation latency.");
	render_recent(out, v, pods, n);
	render_routers(out, r, v, now);
	render_index(out, r, v, &info, n, now);
	free(pods);
	return fflush(out) || ferror(out) ? -EIO : 0;
}

