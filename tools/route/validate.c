/*
 * validate.c — kvidx-route --validate: the paired-gap validation of docs/ttl.md
 * ("Paired request gaps: the validation") against live pods, real vLLM or
 * kvidx-fakepod.
 *
 * A pair is two requests that share a long exact prefix of fresh random token ids (nothing
 * is cached before) and differ in a short suffix. The first is routed and committed like
 * any request (pick.c); the second is sent a gap after the first one's commit. Gaps: below
 * the p50 of the pods' route-to-confirmation latency, near its p95, near the TTL in force
 * and just beyond it (from the live index's recent histograms and TTL), or --gaps. Each
 * (scenario, gap) cell runs --pairs pairs, started --stagger-ms apart.
 *
 * Scenarios (what happens to the first request):
 *   success   nothing: it is prefilled and its blocks' events confirm the prediction
 *   cancel    the client aborts it right after sending it (a real client cancellation)
 *   fail      (fakepods) its prefill fails: X-Fakepod-Fault: fail
 *   restart   (fakepods) its pod restarts as it arrives: X-Fakepod-Fault: restart
 *   delay     (fakepods) its events come --delay-ms after it: X-Fakepod-Fault: delay=MSms
 *
 * Per cell: how the second request routed (predicted / confirmed / nomatch), whether it went
 * to the first one's pod, the cached tokens it realized, the TTFT of both, and what became of
 * the first request's prediction, watched in the index itself on a block only that request
 * holds (its last suffix block): confirmed while trusted, lost (the time it stopped counting,
 * from the commit), or lost and confirmed later (late); and the index counters meanwhile:
 * false warm routes, stale and early expiries, late confirmations. Stale expiries are counted
 * by the writer --late-window after the expiry, so with ingestd's default window (10 s or
 * more) they land in a later cell: compare the totals.
 *
 * What the validation must show: the success case replaces prediction with confirmation before
 * expiry (second request predicted below the event path, confirmed after it); failure
 * cases lose the prediction at the TTL and never look confirmed.
 */
#include "route.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "hist.h"
#include "inspect.h"
#include "telemetry.h"
#include "rng.h"
#include "duration.h"

#define MAX_GAPS 8
#define VOCAB 50000u

/* In running order: a restart disturbs the pod's stream (ingestd clears it), so it runs last. */
enum scen { SC_SUCCESS, SC_CANCEL, SC_FAIL, SC_DELAY, SC_RESTART, SC_COUNT };
static const char *const scen_name[SC_COUNT] = { "success", "cancel", "fail", "delay",
						 "restart" };
static const enum kv_pod_ctr watched[] = { KV_PC_false_warm_routes, KV_PC_stale_expiries,
					   KV_PC_early_expiries, KV_PC_late_confirmations,
					   KV_PC_confirmed_in_time };
#define NWATCH (sizeof(watched) / sizeof(watched[0]))

struct pair;

struct val;

struct vreq {
	struct call call;
	struct pair *p;
	struct val *V;
	bool second, sent, done;
	uint64_t corr, t_sent;
	struct decision d;
	struct sse sse;
	struct tc_buf raw;
	struct usage u;
	long status;
	CURLcode rc;
};

struct pair {
	struct vreq a, b;
	uint32_t *ta, *tb;
	size_t n;
	uint64_t due_a, due_b, probe_key, probe_until;
	int probe_pod;            /* index pod of the first request, -1: not committed */
	bool probing, seen_spec;
	uint64_t t_conf, t_lost;  /* from the first commit; 0: not seen */
};

struct cell {
	enum scen sc;
	uint64_t gap_ms;
	unsigned kinds[K_COUNT], same, answered, first_failed, errors;
	uint64_t cached;
	struct samples ttft_a, ttft_b, lost_ms;
	unsigned pred_conf, pred_lost, pred_late, pred_none;
	int64_t ctr[NWATCH];
};

struct val {
	struct opts *o;
	struct router rt;
	struct client cl;
	uint64_t rng, corr_hi, counter, ttl_ms;
	int sigfd;
	bool stop;
};

/* ---- the index, as the validation watches it ----------------------------------------------- */

static uint64_t pod_ctr(struct val *V, int pod, enum kv_pod_ctr c)
{
	return kv_tm_view_pod(kv_reader_view(V->rt.r), pod, c);
}

