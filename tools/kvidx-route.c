/*
 * kvidx-route — a reference router worker, and a load generator for kvidx.
 *
 * It is the example of embedding lib/kvidx.h in a router: for every prompt it computes the
 * block keys the index uses, scores the candidate pods wait-free, picks one, commits the
 * decision (so the writer adds speculative entries for it, DESIGN.md section 6), sends the
 * prompt to that pod, and reports the pod's answer (cached tokens) back through the index.
 * route_one() below is that loop, kept short; everything else is plumbing.
 *
 * Prompts come from standard input or a file (one per line, tokens separated by whitespace or
 * commas) or from a synthetic shared-prefix workload, optionally with conversation turns that
 * extend a whole previous prompt shortly after it (the case speculation exists for). Pods are
 * kvidx-fakepod --serve sockets (tools/proto/serve.h): one ZeroMQ DEALER per pod, replies
 * matched by correlation id.
 *
 * Decision kinds, from the chosen pod's score row:
 *   predicted  the match on the chosen pod includes speculative blocks (not yet confirmed)
 *   confirmed  the chosen pod matched blocks, all confirmed by BlockStored events
 *   nomatch    the chosen pod matched no block
 * A false warm route (router side) is a predicted or confirmed route whose pod then reported
 * fewer cached tokens than the matched blocks promised.
 *
 * Everything runs in one thread around one zmq_poll() loop; signals arrive through a
 * signalfd. Scoring never waits for the writer; a commit or an outcome report that finds its
 * ring full is dropped and counted, never retried.
 *
 * Exit status: 0 on success (also after SIGTERM / SIGINT), 1 if the index cannot be opened or
 * a socket cannot be set up, 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <zmq.h>

#include "attach.h"
#include "cli.h"
#include "kvidx.h"
#include "parse.h"
#include "rng.h"
#include "serve.h"

#define PROG "kvidx-route"
#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull
#define MAX_PODS 256
#define PENDING (1u << 16)           /* requests in flight at most; the oldest is given up */
#define MAX_LINE (64u << 20)         /* bytes in one input line */
#define VOCAB 50000u                 /* synthetic tokens are drawn from [0, VOCAB) */
#define REFRESH_NS (1 * NS_PER_S)    /* full re-lookup of pod indices */
#define MISSING_NS (100 * NS_PER_MS) /* re-lookup of pods the index does not know yet */
#define MAX_FOLLOWUPS 1024           /* synthetic follow-up turns waiting to be sent */
#define MAX_TURNS 4                  /* turns of one synthetic conversation */

enum kind { K_PREDICTED, K_CONFIRMED, K_NOMATCH, K_COUNT };
static const char *const kind_name[K_COUNT] = { "predicted", "confirmed", "nomatch" };

struct pod {
	char name[KVIDX_POD_NAME_MAX]; /* as in the index: the pod's ip:port */
	const char *endpoint;          /* its serve socket */
	void *dealer;
	int idx;                       /* pod index in the index, -1 while unknown */
	bool warned;                   /* "not in the index" said once */
	uint32_t outstanding;          /* requests sent, not answered */
	uint64_t routed;
};

/* A request in flight, at slot corr & (PENDING - 1). */
struct req {
	uint64_t corr; /* 0: free */
	uint64_t sent_ns;
	uint64_t n;    /* input number, 1-based */
	int cand;      /* index into opts.pods */
	int pod;       /* pod index committed, -1 if none */
	uint32_t prompt_tokens, blocks, spec_blocks;
	enum kind kind;
};

struct opts {
	const char *name, *model, *file;
	bool synthetic, poisson, quiet, json;
	struct pod pods[MAX_PODS];
	int npods;
	uint64_t prefixes, prefix_blocks, suffix_blocks, count, seed;
	double rate, duration, spec_weight, followups, followup_ms;
	uint64_t reply_timeout_ms;
};

struct stats {
	uint64_t decisions[K_COUNT];
	uint64_t outcomes, status[3], unanswered, unsent, late_replies, bad_replies;
	uint64_t false_warm[K_COUNT], wasted_tokens, cached_tokens, prompt_tokens;
	uint64_t commits_dropped, reports_dropped, retries, score_failed, bad_lines;
};

struct router {
	struct opts *o;
	struct kvidx_reader *r;
	struct kvidx_weights weights;
	enum kvidx_key_algo algo;
	uint32_t bs;
	uint64_t root, gen;
	uint64_t *keys;
	size_t keys_cap;
	struct kvidx_score *rows;
	int cand[MAX_PODS];
	size_t ncand;
	int rr; /* round-robin cursor over opts.pods */
	uint64_t next_refresh_ns, next_missing_ns;
	uint64_t counter; /* requests routed; corr = corr_hi | low 32 bits of it */
	uint64_t corr_hi;
	struct req *pend;
	uint64_t oldest; /* lowest counter that may still be in flight */
	uint64_t inflight;
	msgpack_sbuffer sbuf;
	struct stats st;
	uint64_t t0;
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

/* Writes s as a JSON string (quotes, backslashes and control characters escaped). */
static void json_str(FILE *f, const char *s)
{
	putc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			putc(*p, f);
	}
	putc('"', f);
}

static double ms_between(uint64_t a, uint64_t b)
{
	return (double)(b - a) / 1e6;
}

/* ---- pods ------------------------------------------------------------------------------------ */

/*
 * Looks the pods' indices up by name (kvidx_reader_pod_find is linear in max_pods, so the
 * answers are cached): all of them when all is set (periodically, and when the index switched
 * to a new generation, where indices may differ), else only those the index did not know.
 * Rebuilds the candidate list passed to kvidx_score().
 */
