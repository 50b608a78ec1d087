/*
 * load.c — kvidx-route's load generator: prompts from standard input or a file (one per
 * line, tokens separated by whitespace or commas) or a synthetic shared-prefix workload with
 * conversation turns, sent as POST /v1/completions with token-id prompts, streamed, with
 * stream_options.include_usage, at a rate.
 *
 * Two targets. With --pod it routes every prompt itself (pick.c: keys, score, pick, commit)
 * and sends it to the chosen pod; with --front URL (repeatable, round robin) it is a plain
 * client of kvidx-route --listen fronts, which route, and learns each decision from their
 * X-Kvidx-Decision and X-Kvidx-Pod headers. Either way it measures, per decision kind, the
 * time to the first streamed chunk (TTFT) and the cached tokens the pods report.
 *
 * A next turn of a synthetic conversation is the whole previous prompt plus fresh blocks,
 * sent a random (exponential) time after the previous turn's answer: the case speculation
 * exists for. The summary counts how many next turns went to the pod that served the
 * previous turn (the pod holding their prefix) and what they found cached.
 */
#include "route.h"

#include <curl/header.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "rng.h"

#define MAX_LINE (64u << 20)      /* bytes in one input line */
#define VOCAB ROUTE_VOCAB
#define MAX_FOLLOWUPS 1024        /* synthetic next turns waiting to be sent */
#define MAX_TURNS 4               /* turns of one synthetic conversation */
#define MAX_SEEN 256              /* pod names learnt from fronts */
#define MAX_WORKERS 64            /* front worker pids learnt from fronts */

enum status { S_OK, S_FAILED, S_CANCELLED, S_TIMEOUT, S_UNREACHABLE, S_ERROR, S_COUNT };
static const char *const status_name[S_COUNT] = { "ok", "failed", "cancelled", "timeout",
						    "unreachable", "error" };

struct load;

/* One request in flight. */
struct lreq {
	struct call call;
	struct load *L;
	struct lreq *prev, *next;
	uint64_t corr, n, sent_ns;
	struct decision d;
	bool kind_known;
	int pod;      /* direct: opts.pods index; front: index into L->seen */
	uint32_t ntok, expected;
	uint32_t *toks; /* the prompt, kept for its next turn (synthetic) */
	unsigned turn;
	int prev_pod; /* the pod of the previous turn, -1 for a first turn */
	int front;    /* --front: the index of the front it went to, -1 direct */
	double pod_ttft_ms;   /* the pod's X-Fakepod-Ttft-Seconds, -1 without */
	struct sse sse;
	struct tc_buf raw;    /* a whole (not streamed) answer */
	struct usage u;
};

/* A synthetic conversation's next turn. */
struct followup {
	uint64_t due;
	uint32_t *toks;
	size_t n;
	unsigned turn;
	int prev_pod;
};

struct load {
	struct opts *o;
	struct router rt;
	bool direct;
	struct client cl;
	struct lreq *inflight;
	size_t ninflight;
	uint64_t counter, corr_hi, t0;
	int next_front;
	char seen[MAX_SEEN][KVIDX_POD_NAME_MAX];
	uint64_t seen_routed[MAX_SEEN];
	int nseen;
	char workers[MAX_WORKERS][16]; /* --front: the X-Kvidx-Worker pids seen, requests each */
	uint64_t worker_n[MAX_WORKERS];
	int nworkers;

	/* input */
	int fd;
	bool eof;
	char *buf;
	size_t len, cap;
	uint64_t lineno;
	uint32_t *toks;
	size_t toks_cap;
	uint64_t rng, gap_rng, made;
	uint64_t period, next_due, stop_at;
	struct followup fu[MAX_FOLLOWUPS];
	size_t nfu;
	struct trace tr;         /* --trace: its requests, the next one at ti */
	size_t ti;
	uint64_t req_max_tokens; /* max_tokens of the request being submitted (0: --max-tokens) */

	/* results */
	struct tally t;
	uint64_t status[S_COUNT], bad_lines, no_usage;
	uint64_t fu_n, fu_same, fu_cached, fu_prompt;
	struct samples ttft_all; /* every answer's TTFT, whatever its kind */
	uint64_t pod_prefill[MAX_SEEN]; /* per pod: prompt tokens answered uncached */
	uint64_t t_last;         /* the last answer */
	uint64_t pod_ttfts;      /* answers whose TTFT the pod gave */
};

/* ---- small helpers ------------------------------------------------------------------------- */

/*
 * Natural logarithm of x > 0, without libm (the tools link none): x = m x 2^e with m in
 * [1, 2), ln m = 2 atanh((m - 1) / (m + 1)) by its series (|z| <= 1/3: 12 terms are plenty).
 */
static double ln_pos(double x)
{
	int e = 0;

	while (x >= 2) {
		x /= 2;
		e++;
	}
	while (x < 1) {
		x *= 2;
		e--;
	}
	double z = (x - 1) / (x + 1), z2 = z * z, term = z, sum = 0;
	for (int k = 1; k < 25; k += 2) {
		sum += term / k;
		term *= z2;
	}
	return 2 * sum + e * 0.69314718055994530942;
}