static void ctr_snapshot(struct val *V, int64_t *out)
{
	struct kvidx_info in;

	kvidx_reader_info(V->rt.r, &in); /* the current generation */
	for (size_t k = 0; k < NWATCH; k++) {
		out[k] = 0;
		for (int i = 0; i < V->o->npods; i++)
			if (V->o->pods[i].idx >= 0)
				out[k] += (int64_t)pod_ctr(V, V->o->pods[i].idx, watched[k]);
	}
}

/* 0 absent, 1 a live prediction, 2 confirmed: how pod holds key for a router now. */
static int key_state(struct val *V, uint64_t key, int pod)
{
	struct kvidx_rec rec[16];
	int n = kvidx_lookup(V->rt.r, key, rec, 16);

	if (n == -KVIDX_ERETRY)
		n = kvidx_lookup(V->rt.r, key, rec, 16);
	for (int i = 0; i < n; i++)
		if (rec[i].pod == pod)
			return rec[i].speculative ? 1 : 2;
	return 0;
}

/* The TTL in force (largest over the pods) and the recent p50 / p95 of confirmation
 * latency over every pod, in ms (0 without samples). */
static void live_timing(struct val *V, double *p50, double *p95)
{
	const struct kv_view *v = kv_reader_view(V->rt.r);
	uint64_t merged[KV_HIST_BUCKETS] = { 0 }, one[KV_HIST_BUCKETS], us;

	V->ttl_ms = 0;
	for (int i = 0; i < V->o->npods; i++) {
		int idx = V->o->pods[i].idx;
		if (idx < 0)
			continue;
		uint64_t t = pod_ctr(V, idx, KV_PC_ttl_ms);
		if (t > V->ttl_ms)
			V->ttl_ms = t;
		kv_tm_ro_buckets(kv_tm_view_hist(v, idx, KV_HIST_CONFIRM_RECENT), one);
		for (unsigned b = 0; b < KV_HIST_BUCKETS; b++)
			merged[b] += one[b];
	}
	if (!V->ttl_ms)
		V->ttl_ms = 2000;
	*p50 = kv_hist_quantile(merged, 0.5, &us) == 0 ? (double)us / 1e3 : 0;
	*p95 = kv_hist_quantile(merged, 0.95, &us) == 0 ? (double)us / 1e3 : 0;
}

/* ---- requests ------------------------------------------------------------------------------ */

static void on_event(void *arg, const char *ev, size_t len)
{
	usage_parse(ev, len, true, &((struct vreq *)arg)->u, NULL);
}

static size_t on_data(struct call *c, const char *p, size_t n)
{
	struct vreq *q = c->arg;

	if (strstr(c->ctype, "event-stream")) {
		sse_feed(&q->sse, p, n, on_event, q);
	} else if (q->raw.len + n < (1u << 20)) {
		tc_buf_add(&q->raw, p, n);
	}
	return n;
}

static void on_done(struct call *c, CURLcode rc)
{
	struct vreq *q = c->arg;

	q->done = true;
	q->rc = rc;
	q->status = c->status;
	if (!q->u.have && q->raw.len)
		usage_parse(q->raw.s, q->raw.len, false, &q->u, NULL);
	/* The outcome, as any router reports it: what the pod cached, 0 for no answer. */
	route_load_end(&q->V->rt, &q->d);
	route_report(&q->V->rt, &q->d, q->corr,
		     rc == CURLE_OK && c->status == 200 ? q->u.cached_tokens : 0,
		     (uint32_t)q->p->n);
}

static void send_req(struct val *V, struct vreq *q, const uint32_t *t, size_t n, enum scen sc,
		     uint64_t now)
{
	const struct opts *o = V->o;
	char url[URL_MAX + 32], id[40], fault[64] = "";

	q->corr = V->corr_hi | (++V->counter & 0xffffffffull);
	q->t_sent = now;
	q->sent = true;
	route_pick(&V->rt, t, n, q->corr, NULL, &q->d, now);
	route_load_start(&V->rt, &q->d); /* as any router counts it: in the view as its own */
	q->call.arg = q;
	q->call.on_data = on_data;
	q->call.on_done = on_done;
	q->call.body = completion_body(o->model, t, n, 1, true, &q->call.len);
	snprintf(id, sizeof(id), "kvidx-val-%016" PRIx64, q->corr);
	call_header(&q->call, "Content-Type", "application/json");
	call_header(&q->call, "X-Request-Id", id);
	if (!q->second) {
		if (sc == SC_FAIL)
			snprintf(fault, sizeof(fault), "fail");
		else if (sc == SC_RESTART)
			snprintf(fault, sizeof(fault), "restart");
		else if (sc == SC_DELAY)
			snprintf(fault, sizeof(fault), "delay=%" PRIu64 "ms", o->delay_ms);
		if (fault[0])
			call_header(&q->call, "X-Fakepod-Fault", fault);
		q->call.abort_after_upload = sc == SC_CANCEL;
	}
	snprintf(url, sizeof(url), "%s/v1/completions", o->pods[q->d.cand].url);
	if (call_start(&V->cl, &q->call, "POST", url, (long)o->reply_timeout_ms,
		       (long)o->connect_timeout_ms)) {
		q->done = true;
		q->rc = CURLE_FAILED_INIT;
		route_load_end(&V->rt, &q->d);
	}
}