static void pods_refresh(struct router *rt, bool all)
{
	struct opts *o = rt->o;

	rt->ncand = 0;
	for (int i = 0; i < o->npods; i++) {
		struct pod *p = &o->pods[i];
		if (all || p->idx < 0) {
			int idx = kvidx_reader_pod_find(rt->r, p->name);
			char cur[KVIDX_POD_NAME_MAX];
			if (idx < 0 && p->idx >= 0 &&
			    kvidx_reader_pod(rt->r, p->idx, cur, NULL) == -KVIDX_ERETRY)
				idx = p->idx; /* its name was being rewritten: keep it this time */
			if (idx < 0 && !p->warned) {
				fprintf(stderr,
					PROG ": pod %s is not in index '%s' (yet): routing to it "
					     "without scores or commits until it is\n",
					p->name, o->name);
				p->warned = true;
			}
			if (idx >= 0 && p->warned && p->idx < 0)
				fprintf(stderr, PROG ": pod %s is now index %d\n", p->name, idx);
			if (idx >= 0)
				p->warned = false;
			p->idx = idx >= 0 ? idx : -1;
		}
		if (p->idx >= 0)
			rt->cand[rt->ncand++] = p->idx;
	}
}

/* Before a decision: a new data generation (writer restart) or the periodic check re-reads
 * every pod index; pods still unknown are re-read every MISSING_NS. */