/* A uniform draw in (0, 1]. */
static double unit(uint64_t *rng)
{
	return (double)((tc_rng_next(rng) >> 11) + 1) / 9007199254740992.0;
}

static double ms_between(uint64_t a, uint64_t b)
{
	return (double)(b - a) / 1e6;
}

/* q's TTFT in ms: the pod's own figure if it gave one, else to the first byte; -1 if none. */
static double ttft_of(const struct lreq *q)
{
	if (q->pod_ttft_ms >= 0)
		return q->pod_ttft_ms;
	return q->call.t_first ? ms_between(q->sent_ns, q->call.t_first) : -1;
}

static const char *pod_name_of(const struct load *L, const struct lreq *q)
{
	if (q->pod < 0)
		return "";
	return L->direct ? L->o->pods[q->pod].name : L->seen[q->pod];
}

/* The index in L->seen of a pod name a front named (added if new; -1 if full or empty). */
static int seen_pod(struct load *L, const char *name)
{
	if (!name || !*name)
		return -1;
	for (int i = 0; i < L->nseen; i++)
		if (!strcmp(L->seen[i], name))
			return i;
	if (L->nseen == MAX_SEEN)
		return -1;
	snprintf(L->seen[L->nseen], sizeof(L->seen[0]), "%s", name);
	return L->nseen++;
}

/* Counts a request a front worker (its X-Kvidx-Worker value, a pid: 1 to 15 digits, else
 * not counted) answered; past MAX_WORKERS of them, the rest are not counted. */
static void seen_worker(struct load *L, const char *pid)
{
	size_t n = strspn(pid, "0123456789");
	int i;

	if (!n || n > 15 || pid[n])
		return;
	for (i = 0; i < L->nworkers && strcmp(L->workers[i], pid); i++)
		;
	if (i == L->nworkers) {
		if (i == MAX_WORKERS)
			return;
		snprintf(L->workers[i], sizeof(L->workers[0]), "%s", pid);
		L->nworkers++;
	}
	L->worker_n[i]++;
}

/* ---- output -------------------------------------------------------------------------------- */

static void print_route(struct load *L, const struct lreq *q)
{
	if (L->o->quiet)
		return;
	if (L->o->json) {
		printf("{\"event\":\"route\",\"n\":%" PRIu64 ",\"corr\":\"0x%016" PRIx64
		       "\",\"pod\":", q->n, q->corr);
		tc_json_str(stdout, pod_name_of(L, q));
		printf(",\"kind\":\"%s\",\"blocks\":%" PRIu32 ",\"spec_blocks\":%" PRIu32
		       ",\"prompt_blocks\":%" PRIu32 ",\"prompt_tokens\":%" PRIu32
		       ",\"score\":%.3f,\"committed\":%s,\"t_ms\":%.3f}\n",
		       kind_name[q->d.kind], q->d.blocks, q->d.spec_blocks, q->d.nkeys, q->ntok,
		       q->d.score, q->d.committed ? "true" : "false", (double)q->sent_ns / 1e6);
	} else {
		printf("route   n=%" PRIu64 " corr=0x%016" PRIx64 " pod=%s %s blocks=%" PRIu32
		       "/%" PRIu32 " spec=%" PRIu32 " score=%.3f%s\n",
		       q->n, q->corr, pod_name_of(L, q), kind_name[q->d.kind], q->d.blocks,
		       q->d.nkeys, q->d.spec_blocks, q->d.score,
		       q->d.committed ? "" : " (not committed)");
	}
}

static void print_outcome(struct load *L, const struct lreq *q, enum status st, long http,
			  uint32_t cached, bool fw, uint64_t now)
{
	double ttft = ttft_of(q);

	if (L->o->quiet)
		return;
	if (L->o->json) {
		printf("{\"event\":\"outcome\",\"n\":%" PRIu64 ",\"corr\":\"0x%016" PRIx64
		       "\",\"pod\":", q->n, q->corr);
		tc_json_str(stdout, pod_name_of(L, q));
		printf(",\"kind\":\"%s\",\"status\":\"%s\",\"http_status\":%ld,"
		       "\"cached_tokens\":%" PRIu32 ",\"prompt_tokens\":%" PRIu32
		       ",\"expected_tokens\":%" PRIu32 ",\"false_warm\":%s,\"ttft_ms\":%.3f,"
		       "\"reply_ms\":%.3f,\"turn\":%u,\"same_pod\":%s,\"front\":%d,"
		       "\"t_ms\":%.3f}\n",
		       q->kind_known ? kind_name[q->d.kind] : "unknown", status_name[st], http,
		       cached, q->ntok, q->expected, fw ? "true" : "false", ttft,
		       ms_between(q->sent_ns, now), q->turn,
		       q->turn > 1 && q->prev_pod >= 0 && q->pod == q->prev_pod ? "true" : "false",
		       q->front, (double)now / 1e6);
	} else {
		printf("outcome n=%" PRIu64 " corr=0x%016" PRIx64 " pod=%s %s %s cached=%" PRIu32
		       "/%" PRIu32 " expected=%" PRIu32 " ttft=%.1fms reply=%.1fms%s\n",
		       q->n, q->corr, pod_name_of(L, q),
		       q->kind_known ? kind_name[q->d.kind] : "unknown", status_name[st], cached,
		       q->ntok, q->expected, ttft, ms_between(q->sent_ns, now),
		       fw ? " FALSE-WARM" : "");
	}
}