static void fresh_prompt(struct val *V, struct pair *p)
{
	const struct opts *o = V->o;
	size_t pre = o->prefix_blocks * V->rt.bs, suf = (o->suffix_blocks ? o->suffix_blocks : 1)
							 * V->rt.bs;

	p->n = pre + suf;
	p->ta = tc_xrealloc(NULL, p->n * sizeof(*p->ta));
	p->tb = tc_xrealloc(NULL, p->n * sizeof(*p->tb));
	for (size_t i = 0; i < pre; i++)
		p->ta[i] = p->tb[i] = (uint32_t)(tc_rng_next(&V->rng) % VOCAB);
	for (size_t i = pre; i < p->n; i++) {
		p->ta[i] = (uint32_t)(tc_rng_next(&V->rng) % VOCAB);
		p->tb[i] = (uint32_t)(tc_rng_next(&V->rng) % VOCAB);
	}
}

/* Watches the first request's own last block on its pod. */
static void probe(struct val *V, struct pair *p, uint64_t now)
{
	int st = key_state(V, p->probe_key, p->probe_pod);
	uint64_t t = now - p->a.t_sent;

	if (st == 1)
		p->seen_spec = true;
	if (st == 2 && !p->t_conf) {
		p->t_conf = t ? t : 1;
		p->probing = false;
	}
	if (st == 0 && p->seen_spec && !p->t_lost)
		p->t_lost = t ? t : 1;
	if (now > p->probe_until)
		p->probing = false;
}

static void free_req(struct vreq *q)
{
	call_destroy(&q->call);
	sse_free(&q->sse);
	free(q->raw.s);
}

/* One finished pair into its cell's figures, then freed. */
static void tally_pair(struct val *V, struct cell *c, struct pair *p)
{
	struct vreq *a = &p->a, *b = &p->b;

	if (b->sent) {
		c->kinds[b->d.kind]++;
		c->same += a->d.cand == b->d.cand;
	}
	if (!(a->rc == CURLE_OK && a->status == 200))
		c->first_failed++;
	else if (a->call.t_first)
		samples_add(&c->ttft_a, (double)(a->call.t_first - a->t_sent) / 1e6);
	if (b->rc == CURLE_OK && b->status == 200) {
		c->answered++;
		c->cached += b->u.cached_tokens;
		if (b->call.t_first)
			samples_add(&c->ttft_b, (double)(b->call.t_first - b->t_sent) / 1e6);
	} else {
		c->errors++;
	}
	/* No prediction to watch: not committed, or never visible (speculation paused
	 * for the pod, or the commit dropped). */
	if (p->probe_pod < 0 || !p->seen_spec)
		c->pred_none++;
	else if (p->t_conf && (!p->t_lost || p->t_conf < p->t_lost))
		c->pred_conf++;
	else if (p->t_lost) {
		c->pred_lost++;
		samples_add(&c->lost_ms, (double)p->t_lost / 1e6);
		if (p->t_conf)
			c->pred_late++;
	} else {
		c->pred_none++;
	}
	if (a->call.active)
		call_cancel(&V->cl, &a->call);
	if (b->call.active)
		call_cancel(&V->cl, &b->call);
	free_req(a);
	free_req(b);
	free(p->ta);
	free(p->tb);
}