static void pods_maybe_refresh(struct router *rt, uint64_t now)
{
	struct kvidx_info in;
	bool all = now >= rt->next_refresh_ns;

	if (kvidx_reader_info(rt->r, &in) == 0 && in.generation != rt->gen) {
		rt->gen = in.generation;
		all = true;
	}
	if (all) {
		pods_refresh(rt, true);
		rt->next_refresh_ns = now + REFRESH_NS;
		rt->next_missing_ns = now + MISSING_NS;
	} else if (rt->ncand < (size_t)rt->o->npods && now >= rt->next_missing_ns) {
		pods_refresh(rt, false);
		rt->next_missing_ns = now + MISSING_NS;
	}
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_route(struct router *rt, const struct req *q, size_t nblocks, double score)
{
	const struct pod *p = &rt->o->pods[q->cand];

	if (rt->o->quiet)
		return;
	if (rt->o->json) {
		printf("{\"event\":\"route\",\"n\":%" PRIu64 ",\"corr\":\"0x%016" PRIx64
		       "\",\"pod\":",
		       q->n, q->corr);
		json_str(stdout, p->name);
		printf(",\"kind\":\"%s\",\"blocks\":%" PRIu32 ",\"spec_blocks\":%" PRIu32
		       ",\"prompt_blocks\":%zu,\"prompt_tokens\":%" PRIu32 ",\"score\":%.3f,"
		       "\"committed\":%s,\"t_ms\":%.3f}\n",
		       kind_name[q->kind], q->blocks, q->spec_blocks, nblocks, q->prompt_tokens,
		       score, q->pod >= 0 ? "true" : "false", (double)q->sent_ns / 1e6);
	} else {
		printf("route   n=%" PRIu64 " corr=0x%016" PRIx64 " pod=%s %s blocks=%" PRIu32
		       "/%zu spec=%" PRIu32 " score=%.3f%s\n",
		       q->n, q->corr, p->name, kind_name[q->kind], q->blocks, nblocks,
		       q->spec_blocks, score, q->pod >= 0 ? "" : " (not committed)");
	}
}

static void print_outcome(struct router *rt, const struct req *q, const char *status,
			  uint32_t cached, uint32_t expected, bool false_warm, uint64_t now)
{
	const struct pod *p = &rt->o->pods[q->cand];

	if (rt->o->quiet)
		return;
	if (rt->o->json) {
		printf("{\"event\":\"outcome\",\"n\":%" PRIu64 ",\"corr\":\"0x%016" PRIx64
		       "\",\"pod\":",
		       q->n, q->corr);
		json_str(stdout, p->name);
		printf(",\"kind\":\"%s\",\"status\":\"%s\",\"cached_tokens\":%" PRIu32
		       ",\"prompt_tokens\":%" PRIu32 ",\"expected_tokens\":%" PRIu32
		       ",\"false_warm\":%s,\"reply_ms\":%.3f,\"t_ms\":%.3f}\n",
		       kind_name[q->kind], status, cached, q->prompt_tokens, expected,
		       false_warm ? "true" : "false", ms_between(q->sent_ns, now),
		       (double)now / 1e6);
	} else {
		printf("outcome n=%" PRIu64 " corr=0x%016" PRIx64 " pod=%s %s %s cached=%" PRIu32
		       "/%" PRIu32 " expected=%" PRIu32 " reply=%.1fms%s\n",
		       q->n, q->corr, p->name, kind_name[q->kind], status, cached, q->prompt_tokens,
		       expected, ms_between(q->sent_ns, now), false_warm ? " FALSE-WARM" : "");
	}
}

static void print_summary(struct router *rt)
{
	const struct stats *s = &rt->st;
	const struct opts *o = rt->o;
	uint64_t total = s->decisions[0] + s->decisions[1] + s->decisions[2];
	uint64_t fw = s->false_warm[K_PREDICTED] + s->false_warm[K_CONFIRMED];

	if (o->json) {
		printf("{\"event\":\"summary\",\"decisions\":%" PRIu64 ",\"predicted\":%" PRIu64
		       ",\"confirmed\":%" PRIu64 ",\"nomatch\":%" PRIu64 ",\"outcomes\":%" PRIu64
		       ",\"ok\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"cancelled\":%" PRIu64
		       ",\"unanswered\":%" PRIu64 ",\"unsent\":%" PRIu64 ",\"false_warm\":%" PRIu64
		       ",\"false_warm_predicted\":%" PRIu64 ",\"false_warm_confirmed\":%" PRIu64
		       ",\"wasted_prefill_tokens\":%" PRIu64 ",\"cached_tokens\":%" PRIu64
		       ",\"prompt_tokens\":%" PRIu64 ",\"commits_dropped\":%" PRIu64
		       ",\"reports_dropped\":%" PRIu64 ",\"score_retries\":%" PRIu64
		       ",\"score_failed\":%" PRIu64 ",\"late_replies\":%" PRIu64
		       ",\"bad_replies\":%" PRIu64 ",\"bad_lines\":%" PRIu64 ",\"pods\":{",
		       total, s->decisions[K_PREDICTED], s->decisions[K_CONFIRMED],
		       s->decisions[K_NOMATCH], s->outcomes, s->status[KVS_OK],
		       s->status[KVS_FAILED], s->status[KVS_CANCELLED], s->unanswered, s->unsent,
		       fw,
		       s->false_warm[K_PREDICTED], s->false_warm[K_CONFIRMED], s->wasted_tokens,
		       s->cached_tokens, s->prompt_tokens, s->commits_dropped, s->reports_dropped,
		       s->retries, s->score_failed, s->late_replies, s->bad_replies, s->bad_lines);
		for (int i = 0; i < o->npods; i++) {
			if (i)
				putchar(',');
			json_str(stdout, o->pods[i].name);
			printf(":%" PRIu64, o->pods[i].routed);
		}
		printf("}}\n");
	} else {
		printf("summary: %" PRIu64 " decisions (predicted %" PRIu64 ", confirmed %" PRIu64
		       ", nomatch %" PRIu64 "); %" PRIu64 " outcomes (ok %" PRIu64
		       ", failed %" PRIu64 ", cancelled %" PRIu64 "), unanswered %" PRIu64
		       ", unsent %" PRIu64 "\n",
		       total, s->decisions[K_PREDICTED], s->decisions[K_CONFIRMED],
		       s->decisions[K_NOMATCH], s->outcomes, s->status[KVS_OK],
		       s->status[KVS_FAILED], s->status[KVS_CANCELLED], s->unanswered, s->unsent);
		printf("summary: false warm routes %" PRIu64 " (on predicted %" PRIu64
		       ", on confirmed %" PRIu64 "), wasted prefill tokens %" PRIu64
		       ", cached %" PRIu64 " of %" PRIu64 " prompt tokens\n",
		       fw, s->false_warm[K_PREDICTED], s->false_warm[K_CONFIRMED], s->wasted_tokens,
		       s->cached_tokens, s->prompt_tokens);
		printf("summary: commits dropped %" PRIu64 ", reports dropped %" PRIu64
		       ", score retries %" PRIu64 " (failed %" PRIu64 "), late replies %" PRIu64
		       ", bad replies %" PRIu64 ", bad input lines %" PRIu64 "\n",
		       s->commits_dropped, s->reports_dropped, s->retries, s->score_failed,
		       s->late_replies, s->bad_replies, s->bad_lines);
		printf("summary: routed per pod:");
		for (int i = 0; i < o->npods; i++)
			printf(" %s %" PRIu64, o->pods[i].name, o->pods[i].routed);
		printf("\n");
	}
	fflush(stdout);
}

/* ---- the routing decision: the part a router embedding kvidx needs ------------------------- */

/*
 * Routes one prompt: returns the request slot filled in (the caller sends it). Never blocks:
 * scoring is wait-free, and a commit that finds the ring to the writer full is dropped (the
 * route still happens, only without its speculation).
 */
static struct req *route_one(struct router *rt, const uint32_t *tokens, size_t ntok,
			     uint64_t n, uint64_t now)
{
	struct opts *o = rt->o;
	double score[MAX_PODS] = { 0 };
	uint32_t blocks[MAX_PODS] = { 0 }, spec[MAX_PODS] = { 0 };
	int rows, best = -1;

	/* 1. The prompt's block keys, chained from the model's root key with the index's
	 *    algorithm, seed and block size (a trailing partial block has no key). */
	size_t nk = ntok / rt->bs;
	if (nk > rt->keys_cap) {
		rt->keys_cap = nk;
		rt->keys = tc_xrealloc(rt->keys, nk * sizeof(*rt->keys));
	}
	nk = kvidx_key_chain(rt->algo, rt->root, tokens, ntok, rt->bs, rt->keys, nk);

	/* 2. Score the candidates: per pod, the consecutive blocks from block 0 it holds,
	 *    confirmed or predicted. Wait-free. -KVIDX_ERETRY means this reader was expelled
	 *    while stalled and has re-registered: one retry, then route without scores. */
	pods_maybe_refresh(rt, now);
	rows = kvidx_score(rt->r, rt->keys, nk, rt->cand, rt->ncand, &rt->weights, rt->rows,
			   rt->ncand);
	if (rows == -KVIDX_ERETRY) {
		rt->st.retries++;
		rows = kvidx_score(rt->r, rt->keys, nk, rt->cand, rt->ncand, &rt->weights, rt->rows,
				   rt->ncand);
	}
	if (rows < 0) {
		rt->st.score_failed++;
		rows = 0;
	}
	for (int k = 0; k < rows; k++)
		for (int i = 0; i < o->npods; i++)
			if (o->pods[i].idx == rt->rows[k].pod) {
				score[i] = rt->rows[k].score;
				blocks[i] = rt->rows[k].blocks;
				spec[i] = rt->rows[k].spec_blocks;
			}

	/* 3. Pick: the best score; ties go to the pod with the fewest requests outstanding,
	 *    then round robin (the scan starts after the previous pick). */
	for (int k = 0; k < o->npods; k++) {
		int i = (rt->rr + k) % o->npods;
		if (best < 0 || score[i] > score[best] ||
		    (score[i] == score[best] && o->pods[i].outstanding < o->pods[best].outstanding))
			best = i;
	}
	rt->rr = (best + 1) % o->npods;

	rt->counter++;
	uint64_t corr = rt->corr_hi | (rt->counter & 0xffffffffull);
	struct req *q = &rt->pend[rt->counter & (PENDING - 1)]; /* free: see submit() */
	*q = (struct req){ .corr = corr, .sent_ns = now, .n = n, .cand = best, .pod = -1,
			   .prompt_tokens = (uint32_t)ntok, .blocks = blocks[best],
			   .spec_blocks = spec[best] };
	q->kind = !blocks[best] ? K_NOMATCH : spec[best] ? K_PREDICTED : K_CONFIRMED;

	/* 4. Commit the decision: the writer adds speculative entries for the prompt's blocks on
	 *    the chosen pod, trusted for the pod's TTL until its BlockStored event confirms them,
	 *    and starts the route-to-confirmation clock. Wait-free; a full ring drops it. */
	if (o->pods[best].idx >= 0) {
		struct kvidx_route route = {
			.corr_id = corr,
			.pod = o->pods[best].idx,
			.prefill_pod = -1,
			.keys = rt->keys,
			.nkeys = nk < KVIDX_MAX_COMMIT_KEYS ? nk : KVIDX_MAX_COMMIT_KEYS,
			.matched_blocks = blocks[best],
			.matched_spec = spec[best],
		};
		int rc = kvidx_commit(rt->r, &route);
		if (rc == 0)
			q->pod = route.pod;
		else
			rt->st.commits_dropped++;
	}
	rt->st.decisions[q->kind]++;
	print_route(rt, q, nk, score[best]);
	return q;
}

/* ---- requests and replies -------------------------------------------------------------------- */

static void req_free(struct router *rt, struct req *q)
{
	rt->o->pods[q->cand].outstanding--;
	q->corr = 0;
	rt->inflight--;
}

/* Routes and sends one prompt. */
static void submit(struct router *rt, const uint32_t *tokens, size_t ntok, uint64_t n)
{
	uint64_t now = kvidx_now_ns();
	struct req *old = &rt->pend[(rt->counter + 1) & (PENDING - 1)];

	if (old->corr) {
		/* Still in flight PENDING requests later: give it up to reuse its slot. */
		rt->st.unanswered++;
		print_outcome(rt, old, "timeout", 0, 0, false, now);
		req_free(rt, old);
	}
	struct req *q = route_one(rt, tokens, ntok, n, now);
	struct pod *p = &rt->o->pods[q->cand];
	p->outstanding++;
	p->routed++;
	rt->inflight++;
	msgpack_sbuffer_clear(&rt->sbuf);
	if (kvs_encode_request(&rt->sbuf, q->corr, rt->o->model, tokens, ntok) < 0 ||
	    zmq_send(p->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(p->dealer, rt->sbuf.data, rt->sbuf.size, ZMQ_DONTWAIT) < 0) {
		rt->st.unsent++;
		print_outcome(rt, q, "unsent", 0, 0, false, now);
		req_free(rt, q);
	}
}

/* A reply: report the outcome to the index and account for it. */
static void on_reply(struct router *rt, const struct kvs_reply *rp, uint64_t now)
{
	struct req *q = &rt->pend[rp->corr_id & (PENDING - 1)];
	uint32_t bs = rt->bs, expected, cached = rp->cached_tokens;
	bool fw;

	if (q->corr != rp->corr_id || !q->corr) {
		rt->st.late_replies++; /* given up already, or not ours */
		return;
	}
	/* What the match promised: the matched blocks, except that a pod never reports a whole
	 * prompt as cached (vLLM recomputes its last token). */
	expected = q->blocks * bs;
	if (q->prompt_tokens && expected > (q->prompt_tokens - 1) / bs * bs)
		expected = (q->prompt_tokens - 1) / bs * bs;
	fw = q->blocks && cached < expected;
	if (q->pod >= 0 &&
	    kvidx_report_outcome(rt->r, q->corr, q->pod, cached, q->prompt_tokens) < 0)
		rt->st.reports_dropped++;
	rt->st.outcomes++;
	if ((unsigned)rp->status < 3)
		rt->st.status[rp->status]++;
	rt->st.cached_tokens += cached;
	rt->st.prompt_tokens += q->prompt_tokens;
	if (fw) {
		rt->st.false_warm[q->kind]++;
		rt->st.wasted_tokens += expected - cached;
	}
	print_outcome(rt, q, kvs_status_name(rp->status), cached, expected, fw, now);
	req_free(rt, q);
}

/* Reads every reply waiting on a pod's DEALER: ["", reply] (or [reply]). */
static void read_replies(struct router *rt, struct pod *p)
{
	char err[160];

	for (;;) {
		zmq_msg_t m;
		int more = 0;
		size_t sz = sizeof(more);
		struct kvs_reply rp;

		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return;
		}
		zmq_getsockopt(p->dealer, ZMQ_RCVMORE, &more, &sz);
		if (more && zmq_msg_size(&m) == 0) { /* the empty delimiter */
			zmq_msg_close(&m);
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&m);
				return;
			}
			zmq_getsockopt(p->dealer, ZMQ_RCVMORE, &more, &sz);
		}
		bool ok = !more && kvs_decode_reply(zmq_msg_data(&m), zmq_msg_size(&m), &rp, err,
						    sizeof(err)) == 0;
		zmq_msg_close(&m);
		while (more) { /* drop the rest of a malformed message */
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0)
				more = 0;
			else
				zmq_getsockopt(p->dealer, ZMQ_RCVMORE, &more, &sz);
			zmq_msg_close(&m);
		}
		if (!ok) {
			if (rt->st.bad_replies++ < 5)
				fprintf(stderr, PROG ": bad reply from %s: %s\n", p->name, err);
			continue;
		}
		on_reply(rt, &rp, kvidx_now_ns());
	}
}