/* The summary's JSON maps by pod and by front worker, from ,"pods":{ to the last map's }. */
static void print_json_pods(struct load *L, int npods)
{
	const struct opts *o = L->o;

	printf(",\"pods\":{");
	for (int i = 0; i < npods; i++) {
		if (i)
			putchar(',');
		tc_json_str(stdout, L->direct ? o->pods[i].name : L->seen[i]);
		printf(":%" PRIu64, L->direct ? o->pods[i].routed : L->seen_routed[i]);
	}
	printf("},\"pod_prefill_tokens\":{");
	for (int i = 0; i < npods; i++) {
		if (i)
			putchar(',');
		tc_json_str(stdout, L->direct ? o->pods[i].name : L->seen[i]);
		printf(":%" PRIu64, L->pod_prefill[i]);
	}
	printf("},\"workers\":{");
	for (int i = 0; i < L->nworkers; i++) {
		printf("%s", i ? "," : "");
		tc_json_str(stdout, L->workers[i]);
		printf(":%" PRIu64, L->worker_n[i]);
	}
}

static void print_summary(struct load *L)
{
	const struct opts *o = L->o;
	struct tally *t = &L->t;
	uint64_t total = t->n[0] + t->n[1] + t->n[2], outcomes = 0;
	uint64_t fw = t->false_warm[K_PREDICTED] + t->false_warm[K_CONFIRMED];
	uint64_t cached = t->cached[0] + t->cached[1] + t->cached[2];
	uint64_t prompt = t->prompt[0] + t->prompt[1] + t->prompt[2];
	struct router *rt = &L->rt;
	int npods = L->direct ? o->npods : L->nseen;

	double el = L->t_last > L->t0 ? (double)(L->t_last - L->t0) / 1e9 : 0;
	double rps = el > 0 ? (double)L->status[S_OK] / el : 0;
	double a50 = samples_q(&L->ttft_all, 0.5), a90 = samples_q(&L->ttft_all, 0.9);
	double a99 = samples_q(&L->ttft_all, 0.99);

	for (int s = 0; s < S_COUNT; s++)
		outcomes += L->status[s];
	outcomes -= L->status[S_TIMEOUT] + L->status[S_UNREACHABLE];
	if (o->json) {
		printf("{\"event\":\"summary\",\"decisions\":%" PRIu64 ",\"predicted\":%" PRIu64
		       ",\"confirmed\":%" PRIu64 ",\"nomatch\":%" PRIu64 ",\"outcomes\":%" PRIu64
		       ",\"ok\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"cancelled\":%" PRIu64
		       ",\"errors\":%" PRIu64 ",\"unanswered\":%" PRIu64 ",\"unsent\":%" PRIu64
		       ",\"false_warm\":%" PRIu64 ",\"false_warm_predicted\":%" PRIu64
		       ",\"false_warm_confirmed\":%" PRIu64 ",\"wasted_prefill_tokens\":%" PRIu64
		       ",\"cached_tokens\":%" PRIu64 ",\"prompt_tokens\":%" PRIu64
		       ",\"no_usage\":%" PRIu64 ",\"commits_dropped\":%" PRIu64
		       ",\"reports_dropped\":%" PRIu64 ",\"score_retries\":%" PRIu64
		       ",\"score_failed\":%" PRIu64 ",\"bad_lines\":%" PRIu64
		       ",\"followups\":%" PRIu64 ",\"followups_same_pod\":%" PRIu64
		       ",\"followup_cached_tokens\":%" PRIu64 ",\"followup_prompt_tokens\":%" PRIu64
		       ",\"elapsed_s\":%.3f,\"answers_per_s\":%.3f,\"ttft_p50_ms\":%.3f"
		       ",\"ttft_p90_ms\":%.3f,\"ttft_p99_ms\":%.3f,\"ttft_from_pod\":%" PRIu64
		       ",\"kinds\":{",
		       total, t->n[K_PREDICTED], t->n[K_CONFIRMED], t->n[K_NOMATCH], outcomes,
		       L->status[S_OK], L->status[S_FAILED], L->status[S_CANCELLED],
		       L->status[S_ERROR], L->status[S_TIMEOUT], L->status[S_UNREACHABLE], fw,
		       t->false_warm[K_PREDICTED], t->false_warm[K_CONFIRMED], t->wasted, cached,
		       prompt, L->no_usage, rt->commits_dropped, rt->reports_dropped, rt->retries,
		       rt->score_failed, L->bad_lines, L->fu_n, L->fu_same, L->fu_cached,
		       L->fu_prompt, el, rps, a50, a90, a99, L->pod_ttfts);
		tally_print(t, stdout, true);
		printf("},\"policy\":");
		tc_json_str(stdout, L->direct ? policy_name[o->policy] : "front");
		print_json_pods(L, npods);
		printf("}}\n");
	} else {
		printf("summary: %" PRIu64 " decisions (predicted %" PRIu64 ", confirmed %" PRIu64
		       ", nomatch %" PRIu64 "); %" PRIu64 " outcomes (ok %" PRIu64
		       ", failed %" PRIu64 ", cancelled %" PRIu64 ", errors %" PRIu64
		       "), unanswered %" PRIu64 ", unsent %" PRIu64 "\n",
		       total, t->n[K_PREDICTED], t->n[K_CONFIRMED], t->n[K_NOMATCH], outcomes,
		       L->status[S_OK], L->status[S_FAILED], L->status[S_CANCELLED],
		       L->status[S_ERROR], L->status[S_TIMEOUT], L->status[S_UNREACHABLE]);
		printf("summary: false warm routes %" PRIu64 " (on predicted %" PRIu64
		       ", on confirmed %" PRIu64 "), wasted prefill tokens %" PRIu64
		       ", cached %" PRIu64 " of %" PRIu64 " prompt tokens\n",
		       fw, t->false_warm[K_PREDICTED], t->false_warm[K_CONFIRMED], t->wasted, cached,
		       prompt);
		tally_print(t, stdout, false);
		printf("summary: %" PRIu64 " answers in %.2f s (%.1f/s), TTFT p50 %.2f ms p90 %.2f ms"
		       " p99 %.2f ms (%" PRIu64 " of them the pod's own figure)\n", L->status[S_OK], el,
		       rps, a50, a90, a99, L->pod_ttfts);
		printf("summary: next turns %" PRIu64 ", on the previous turn's pod %" PRIu64
		       ", cached %" PRIu64 " of %" PRIu64 " prompt tokens\n",
		       L->fu_n, L->fu_same, L->fu_cached, L->fu_prompt);
		printf("summary: commits dropped %" PRIu64 ", reports dropped %" PRIu64
		       ", score retries %" PRIu64 " (failed %" PRIu64 "), answers without usage %"
		       PRIu64 ", bad input lines %" PRIu64 "\n",
		       rt->commits_dropped, rt->reports_dropped, rt->retries, rt->score_failed,
		       L->no_usage, L->bad_lines);
		printf("summary: routed per pod (policy %s):",
		       L->direct ? policy_name[o->policy] : "front's");
		for (int i = 0; i < npods; i++)
			printf(" %s %" PRIu64, L->direct ? o->pods[i].name : L->seen[i],
			       L->direct ? o->pods[i].routed : L->seen_routed[i]);
		printf("\n");
		printf("summary: prompt tokens computed (uncached) per pod:");
		for (int i = 0; i < npods; i++)
			printf(" %s %" PRIu64, L->direct ? o->pods[i].name : L->seen[i],
			       L->pod_prefill[i]);
		printf("\n");
		if (L->nworkers) {
			printf("summary: answered per front worker:");
			for (int i = 0; i < L->nworkers; i++)
				printf(" %s %" PRIu64, L->workers[i], L->worker_n[i]);
			printf("\n");
		}
	}
	fflush(stdout);
}