/* Runs one cell; false if stopped by a signal. */
static bool run_cell(struct val *V, struct cell *c)
{
	const struct opts *o = V->o;
	unsigned n = (unsigned)o->pairs;
	struct pair *pairs = tc_xrealloc(NULL, n * sizeof(*pairs));
	uint64_t t0 = kvidx_now_ns(), stagger = o->stagger_ms * NS_PER_MS;
	int64_t before[NWATCH], after[NWATCH];

	/* A restart disturbs every request in flight: restart pairs run one at a time. */
	if (c->sc == SC_RESTART)
		stagger = (c->gap_ms + V->ttl_ms + 500) * NS_PER_MS;
	memset(pairs, 0, n * sizeof(*pairs));
	for (unsigned i = 0; i < n; i++) {
		fresh_prompt(V, &pairs[i]);
		pairs[i].due_a = t0 + i * stagger;
		pairs[i].a.p = pairs[i].b.p = &pairs[i];
		pairs[i].a.V = pairs[i].b.V = V;
		pairs[i].b.second = true;
		pairs[i].a.d.cand = pairs[i].b.d.cand = -1;
		pairs[i].probe_pod = -1;
	}
	ctr_snapshot(V, before);
	for (;;) {
		uint64_t now = kvidx_now_ns(), next = now + 100 * NS_PER_MS;
		bool busy = false;

		for (unsigned i = 0; i < n; i++) {
			struct pair *p = &pairs[i];

			if (!p->a.sent && now >= p->due_a) {
				send_req(V, &p->a, p->ta, p->n, c->sc, now);
				p->due_b = p->a.t_sent + c->gap_ms * NS_PER_MS;
				if (p->a.d.committed) {
					size_t nk;
					const uint64_t *k = route_keys(&V->rt, p->ta, p->n, &nk);
					p->probe_key = k[nk - 1];
					p->probe_pod = p->a.d.pod;
					p->probing = true;
					p->probe_until = p->a.t_sent +
							 (V->ttl_ms + 500 +
							  (c->sc == SC_DELAY ? o->delay_ms : 0)) *
								 NS_PER_MS;
				}
			}
			if (p->a.sent && !p->b.sent && now >= p->due_b)
				send_req(V, &p->b, p->tb, p->n, c->sc, now);
			if (p->probing)
				probe(V, p, now);
			if (!p->a.sent && p->due_a < next)
				next = p->due_a;
			if (p->a.sent && !p->b.sent && p->due_b < next)
				next = p->due_b;
			busy |= !p->a.done || !p->b.sent || !p->b.done || p->probing;
		}
		if (!busy)
			break;
		for (unsigned i = 0; i < n; i++)
			if (pairs[i].probing)
				next = now + 2 * NS_PER_MS;
		client_pump(&V->cl);
		struct curl_waitfd w = { .fd = V->sigfd, .events = CURL_WAIT_POLLIN };
		int ms = next > now ? (int)((next - now + NS_PER_MS - 1) / NS_PER_MS) : 0;
		if (client_wait_sig(&V->cl, &w, 1, ms) > 0) {
			V->stop = true;
			break;
		}
		client_pump(&V->cl);
	}
	ctr_snapshot(V, after);
	for (size_t k = 0; k < NWATCH; k++)
		c->ctr[k] = after[k] - before[k];
	for (unsigned i = 0; i < n; i++)
		tally_pair(V, c, &pairs[i]);
	free(pairs);
	return !V->stop;
}

/* ---- output -------------------------------------------------------------------------------- */