/* Gives up requests older than the reply timeout (oldest first: all share one timeout). */
static void expire_requests(struct router *rt, uint64_t now)
{
	uint64_t limit = rt->o->reply_timeout_ms * NS_PER_MS;

	while (rt->oldest <= rt->counter) {
		struct req *q = &rt->pend[rt->oldest & (PENDING - 1)];
		if (q->corr == (rt->corr_hi | (rt->oldest & 0xffffffffull))) {
			if (now - q->sent_ns < limit)
				break;
			rt->st.unanswered++;
			print_outcome(rt, q, "timeout", 0, 0, false, now);
			req_free(rt, q);
		}
		rt->oldest++;
	}
}

/* ---- input: lines or the synthetic workload ------------------------------------------------ */

/* A synthetic conversation's next turn: the whole previous prompt plus fresh blocks. */
struct followup {
	uint64_t due;
	uint32_t *toks;
	size_t n;
	unsigned turn;
};

struct input {
	int fd;       /* -1: synthetic */
	bool eof;
	char *buf;
	size_t len, cap;
	uint64_t lineno;
	uint32_t *toks;
	size_t toks_cap;
	uint64_t rng;     /* prompts: prefix choice, suffix tokens */
	uint64_t gap_rng; /* arrival gaps and follow-up draws */
	uint64_t made;    /* requests sent */
	uint64_t period, next_due, stop_at; /* pacing (0: none) */
	struct followup fu[MAX_FOLLOWUPS];
	size_t nfu;
};