/* ---- requests and answers ------------------------------------------------------------------ */

static void lreq_unlink(struct load *L, struct lreq *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		L->inflight = q->next;
	if (q->next)
		q->next->prev = q->prev;
	L->ninflight--;
}

static void lreq_free(struct lreq *q)
{
	call_destroy(&q->call);
	sse_free(&q->sse);
	free(q->raw.s);
	free(q->toks);
	free(q);
}

static void on_event(void *arg, const char *ev, size_t len)
{
	struct lreq *q = arg;

	usage_parse(ev, len, true, &q->u, NULL);
}

static size_t on_data(struct call *c, const char *p, size_t n)
{
	struct lreq *q = c->arg;

	if (c->status == 200 && strstr(c->ctype, "event-stream"))
		sse_feed(&q->sse, p, n, on_event, q);
	else if (q->raw.len + n < (16u << 20)) { /* a whole answer (JSON), parsed at the end */
		tc_buf_add(&q->raw, p, n);
	}
	return n;
}

static void on_head(struct call *c)
{
	struct lreq *q = c->arg;
	struct load *L = q->L;
	struct curl_header *h;

	/* kvidx-fakepod's model time to first token (its whole answer comes at the end). */
	if (curl_easy_header(c->easy, "X-Fakepod-Ttft-Seconds", 0, CURLH_HEADER, -1, &h) ==
	    CURLHE_OK) {
		char *end;
		double v = strtod(h->value, &end);
		if (end != h->value && !*end && v >= 0 && v < 1e7)
			q->pod_ttft_ms = v * 1e3;
	}
	if (L->direct)
		return;
	/* The front's decision, from its headers. */
	if (curl_easy_header(c->easy, "X-Kvidx-Decision", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
		for (int k = 0; k < K_COUNT; k++)
			if (!strcmp(h->value, kind_name[k])) {
				q->d.kind = (enum kind)k;
				q->kind_known = true;
			}
	if (curl_easy_header(c->easy, "X-Kvidx-Pod", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
		q->pod = seen_pod(L, h->value);
	if (curl_easy_header(c->easy, "X-Kvidx-Worker", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
		seen_worker(L, h->value);
	if (q->pod >= 0)
		L->seen_routed[q->pod]++;
	if (q->kind_known)
		L->t.n[q->d.kind]++;
}

static void schedule_next_turn(struct load *L, struct lreq *q, uint64_t now)
{
	const struct opts *o = L->o;

	if (!o->synthetic || q->turn >= MAX_TURNS || L->nfu == MAX_FOLLOWUPS || !q->toks ||
	    !(unit(&L->gap_rng) <= o->followups))
		return;
	/* The next turn shares this whole prompt, including blocks the pod may not have
	 * confirmed yet: exactly what speculation is for. */
	uint32_t bs = L->direct ? L->rt.bs : 16;
	size_t add = (o->suffix_blocks ? o->suffix_blocks : 1) * bs;
	struct followup *f = &L->fu[L->nfu++];
	f->toks = tc_xrealloc(NULL, (q->ntok + add) * sizeof(*f->toks));
	memcpy(f->toks, q->toks, q->ntok * sizeof(*q->toks));
	for (size_t i = 0; i < add; i++)
		f->toks[q->ntok + i] = (uint32_t)(tc_rng_next(&L->rng) % VOCAB);
	f->n = q->ntok + add;
	f->turn = q->turn + 1;
	f->prev_pod = q->pod;
	f->due = now + (uint64_t)(-ln_pos(unit(&L->gap_rng)) * o->followup_ms * 1e6);
}

static void on_done(struct call *c, CURLcode rc)
{
	struct lreq *q = c->arg;
	struct load *L = q->L;
	uint64_t now = kvidx_now_ns();
	enum status st;
	uint32_t cached = 0;
	bool fw = false;

	if (rc == CURLE_OK && c->status != 200 && c->status)
		st = S_FAILED;
	else if (rc == CURLE_OK)
		st = S_OK;
	else if (call_unreachable(c, rc))
		st = S_UNREACHABLE;
	else if (rc == CURLE_OPERATION_TIMEDOUT)
		st = S_TIMEOUT;
	else if (rc == CURLE_GOT_NOTHING || rc == CURLE_RECV_ERROR || rc == CURLE_PARTIAL_FILE)
		st = S_CANCELLED;
	else
		st = S_ERROR;
	if (L->direct && q->pod >= 0) {
		route_load_end(&L->rt, &q->d);
		if (st == S_UNREACHABLE)
			pod_down(&L->rt, &L->o->pods[q->pod], now);
	}
	if (st == S_OK && !q->u.have && q->raw.len)
		usage_parse(q->raw.s, q->raw.len, false, &q->u, NULL);
	if (st == S_OK && !q->u.have)
		L->no_usage++;
	if (q->u.have)
		cached = q->u.cached_tokens;
	if (st == S_OK || st == S_FAILED || st == S_CANCELLED) {
		/* An answer (or a pod that closed the request): the outcome to report. */
		if (L->direct && st == S_OK && q->u.have)
			route_report(&L->rt, &q->d, q->corr, cached, q->ntok);
		if (L->direct && st != S_OK)
			route_report(&L->rt, &q->d, q->corr, 0, q->ntok);
	}
	/* A false warm route: the match promised more than the pod had (a failed or cancelled
	 * request had nothing). */
	if (L->direct && (st == S_OK || st == S_FAILED || st == S_CANCELLED))
		fw = q->d.blocks && cached < q->expected;
	if (fw) {
		L->t.false_warm[q->d.kind]++;
		L->t.wasted += q->expected - cached;
	}
	if (q->kind_known && st == S_OK) {
		enum kind k = q->d.kind;

		if (!L->direct)
			fw = q->d.blocks && cached < q->expected;
		L->t.ok[k]++;
		L->t.cached[k] += cached;
		L->t.prompt[k] += q->ntok;
		if (ttft_of(q) >= 0)
			samples_add(&L->t.ttft[k], ttft_of(q));
		samples_add(&L->t.total[k], ms_between(q->sent_ns, now));
	}
	if (st == S_OK && ttft_of(q) >= 0)
		samples_add(&L->ttft_all, ttft_of(q));
	if (st == S_OK && q->pod_ttft_ms >= 0)
		L->pod_ttfts++;
	if (st == S_OK && q->pod >= 0 && q->pod < MAX_SEEN)
		L->pod_prefill[q->pod] += q->ntok > cached ? q->ntok - cached : 0;
	if (st == S_OK)
		L->t_last = now;
	if (q->turn > 1 && st == S_OK) {
		L->fu_n++;
		L->fu_same += q->prev_pod >= 0 && q->pod == q->prev_pod;
		L->fu_cached += cached;
		L->fu_prompt += q->ntok;
	}
	L->status[st]++;
	print_outcome(L, q, st, c->status, cached, fw, now);
	if (st == S_OK)
		schedule_next_turn(L, q, now);
	lreq_unlink(L, q);
	lreq_free(q);
}

/* Routes (or hands to a front) and sends one prompt. */
static void submit(struct load *L, const uint32_t *toks, size_t n, unsigned turn, int prev_pod)
{
	struct opts *o = L->o;
	struct lreq *q = tc_xrealloc(NULL, sizeof(*q));
	uint64_t now = kvidx_now_ns();
	char url[URL_MAX + 64], id[40];

	memset(q, 0, sizeof(*q));
	q->L = L;
	q->n = ++L->counter;
	q->corr = L->corr_hi | (L->counter & 0xffffffffull);
	q->sent_ns = now;
	q->ntok = (uint32_t)n;
	q->turn = turn;
	q->prev_pod = prev_pod;
	q->pod = -1;
	q->front = -1;
	q->pod_ttft_ms = -1;
	if (o->synthetic) {
		q->toks = tc_xrealloc(NULL, n * sizeof(*toks));
		memcpy(q->toks, toks, n * sizeof(*toks));
	}
	q->next = L->inflight;
	if (q->next)
		q->next->prev = q;
	L->inflight = q;
	L->ninflight++;
	if (L->direct) {
		route_pick(&L->rt, toks, n, q->corr, NULL, &q->d, now);
		q->pod = q->d.cand;
		q->kind_known = true;
		q->expected = route_expected(&L->rt, &q->d, q->ntok);
		L->t.n[q->d.kind]++;
		route_load_start(&L->rt, &q->d);
		snprintf(url, sizeof(url), "%s/v1/completions", o->pods[q->pod].url);
		print_route(L, q);
	} else {
		/* The --join-front fronts take their turns from --join-after on. */
		bool early = now < L->t0 + (uint64_t)(o->join_after * 1e9);
		int live = o->nfronts - (early ? o->njoin : 0);
		q->front = L->next_front % live;
		snprintf(url, sizeof(url), "%s/v1/completions", o->fronts[q->front]);
		L->next_front = (q->front + 1) % live;
	}
	q->call.arg = q;
	q->call.on_head = on_head;
	q->call.on_data = on_data;
	q->call.on_done = on_done;
	q->call.body = completion_body(o->model, toks, n,
				       L->req_max_tokens ? L->req_max_tokens : o->max_tokens,
				       o->stream, &q->call.len);
	snprintf(id, sizeof(id), "kvidx-%016" PRIx64, q->corr);
	call_header(&q->call, "Content-Type", "application/json");
	call_header(&q->call, "X-Request-Id", id);
	if (call_start(&L->cl, &q->call, "POST", url, (long)o->reply_timeout_ms,
		       (long)o->connect_timeout_ms)) {
		/* No handle: as if unreachable. */
		q->call.active = false;
		on_done(&q->call, CURLE_FAILED_INIT);
	}
}

/* ---- input: lines or the synthetic workload ------------------------------------------------ */

/*
 * Parses one line into L->toks. Returns the token count, or -1 for a line to skip (blank,
 * '#' comment, or a bad token, which is reported).
 */
static long parse_line(struct load *L, char *line)
{
	size_t n = 0;
	char *p = line;

	while (*p == ' ' || *p == '\t' || *p == '\r')
		p++;
	if (!*p || *p == '#')
		return -1;
	for (;;) {
		while (*p && strchr(" \t,\r\v\f", *p))
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : 0;
		if (*p < '0' || *p > '9' || errno || v > UINT32_MAX ||
		    (*end && !strchr(" \t,\r\v\f", *end)) || n >= MAX_PROMPT_TOKENS) {
			if (L->bad_lines++ < 5)
				fprintf(stderr,
					PROG ": input line %" PRIu64 ": bad token near '%.20s' "
					     "(tokens are decimal uint32, separated by whitespace "
					     "or commas); line skipped\n",
					L->lineno, p);
			return -1;
		}
		tc_grow(&L->toks, &L->toks_cap, n + 1, sizeof(*L->toks));
		L->toks[n++] = (uint32_t)v;
		p = end;
	}
	return (long)n;
}

/* A complete line waiting in the buffer? Its length (without the newline) in *len. */
static bool line_ready(const struct load *L, size_t *len)
{
	const char *nl = L->len ? memchr(L->buf, '\n', L->len) : NULL;

	if (nl) {
		*len = (size_t)(nl - L->buf);
		return true;
	}
	if (L->eof && L->len) { /* a last line without a newline */
		*len = L->len;
		return true;
	}
	return false;
}

/* Reads what the input descriptor has (the caller polled it). */
static void input_read(struct load *L)
{
	if (L->cap - L->len < 65536) {
		if (L->cap >= MAX_LINE) {
			fprintf(stderr, PROG ": input line longer than %u bytes\n", MAX_LINE);
			exit(1);
		}
		L->cap = L->cap ? 2 * L->cap : 1 << 16;
		L->buf = tc_xrealloc(L->buf, L->cap + 1);
	}
	ssize_t r = read(L->fd, L->buf + L->len, L->cap - L->len);
	if (r > 0)
		L->len += (size_t)r;
	else if (r == 0 || (errno != EAGAIN && errno != EINTR))
		L->eof = true;
}

/* Takes the next line's prompt: token count, or -1 if that line is to be skipped. */
static long input_take_line(struct load *L, size_t len)
{
	L->buf[len] = '\0';
	L->lineno++;
	long n = parse_line(L, L->buf);
	size_t used = len < L->len ? len + 1 : len;
	memmove(L->buf, L->buf + used, L->len - used);
	L->len -= used;
	return n;
}

/*
 * A synthetic prompt: one of --prefixes shared prefixes, then fresh suffix blocks. A prefix's
 * tokens depend only on its number and the block size, so every kvidx-route shares the same
 * prefixes (system prompts); --seed picks the prefix of each request and its suffix tokens.
 */
static size_t synth_prompt(struct load *L)
{
	const struct opts *o = L->o;
	uint32_t bs = L->direct ? L->rt.bs : 16;
	size_t pt = o->prefix_blocks * bs, n = pt + o->suffix_blocks * bs;
	uint64_t k = tc_rng_next(&L->rng) % o->prefixes;

	tc_grow(&L->toks, &L->toks_cap, n, sizeof(*L->toks));
	uint64_t ps = 0x7072656669780000ull ^ (k << 8) ^ bs; /* "prefix", k */
	for (size_t i = 0; i < pt; i++)
		L->toks[i] = (uint32_t)(tc_rng_next(&ps) % VOCAB);
	for (size_t i = pt; i < n; i++)
		L->toks[i] = (uint32_t)(tc_rng_next(&L->rng) % VOCAB);
	return n;
}

/* When trace request r is due: its timestamp over --trace-speedup after the start. */
static uint64_t trace_due(const struct load *L, const struct trace_req *r)
{
	return L->t0 + (uint64_t)((double)r->t_ms * 1e6 / L->o->trace_speedup);
}

/* --trace-dump: each request's prompt as an input line (tokens), then out. */
static int trace_dump(struct load *L)
{
	for (size_t i = 0; i < L->tr.n; i++) {
		size_t n = trace_prompt(&L->tr, i, &L->toks, &L->toks_cap);
		for (size_t k = 0; k < n; k++)
			printf(k ? " %" PRIu32 : "%" PRIu32, L->toks[k]);
		putchar('\n');
	}
	return fflush(stdout) ? 1 : 0;
}

/* The earliest waiting next turn, or -1. */
static int followup_next(const struct load *L)
{
	int best = -1;

	for (size_t i = 0; i < L->nfu; i++)
		if (best < 0 || L->fu[i].due < L->fu[best].due)
			best = (int)i;
	return best;
}

/*
 * Sends every request that is due: next turns, then new prompts at --rate (or every
 * complete input line without it). Returns false once nothing more will be sent (end of
 * input, --count, --duration); waiting next turns are then dropped.
 */
static bool send_due(struct load *L)
{
	const struct opts *o = L->o;
	uint64_t now = kvidx_now_ns();

	for (;;) {
		if ((o->count && L->made >= o->count) || (L->stop_at && now >= L->stop_at))
			goto done;
		if (L->ninflight >= o->concurrency)
			return true;
		int f = followup_next(L);
		if (f >= 0 && L->fu[f].due <= now) {
			struct followup fu = L->fu[f];
			L->fu[f] = L->fu[--L->nfu];
			L->made++;
			submit(L, fu.toks, fu.n, fu.turn, fu.prev_pod);
			free(fu.toks);
			now = kvidx_now_ns();
			continue;
		}
		if (o->trace) {
			if (L->ti >= L->tr.n)
				goto done;
			const struct trace_req *r = &L->tr.v[L->ti];
			if (now < trace_due(L, r))
				return true;
			size_t tn = trace_prompt(&L->tr, L->ti++, &L->toks, &L->toks_cap);
			L->made++;
			L->req_max_tokens = r->output_len ? r->output_len : 1;
			submit(L, L->toks, tn, 1, -1);
			L->req_max_tokens = 0;
			now = kvidx_now_ns();
			continue;
		}
		if (L->period && now < L->next_due)
			return true;
		long n;
		size_t len;
		if (o->synthetic) {
			n = (long)synth_prompt(L);
		} else if (line_ready(L, &len)) {
			n = input_take_line(L, len);
			if (n < 0)
				continue;
		} else if (L->eof) {
			goto done;
		} else {
			return true;
		}
		L->made++;
		submit(L, L->toks, (size_t)n, 1, -1);
		if (L->period) {
			/* Even spacing, or exponential gaps (Poisson arrivals). */
			L->next_due += o->poisson ? (uint64_t)(-ln_pos(unit(&L->gap_rng)) *
							       (double)L->period) :
						    L->period;
			if (L->next_due + NS_PER_S < now)
				L->next_due = now; /* far behind (a stall): do not burst */
		}
		now = kvidx_now_ns();
	}
done:
	/* Next turns still to come keep the run going until they are sent. */
	if (o->synthetic && L->nfu && !(o->count && L->made >= o->count) &&
	    !(L->stop_at && now >= L->stop_at))
		return true;
	while (L->nfu)
		free(L->fu[--L->nfu].toks);
	return false;
}

/* Milliseconds until the next request is due (at most cap), 0 if one is due now. */
static long next_wait_ms(const struct load *L, long cap)
{
	uint64_t now = kvidx_now_ns(), due = UINT64_MAX;
	size_t len;
	int f = followup_next(L);

	if (f >= 0)
		due = L->fu[f].due;
	if (L->period && (L->o->synthetic || line_ready(L, &len)) && L->next_due < due)
		due = L->next_due;
	if (L->o->trace && L->ti < L->tr.n && trace_due(L, &L->tr.v[L->ti]) < due)
		due = trace_due(L, &L->tr.v[L->ti]);
	if (!L->period && line_ready(L, &len))
		due = now;
	if (due == UINT64_MAX)
		return cap;
	if (due <= now)
		return 0;
	uint64_t ms = (due - now + NS_PER_MS - 1) / NS_PER_MS;
	return ms < (uint64_t)cap ? (long)ms : cap;
}

int load_main(struct opts *o, int sigfd)
{
	static struct load L;
	int rc = 0;

	L.o = o;
	L.fd = -1;
	L.direct = o->nfronts == 0;
	if (o->trace) {
		if (trace_load(&L.tr, o->trace, o->trace_limit) < 0)
			return 1;
		if (L.tr.bad)
			fprintf(stderr, PROG ": --trace %s: %" PRIu64 " bad line%s skipped\n",
				o->trace, L.tr.bad, L.tr.bad == 1 ? "" : "s");
		if (o->trace_dump) {
			rc = trace_dump(&L);
			trace_free(&L.tr);
			free(L.toks);
			return rc;
		}
	} else if (!o->synthetic) {
		L.fd = o->file ? open(o->file, O_RDONLY | O_CLOEXEC) : 0;
		if (L.fd < 0) {
			fprintf(stderr, PROG ": %s: %s\n", o->file, strerror(errno));
			return 1;
		}
	}
	if (L.direct && router_attach(&L.rt, o) < 0)
		return 1;
	if (client_init(&L.cl)) {
		fprintf(stderr, PROG ": cannot set up libcurl\n");
		return 1;
	}
	L.rng = o->seed;
	L.corr_hi = (uint64_t)getpid() << 32;
	L.t0 = kvidx_now_ns();
	L.period = o->rate > 0 ? (uint64_t)(1e9 / o->rate) : 0;
	L.next_due = L.t0;
	L.stop_at = o->duration > 0 ? L.t0 + (uint64_t)(o->duration * 1e9) : 0;
	L.gap_rng = o->seed ^ 0x6761707300000000ull; /* "gaps": apart from the prompts' */
	bool sending = true;

	for (;;) {
		if (sending)
			sending = send_due(&L);
		client_pump(&L.cl);
		if (!sending && !L.ninflight)
			break;
		struct curl_waitfd w[2] = { { .fd = sigfd, .events = CURL_WAIT_POLLIN } };
		unsigned nw = 1;
		size_t dummy;
		if (sending && L.fd >= 0 && !L.eof && !line_ready(&L, &dummy)) {
			w[nw++] = (struct curl_waitfd){ .fd = L.fd, .events = CURL_WAIT_POLLIN };
		}
		int timeout = (int)(sending ? next_wait_ms(&L, 100) : 100);
		/* Unpaced synthetic load (a closed loop): room for a request means send now. */
		if (sending && o->synthetic && !L.period && L.ninflight < o->concurrency)
			timeout = 0;
		int waited = client_wait_sig(&L.cl, w, nw, timeout);
		if (waited < 0) {
			fprintf(stderr, PROG ": curl_multi_poll failed\n");
			rc = 1;
		}
		if (waited)
			break; /* SIGTERM or SIGINT: summary and out */
		if (nw > 1 && w[1].revents)
			input_read(&L);
		client_pump(&L.cl);
	}
	print_summary(&L);
	while (L.inflight) {
		struct lreq *q = L.inflight;
		call_cancel(&L.cl, &q->call);
		lreq_unlink(&L, q);
		lreq_free(q);
	}
	client_free(&L.cl);
	if (L.direct)
		router_close(&L.rt);
	tally_free(&L.t);
	samples_free(&L.ttft_all);
	trace_free(&L.tr);
	free(L.buf);
	free(L.toks);
	return rc;
}