static void print_text(struct val *V, struct cell *cells, size_t nc, double p50, double p95)
{
	printf("validate: TTL in force %" PRIu64 " ms; confirmation latency p50 %.1f ms, p95 %.1f "
	       "ms (recent, all pods); %" PRIu64 " pairs per cell; prefix %" PRIu64
	       " blocks, suffix %" PRIu64 "\n",
	       V->ttl_ms, p50, p95, V->o->pairs, V->o->prefix_blocks,
	       V->o->suffix_blocks ? V->o->suffix_blocks : 1);
	printf("%-8s %7s | %-32s | %-19s | %-30s | %s\n", "", "", "second request",
	       "TTFT p50 ms", "first request's prediction", "index counters");
	printf("%-8s %7s | %5s %5s %5s %4s %8s | %9s %9s | %5s %5s %4s %4s %8s | %5s %5s %5s "
	       "%5s\n",
	       "scenario", "gap_ms", "pred", "conf", "none", "same", "cached", "first", "second",
	       "conf", "lost", "late", "none", "lost_ms", "fwarm", "stale", "early", "lateC");
	for (size_t i = 0; i < nc; i++) {
		struct cell *c = &cells[i];
		double cached = c->answered ? (double)c->cached / c->answered : 0;

		char ta[16] = "-", tb[16] = "-", lm[16] = "-";

		if (c->ttft_a.n)
			snprintf(ta, sizeof(ta), "%.2f", samples_q(&c->ttft_a, 0.5));
		if (c->ttft_b.n)
			snprintf(tb, sizeof(tb), "%.2f", samples_q(&c->ttft_b, 0.5));
		if (c->lost_ms.n)
			snprintf(lm, sizeof(lm), "%.1f", samples_mean(&c->lost_ms));
		printf("%-8s %7" PRIu64 " | %5u %5u %5u %4u %8.1f | %9s %9s | %5u %5u %4u %4u "
		       "%8s | %5" PRId64 " %5" PRId64 " %5" PRId64 " %5" PRId64 "%s\n",
		       scen_name[c->sc], c->gap_ms, c->kinds[K_PREDICTED], c->kinds[K_CONFIRMED],
		       c->kinds[K_NOMATCH], c->same, cached, ta, tb, c->pred_conf, c->pred_lost,
		       c->pred_late, c->pred_none, lm, c->ctr[0], c->ctr[1], c->ctr[2], c->ctr[3],
		       c->errors ? "  (second request errors)" : "");
	}
	printf("columns: pred/conf/none = second request routed on a prediction / confirmed "
	       "blocks / no match; same = to the first one's pod; cached = tokens it found "
	       "cached (mean); conf/lost/late/none = the first request's prediction confirmed "
	       "while trusted / lost (lost_ms after its commit, mean) / lost then confirmed / "
	       "never seen; fwarm, stale, early, lateC = false warm routes, stale and early "
	       "expiries, late confirmations counted meanwhile\n");
}

static void print_json(struct val *V, struct cell *cells, size_t nc, double p50, double p95)
{
	printf("{\"ttl_ms\":%" PRIu64 ",\"latency_p50_ms\":%.3f,\"latency_p95_ms\":%.3f,"
	       "\"pairs\":%" PRIu64 ",\"prefix_blocks\":%" PRIu64 ",\"cells\":[",
	       V->ttl_ms, p50, p95, V->o->pairs, V->o->prefix_blocks);
	for (size_t i = 0; i < nc; i++) {
		struct cell *c = &cells[i];

		printf("%s{\"scenario\":\"%s\",\"gap_ms\":%" PRIu64 ",\"second\":{\"predicted\":%u,"
		       "\"confirmed\":%u,\"nomatch\":%u},\"same_pod\":%u,\"answered\":%u,"
		       "\"errors\":%u,\"first_failed\":%u,\"cached_tokens\":%" PRIu64
		       ",\"ttft_first_ms\":%.3f,\"ttft_second_ms\":%.3f,\"prediction\":{"
		       "\"confirmed\":%u,\"lost\":%u,\"late\":%u,\"none\":%u,\"lost_ms\":%.1f},"
		       "\"index\":{\"false_warm_routes\":%" PRId64 ",\"stale_expiries\":%" PRId64
		       ",\"early_expiries\":%" PRId64 ",\"late_confirmations\":%" PRId64
		       ",\"confirmed_in_time\":%" PRId64 "}}",
		       i ? "," : "", scen_name[c->sc], c->gap_ms, c->kinds[K_PREDICTED],
		       c->kinds[K_CONFIRMED], c->kinds[K_NOMATCH], c->same, c->answered, c->errors,
		       c->first_failed, c->cached, samples_q(&c->ttft_a, 0.5),
		       samples_q(&c->ttft_b, 0.5), c->pred_conf, c->pred_lost, c->pred_late,
		       c->pred_none, samples_mean(&c->lost_ms), c->ctr[0], c->ctr[1], c->ctr[2],
		       c->ctr[3], c->ctr[4]);
	}
	printf("]}\n");
}

/* ---- the run ------------------------------------------------------------------------------- */

/*
 * --gaps: up to max durations in the tools' one grammar (tc_parse_duration()),
 * comma-separated, each as whole milliseconds of at most 10 minutes. Usage errors exit 2.
 */