/*
 * Parses one line into in->toks. Returns the token count, or -1 for a line to skip (blank,
 * '#' comment, or a bad token, which is reported).
 */
static long parse_line(struct router *rt, struct input *in, char *line)
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
		    (*end && !strchr(" \t,\r\v\f", *end)) || n >= KVS_MAX_TOKENS) {
			if (rt->st.bad_lines++ < 5)
				fprintf(stderr,
					PROG ": input line %" PRIu64 ": bad token near '%.20s' "
					     "(tokens are decimal uint32, separated by whitespace "
					     "or commas); line skipped\n",
					in->lineno, p);
			return -1;
		}
		if (n == in->toks_cap) {
			in->toks_cap = in->toks_cap ? 2 * in->toks_cap : 1024;
			in->toks = tc_xrealloc(in->toks, in->toks_cap * sizeof(*in->toks));
		}
		in->toks[n++] = (uint32_t)v;
		p = end;
	}
	return (long)n;
}

/* A complete line waiting in the buffer? Its length (without the newline) in *len. */
static bool line_ready(const struct input *in, size_t *len)
{
	const char *nl = in->len ? memchr(in->buf, '\n', in->len) : NULL;

	if (nl) {
		*len = (size_t)(nl - in->buf);
		return true;
	}
	if (in->eof && in->len) { /* a last line without a newline */
		*len = in->len;
		return true;
	}
	return false;
}

/* Reads what the input descriptor has (the caller polled it). */
static void input_read(struct input *in)
{
	if (in->cap - in->len < 65536) {
		if (in->cap >= MAX_LINE) {
			fprintf(stderr, PROG ": input line longer than %u bytes\n", MAX_LINE);
			exit(1);
		}
		in->cap = in->cap ? 2 * in->cap : 1 << 16;
		in->buf = tc_xrealloc(in->buf, in->cap + 1);
	}
	ssize_t r = read(in->fd, in->buf + in->len, in->cap - in->len);
	if (r > 0)
		in->len += (size_t)r;
	else if (r == 0 || (errno != EAGAIN && errno != EINTR))
		in->eof = true;
}

/* Takes the next line's prompt: token count, or -1 if that line is to be skipped. */
static long input_take_line(struct router *rt, struct input *in, size_t len)
{
	in->buf[len] = '\0';
	in->lineno++;
	long n = parse_line(rt, in, in->buf);
	size_t used = len < in->len ? len + 1 : len;
	memmove(in->buf, in->buf + used, in->len - used);
	in->len -= used;
	return n;
}

/*
 * A synthetic prompt: one of --prefixes shared prefixes, then fresh suffix blocks. A prefix's
 * tokens depend only on its number and the block size, so every kvidx-route shares the same
 * prefixes (system prompts); --seed picks the prefix of each request and its suffix tokens.
 */
static size_t synth_prompt(struct router *rt, struct input *in)
{
	const struct opts *o = rt->o;
	size_t pt = o->prefix_blocks * rt->bs, n = pt + o->suffix_blocks * rt->bs;
	uint64_t k = tc_rng_next(&in->rng) % o->prefixes;

	if (n > in->toks_cap) {
		in->toks_cap = n;
		in->toks = tc_xrealloc(in->toks, n * sizeof(*in->toks));
	}
	uint64_t ps = 0x7072656669780000ull ^ (k << 8) ^ rt->bs; /* "prefix", k */
	for (size_t i = 0; i < pt; i++)
		in->toks[i] = (uint32_t)(tc_rng_next(&ps) % VOCAB);
	for (size_t i = pt; i < n; i++)
		in->toks[i] = (uint32_t)(tc_rng_next(&in->rng) % VOCAB);
	return n;
}

/* A uniform draw in (0, 1]. */
static double unit(uint64_t *rng)
{
	return (double)((tc_rng_next(rng) >> 11) + 1) / 9007199254740992.0;
}

/* The earliest waiting follow-up, or -1. */
static int followup_next(const struct input *in)
{
	int best = -1;

	for (size_t i = 0; i < in->nfu; i++)
		if (best < 0 || in->fu[i].due < in->fu[best].due)
			best = (int)i;
	return best;
}

/* Routes and sends one prompt; in synthetic mode, maybe schedules its next turn. */
static void issue(struct router *rt, struct input *in, const uint32_t *toks, size_t n,
		  unsigned turn)
{
	const struct opts *o = rt->o;

	in->made++;
	submit(rt, toks, n, in->made);
	if (!o->synthetic || turn >= MAX_TURNS || in->nfu == MAX_FOLLOWUPS ||
	    !(unit(&in->gap_rng) <= o->followups))
		return;
	/* The next turn shares this whole prompt, including blocks the pod has not confirmed
	 * yet: exactly what speculation is for. */
	size_t add = (o->suffix_blocks ? o->suffix_blocks : 1) * rt->bs;
	struct followup *f = &in->fu[in->nfu++];
	f->toks = tc_xrealloc(NULL, (n + add) * sizeof(*f->toks));
	memcpy(f->toks, toks, n * sizeof(*toks));
	for (size_t i = 0; i < add; i++)
		f->toks[n + i] = (uint32_t)(tc_rng_next(&in->rng) % VOCAB);
	f->n = n + add;
	f->turn = turn + 1;
	f->due = kvidx_now_ns() + (uint64_t)(-ln_pos(unit(&in->gap_rng)) * o->followup_ms * 1e6);
}

/*
 * Sends every request that is due: follow-up turns, then new prompts at --rate (or every
 * complete input line without it). Returns false once nothing more will be sent (end of
 * input, --count, --duration); waiting follow-ups are then dropped.
 */
static bool send_due(struct router *rt, struct input *in)
{
	const struct opts *o = rt->o;
	uint64_t now = kvidx_now_ns();
	bool more = true;

	for (;;) {
		if ((o->count && in->made >= o->count) || (in->stop_at && now >= in->stop_at)) {
			more = false;
			break;
		}
		int f = followup_next(in);
		if (f >= 0 && in->fu[f].due <= now) {
			struct followup fu = in->fu[f];
			in->fu[f] = in->fu[--in->nfu];
			issue(rt, in, fu.toks, fu.n, fu.turn);
			free(fu.toks);
			now = kvidx_now_ns();
			continue;
		}
		if (in->period && now < in->next_due)
			break;
		long n;
		size_t len;
		if (o->synthetic) {
			n = (long)synth_prompt(rt, in);
		} else if (line_ready(in, &len)) {
			n = input_take_line(rt, in, len);
			if (n < 0)
				continue;
		} else {
			more = !in->eof;
			break;
		}
		issue(rt, in, in->toks, (size_t)n, 1);
		if (in->period) {
			/* Even spacing, or exponential gaps (Poisson arrivals). */
			in->next_due += o->poisson ? (uint64_t)(-ln_pos(unit(&in->gap_rng)) *
								(double)in->period) :
						     in->period;
			if (in->next_due + NS_PER_S < now)
				in->next_due = now; /* far behind (a stall): do not burst */
		}
		now = kvidx_now_ns();
	}
	if (!more) {
		while (in->nfu)
			free(in->fu[--in->nfu].toks);
	}
	return more;
}

/* Milliseconds until the next request is due (at most cap), 0 if one is due now. */
static long next_wait_ms(const struct router *rt, const struct input *in, long cap)
{
	uint64_t now = kvidx_now_ns(), due = UINT64_MAX;
	size_t len;
	int f = followup_next(in);

	if (f >= 0)
		due = in->fu[f].due;
	if (in->period && (rt->o->synthetic || line_ready(in, &len)) && in->next_due < due)
		due = in->next_due;
	if (due == UINT64_MAX)
		return cap;
	if (due <= now)
		return 0;
	uint64_t ms = (due - now + NS_PER_MS - 1) / NS_PER_MS;
	return ms < (uint64_t)cap ? (long)ms : cap;
}