static size_t parse_gaps(const char *s, uint64_t *out, size_t max)
{
	char buf[256], *save = NULL;
	size_t n = 0;

	if (strlen(s) >= sizeof(buf))
		tc_usage_error("bad --gaps: longer than %zu bytes", sizeof(buf) - 1);
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		double sec, ms, frac;
		int rc = tc_parse_duration(t, &sec);

		if (rc < 0)
			tc_usage_error("bad --gaps '%s': %s", t, tc_duration_error(rc));
		ms = sec * 1000;
		if (ms > 600000)
			tc_usage_error("bad --gaps '%s': at most 10m", t);
		uint64_t whole = (uint64_t)(ms + 0.5);
		frac = ms - (double)whole;
		if (frac > 1e-6 || frac < -1e-6)
			tc_usage_error("bad --gaps '%s': finer than a millisecond", t);
		if (n == max)
			tc_usage_error("bad --gaps '%s': at most %zu gaps", s, max);
		out[n++] = whole;
	}
	if (!n)
		tc_usage_error("bad --gaps '%s': expected durations, comma-separated (40ms,1.5s)",
			       s);
	return n;
}

int validate_main(struct opts *o, int sigfd)
{
	static struct val V;
	bool want[SC_COUNT] = { false };
	uint64_t gaps[MAX_GAPS];
	size_t ngaps = 0, nc = 0;
	double p50, p95;
	int rc = 0;

	if (o->scenarios) {
		char buf[128], *save = NULL;
		snprintf(buf, sizeof(buf), "%s", o->scenarios);
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			int k;
			for (k = 0; k < SC_COUNT && strcmp(t, scen_name[k]); k++)
				;
			if (k == SC_COUNT)
				tc_usage_error("--scenarios: unknown scenario '%s' (success, cancel, "
					       "fail, restart, delay)", t);
			if (k >= SC_FAIL && !o->fakepods)
				tc_usage_error("--scenarios: '%s' needs --fakepods (its fault is "
					       "injected by kvidx-fakepod)", t);
			want[k] = true;
		}
	} else {
		for (int k = 0; k < SC_COUNT; k++)
			want[k] = k < SC_FAIL || o->fakepods;
	}
	if (o->gaps) /* before the index is read: a usage error is exit 2, not 1 */
		ngaps = parse_gaps(o->gaps, gaps, MAX_GAPS);
	V.o = o;
	V.sigfd = sigfd;
	if (router_attach(&V.rt, o) < 0)
		return 1;
	if (client_init(&V.cl)) {
		fprintf(stderr, PROG ": cannot set up libcurl\n");
		return 1;
	}
	V.rng = kvidx_now_ns() ^ ((uint64_t)getpid() << 40) ^ o->seed;
	V.corr_hi = (uint64_t)getpid() << 32;
	/* Learn the pods' indices, then the timing the gaps come from. */
	route_refresh(&V.rt);
	live_timing(&V, &p50, &p95);
	if (!o->delay_ms)
		o->delay_ms = V.ttl_ms + 500;
	if (!o->gaps) {
		gaps[ngaps++] = p50 > 0 ? (uint64_t)(p50 / 2) : 20;
		gaps[ngaps++] = p95 > 0 ? (uint64_t)p95 : V.ttl_ms / 2;
		gaps[ngaps++] = V.ttl_ms * 9 / 10;
		gaps[ngaps++] = V.ttl_ms * 11 / 10 + 100;
	}
	for (size_t i = 1; i < ngaps; i++) /* shortest first */
		for (size_t j = i; j > 0 && gaps[j] < gaps[j - 1]; j--) {
			uint64_t t = gaps[j];
			gaps[j] = gaps[j - 1];
			gaps[j - 1] = t;
		}
	struct cell *cells = tc_xrealloc(NULL, SC_COUNT * MAX_GAPS * sizeof(*cells));
	memset(cells, 0, SC_COUNT * MAX_GAPS * sizeof(*cells));
	for (int k = 0; k < SC_COUNT && !V.stop; k++) {
		if (!want[k])
			continue;
		for (size_t g = 0; g < ngaps && !V.stop; g++) {
			struct cell *c = &cells[nc++];
			c->sc = (enum scen)k;
			c->gap_ms = gaps[g];
			if (!o->quiet && !o->json)
				fprintf(stderr, PROG ": validate: %s, gap %" PRIu64 " ms ...\n",
					scen_name[k], gaps[g]);
			run_cell(&V, c);
		}
	}
	if (o->json)
		print_json(&V, cells, nc, p50, p95);
	else
		print_text(&V, cells, nc, p50, p95);
	fflush(stdout);
	for (size_t i = 0; i < nc; i++) {
		samples_free(&cells[i].ttft_a);
		samples_free(&cells[i].ttft_b);
		samples_free(&cells[i].lost_ms);
	}
	free(cells);
	client_free(&V.cl);
	router_close(&V.rt);
	return rc;
}