/* ---- options --------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fputs(
"Usage: " PROG " --pod NAME=ENDPOINT [--pod ...] [OPTION]...\n"
"A reference router worker and load generator for a kvidx index. For each prompt it computes\n"
"the block keys (the index's algorithm, seed and block size, and --model), scores the pods\n"
"wait-free, picks one, commits the decision to the index (speculative entries, trusted for\n"
"the pod's TTL until a BlockStored event confirms them), sends the prompt to the pod's serve\n"
"socket (kvidx-fakepod --serve) and reports the reply's cached tokens back to the index.\n"
"\n"
"Index and pods:\n"
"  --name NAME            index to attach to (default kvidx)\n"
"  --model M              model the keys are rooted at and sent to the pods (default\n"
"                         fake-model, kvidx-fakepod's default)\n"
"  --pod NAME=ENDPOINT    a candidate pod, repeatable (at least one; at most 256): NAME as in\n"
"                         the index (the pod's ip:port), ENDPOINT its serve socket, e.g.\n"
"                         --pod 127.0.0.1:8000=tcp://127.0.0.1:8000\n"
"  --spec-weight W        weight of a speculative block in the score, 0..1 (default 1, as\n"
"                         llm-d; below 1 a confirmed match beats an equally long prediction)\n"
"\n"
"Input (default: standard input, one prompt per line, tokens as decimal uint32 separated\n"
"by whitespace or commas; blank lines and lines starting with # are skipped):\n"
"  --file FILE            read the prompts from FILE instead\n"
"  --synthetic            generate a shared-prefix workload instead:\n"
"  --prefixes K             distinct shared prefixes (default 8)\n"
"  --prefix-blocks N        blocks per prefix (default 8)\n"
"  --suffix-blocks N        fresh blocks after the prefix in each prompt (default 2)\n"
"  --seed N                 seed of the prefix choice and of the suffixes (default 1); the\n"
"                           prefixes themselves are the same in every kvidx-route\n"
"  --followups P            probability that a request gets a next turn: the whole prompt\n"
"                           plus --suffix-blocks fresh blocks, up to 4 turns (default 0)\n"
"  --followup-ms MS         mean of the exponential gap before a next turn (default 100)\n"
"  --rate R               requests per second (synthetic default 10; with lines: default 0,\n"
"                         each line as soon as it is read)\n"
"  --poisson              exponential gaps between requests (Poisson arrivals at --rate)\n"
"                         instead of even spacing\n"
"  --count N              stop after N requests, next turns included (default 0: no\n"
"                         limit)\n"
"  --duration S           stop sending after S seconds (default 0: no limit)\n"
"  --reply-timeout-ms MS  give a request up if its pod has not answered (default 10000)\n"
"\n"
"Output:\n"
"  --quiet                no line per decision and outcome, only the summary\n"
"  --json                 JSON lines instead of text\n"
"  -h, --help             print this help and exit\n"
"\n"
"Policy: the best score wins (blocks matched from block 0, tier- and speculation-weighted);\n"
"ties go to the pod with the fewest requests outstanding, then round robin. Pods the index\n"
"does not know (yet) are routed to without scores or commits. Correlation ids are\n"
"(pid << 32) | n, n counting this worker's requests from 1.\n"
"\n"
"Each decision prints its kind: predicted (the chosen pod's match includes speculative\n"
"blocks), confirmed (the match is all confirmed blocks) or nomatch; each reply prints its\n"
"status (ok, failed, cancelled; timeout or unsent when there was none), the cached tokens,\n"
"the tokens the match promised, and FALSE-WARM when the pod cached fewer than promised.\n"
"At the end (input exhausted and every reply in or timed out, --count, --duration, SIGTERM\n"
"or SIGINT) a summary: decisions by kind, outcomes, false warm routes, wasted prefill\n"
"tokens, dropped commits, requests per pod.\n"
"\n"
"Exit status: 0 on success or after SIGTERM/SIGINT, 1 if the index or a socket cannot be\n"
"set up, 2 on bad usage.\n",
	      f);
}

static uint64_t opt_u64(const char *flag, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (!tc_parse_dec(s, max, &v) || v < min)
		tc_usage_error("--%s: expected an integer in %" PRIu64 "..%" PRIu64 ", got '%s'",
			       flag, min, max, s);
	return v;
}

static double opt_double(const char *flag, const char *s, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !(v == v && v - v == 0) || v < min || v > max)
		tc_usage_error("--%s: expected a number in %g..%g, got '%s'", flag, min, max, s);
	return v;
}

static void opt_pod(struct opts *o, char *arg)
{
	char *eq = strchr(arg, '=');

	if (!eq || eq == arg || !eq[1])
		tc_usage_error("--pod: expected NAME=ENDPOINT, got '%s'", arg);
	*eq = '\0';
	if (strlen(arg) >= KVIDX_POD_NAME_MAX)
		tc_usage_error("--pod: name '%s' is longer than %d bytes", arg,
			       KVIDX_POD_NAME_MAX - 1);
	if (!strstr(eq + 1, "://"))
		tc_usage_error("--pod: '%s' is not a ZeroMQ endpoint (e.g. tcp://127.0.0.1:8000)",
			       eq + 1);
	if (o->npods == MAX_PODS)
		tc_usage_error("--pod: at most %d pods", MAX_PODS);
	for (int i = 0; i < o->npods; i++)
		if (!strcmp(o->pods[i].name, arg))
			tc_usage_error("--pod: %s is given twice", arg);
	struct pod *p = &o->pods[o->npods++];
	snprintf(p->name, sizeof(p->name), "%s", arg);
	p->endpoint = eq + 1;
	p->idx = -1;
}

enum {
	O_NAME = 256, O_MODEL, O_POD, O_SPEC_WEIGHT, O_FILE, O_SYNTH, O_PREFIXES, O_PREFIX_BLOCKS,
	O_SUFFIX_BLOCKS, O_SEED, O_FOLLOWUPS, O_FOLLOWUP_MS, O_RATE, O_POISSON, O_COUNT,
	O_DURATION, O_TIMEOUT, O_QUIET, O_JSON,
};

static void parse_args(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "name", required_argument, NULL, O_NAME },
		{ "model", required_argument, NULL, O_MODEL },
		{ "pod", required_argument, NULL, O_POD },
		{ "spec-weight", required_argument, NULL, O_SPEC_WEIGHT },
		{ "file", required_argument, NULL, O_FILE },
		{ "synthetic", no_argument, NULL, O_SYNTH },
		{ "prefixes", required_argument, NULL, O_PREFIXES },
		{ "prefix-blocks", required_argument, NULL, O_PREFIX_BLOCKS },
		{ "suffix-blocks", required_argument, NULL, O_SUFFIX_BLOCKS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "followups", required_argument, NULL, O_FOLLOWUPS },
		{ "followup-ms", required_argument, NULL, O_FOLLOWUP_MS },
		{ "rate", required_argument, NULL, O_RATE },
		{ "poisson", no_argument, NULL, O_POISSON },
		{ "count", required_argument, NULL, O_COUNT },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "reply-timeout-ms", required_argument, NULL, O_TIMEOUT },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool rate_set = false;
	int c;

	tc_prog = PROG;
	*o = (struct opts){ .name = KVIDX_DEFAULT_NAME, .model = "fake-model", .prefixes = 8,
			    .prefix_blocks = 8, .suffix_blocks = 2, .seed = 1,
			    .reply_timeout_ms = 10000, .spec_weight = 1.0, .followup_ms = 100 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case O_NAME:
			o->name = tc_index_name_arg(optarg);
			break;
		case O_MODEL:
			if (strlen(optarg) >= KVS_MODEL_MAX)
				tc_usage_error("--model: at most %d bytes", KVS_MODEL_MAX - 1);
			o->model = optarg;
			break;
		case O_POD: opt_pod(o, optarg); break;
		case O_SPEC_WEIGHT: o->spec_weight = opt_double("spec-weight", optarg, 0, 1); break;
		case O_FILE: o->file = optarg; break;
		case O_SYNTH: o->synthetic = true; break;
		case O_PREFIXES: o->prefixes = opt_u64("prefixes", optarg, 1, 1u << 20); break;
		case O_PREFIX_BLOCKS:
			o->prefix_blocks = opt_u64("prefix-blocks", optarg, 0, 4096);
			break;
		case O_SUFFIX_BLOCKS:
			o->suffix_blocks = opt_u64("suffix-blocks", optarg, 0, 4096);
			break;
		case O_SEED: o->seed = opt_u64("seed", optarg, 0, UINT64_MAX); break;
		case O_FOLLOWUPS: o->followups = opt_double("followups", optarg, 0, 1); break;
		case O_FOLLOWUP_MS:
			o->followup_ms = opt_double("followup-ms", optarg, 0, 3600000);
			break;
		case O_RATE:
			o->rate = opt_double("rate", optarg, 0, 1e7);
			rate_set = true;
			break;
		case O_POISSON: o->poisson = true; break;
		case O_COUNT: o->count = opt_u64("count", optarg, 0, UINT32_MAX); break;
		case O_DURATION: o->duration = opt_double("duration", optarg, 0, 1e7); break;
		case O_TIMEOUT:
			o->reply_timeout_ms = opt_u64("reply-timeout-ms", optarg, 1, 86400000);
			break;
		case O_QUIET: o->quiet = true; break;
		case O_JSON: o->json = true; break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			tc_getopt_error(c, argv);
		}
	}
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	if (!o->npods)
		tc_usage_error("no pods: give at least one --pod NAME=ENDPOINT");
	if (o->synthetic && o->file)
		tc_usage_error("--synthetic and --file exclude each other");
	if (o->synthetic && o->prefix_blocks + o->suffix_blocks == 0)
		tc_usage_error("--prefix-blocks and --suffix-blocks are both 0: empty prompts");
	if (o->synthetic && !rate_set)
		o->rate = 10;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int attach(struct router *rt)
{
	struct kvidx_info in;
	int rc;

	rt->r = kvidx_reader_open(rt->o->name);
	if (!rt->r) {
		rc = -errno;
		if (rc == -ENOENT)
			fprintf(stderr, PROG ": index '%s' not found (is kvidx-ingestd running?)\n",
				rt->o->name);
		else
			fprintf(stderr, PROG ": cannot attach to index '%s': %s\n", rt->o->name,
				kvidx_strerror(rc));
		return -1;
	}
	rc = kvidx_reader_info(rt->r, &in);
	if (rc == -KVIDX_ERETRY)
		rc = kvidx_reader_info(rt->r, &in);
	if (rc < 0 || !in.block_size) {
		fprintf(stderr, PROG ": reading index '%s': %s\n", rt->o->name,
			rc < 0 ? kvidx_strerror(rc) : "block size 0");
		return -1;
	}
	rt->algo = in.algo;
	rt->bs = in.block_size;
	rt->gen = in.generation;
	rt->root = kvidx_key_root(in.algo, in.seed, rt->o->model);
	kvidx_weights_default(&rt->weights);
	rt->weights.speculative = rt->o->spec_weight;
	return 0;
}

static int open_sockets(struct router *rt, void *zctx)
{
	int zero = 0;

	for (int i = 0; i < rt->o->npods; i++) {
		struct pod *p = &rt->o->pods[i];
		p->dealer = zmq_socket(zctx, ZMQ_DEALER);
		if (!p->dealer || zmq_setsockopt(p->dealer, ZMQ_LINGER, &zero, sizeof(zero)) < 0 ||
		    zmq_connect(p->dealer, p->endpoint) < 0) {
			fprintf(stderr, PROG ": pod %s: cannot connect to %s: %s\n", p->name,
				p->endpoint, zmq_strerror(errno));
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct opts o;
	static struct router rt;
	struct input in = { .fd = -1 };
	zmq_pollitem_t items[MAX_PODS + 2];
	sigset_t sigs;
	int sfd, rc = 0;
	void *zctx;

	parse_args(&o, argc, argv);
	rt.o = &o;
	if (!o.quiet)
		setvbuf(stdout, NULL, _IOLBF, 0);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
		return 1;
	}
	if (!o.synthetic) {
		in.fd = o.file ? open(o.file, O_RDONLY | O_CLOEXEC) : 0;
		if (in.fd < 0) {
			fprintf(stderr, PROG ": %s: %s\n", o.file, strerror(errno));
			return 1;
		}
	}
	in.rng = o.seed;
	if (attach(&rt) < 0)
		return 1;
	zctx = zmq_ctx_new();
	if (!zctx || open_sockets(&rt, zctx) < 0)
		return 1;
	rt.pend = calloc(PENDING, sizeof(*rt.pend));
	rt.rows = calloc(MAX_PODS, sizeof(*rt.rows));
	if (!rt.pend || !rt.rows)
		tc_die_nomem();
	msgpack_sbuffer_init(&rt.sbuf);
	rt.corr_hi = (uint64_t)getpid() << 32;
	rt.oldest = 1;
	rt.t0 = kvidx_now_ns();
	pods_refresh(&rt, true);
	rt.next_refresh_ns = rt.t0 + REFRESH_NS;
	rt.next_missing_ns = rt.t0 + MISSING_NS;

	in.period = o.rate > 0 ? (uint64_t)(1e9 / o.rate) : 0;
	in.next_due = rt.t0;
	in.stop_at = o.duration > 0 ? rt.t0 + (uint64_t)(o.duration * 1e9) : 0;
	in.gap_rng = o.seed ^ 0x6761707300000000ull; /* "gaps": apart from the prompts' */
	bool sending = true;

	for (;;) {
		if (sending)
			sending = send_due(&rt, &in);
		uint64_t now = kvidx_now_ns();
		expire_requests(&rt, now);
		if (!sending && !rt.inflight)
			break;

		/* Wait for replies, input, a signal, or the next due time. */
		int n = 0, i_sig, i_in = -1;
		for (int i = 0; i < o.npods; i++)
			items[n++] = (zmq_pollitem_t){ .socket = o.pods[i].dealer,
						       .events = ZMQ_POLLIN };
		items[n] = (zmq_pollitem_t){ .fd = sfd, .events = ZMQ_POLLIN };
		i_sig = n++;
		size_t dummy;
		if (sending && in.fd >= 0 && !in.eof && !line_ready(&in, &dummy)) {
			items[n] = (zmq_pollitem_t){ .fd = in.fd, .events = ZMQ_POLLIN };
			i_in = n++;
		}
		long timeout = sending ? next_wait_ms(&rt, &in, 100) : 100;
		if (zmq_poll(items, n, timeout) < 0 && errno != EINTR) {
			fprintf(stderr, PROG ": zmq_poll: %s\n", zmq_strerror(errno));
			rc = 1;
			break;
		}
		if (items[i_sig].revents & ZMQ_POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
				break; /* SIGTERM or SIGINT: summary and out */
		}
		for (int i = 0; i < o.npods; i++)
			if (items[i].revents & ZMQ_POLLIN)
				read_replies(&rt, &o.pods[i]);
		if (i_in >= 0 && (items[i_in].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
			input_read(&in);
	}
	print_summary(&rt);
	for (int i = 0; i < o.npods; i++)
		zmq_close(o.pods[i].dealer);
	zmq_ctx_term(zctx);
	kvidx_reader_close(rt.r);
	msgpack_sbuffer_destroy(&rt.sbuf);
	free(rt.pend);
	free(rt.rows);
	free(rt.keys);
	free(in.buf);
	free(in.toks);
	return rc;
}
