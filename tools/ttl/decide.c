/*
 * decide.c — what follows from a pod's measurements (measure.c): where J's backlog comes from
 * (--backlog, else the measured event lag p99), the plan T = Lq + J against floor and cap,
 * the warning when the backlog eats the slack, docs/ttl.md's guidance lines, the settings
 * compared and, with --sweep, the pod's TTL curve. No output here (text.c, json.c).
 */
#include <inttypes.h>
#include <stdio.h>

#include "advisor.h"
#include "segment.h"

/* The settings compared: the --ttl values, or the documented default. */
int settings(const struct opts *o, const double **out, bool *dflt)
{
	static const double def = TTL_DEFAULT_S;

	*dflt = o->nttl == 0;
	*out = o->nttl ? o->ttls : &def;
	return o->nttl ? o->nttl : 1;
}

const char *fresh_name(uint64_t sp)
{
	return sp == 0 ? "fresh" : sp == 1 ? "replaying-disconnected" :
	       sp == 2 ? "pipeline-broken" : "unknown";
}

/* docs/ttl.md's guidance for a pod, one line each, into g[]; returns how many. */
static int guidance(const struct live *L, const struct tc_pod *p, bool have_lq,
		    char g[][256], const char *backlog_note)
{
	const struct opts *o = L->o;
	uint64_t spec = routes_of(p), stale = p->ctr[KV_PC_routes_stale_expiries];
	uint64_t early = p->ctr[KV_PC_early_expiries], in_time = p->ctr[KV_PC_confirmed_in_time];
	uint64_t sp = p->ctr[KV_PC_spec_paused];
	char a[32], b[32];
	int n = 0;

	if (sp == 2)
		snprintf(g[n++], 256, "pipeline broken: fix the subscriber; do not stretch the TTL");
	else if (sp == 1 || (p->flags & KV_POD_SPEC_PAUSED))
		snprintf(g[n++], 256, "replaying or disconnected: speculation is paused until "
				      "events are fresh again; do not stretch the TTL over the gap");
	if (!have_lq)
		snprintf(g[n++], 256, "no confirmations yet: no measured Lq; start from the "
				      "documented 2 s default");
	if (backlog_note && backlog_note[0])
		snprintf(g[n++], 256, "%s", backlog_note);
	if (early + in_time >= MIN_JUDGE) {
		double fr = (double)early / (double)(early + in_time);
		if (fr > 1.0 - o->q + 1e-12)
			snprintf(g[n++], 256,
				 "early expiries high (%s%% of confirmed predictions, above the "
				 "%s%% a %s target accepts): TTL shorter than the event path",
				 ttl_fmt_num(a, sizeof(a), 100.0 * fr),
				 ttl_fmt_num(b, sizeof(b), 100.0 * (1.0 - o->q)), L->pct);
	}
	if (spec >= MIN_JUDGE) {
		double pf = (double)stale / (double)spec;
		if (pf > o->stale_limit)
			snprintf(g[n++], 256,
				 "stale expiries high (%s%% of routes, above the %s%% "
				 "limit): failed predictions or lost events; a longer TTL will not "
				 "help",
				 ttl_fmt_num(a, sizeof(a), 100.0 * pf),
				 ttl_fmt_num(b, sizeof(b), 100.0 * o->stale_limit));
	} else if (spec || early + in_time) {
		snprintf(g[n++], 256, "too few routes (%" PRIu64 ") to judge expiry rates; "
				      "%d or more needed", spec, MIN_JUDGE);
	}
	return n;
}

/* J's backlog, the plan, and the warning when the backlog eats most of the slack. */
static void decide_plan(const struct live *L, struct pod_eval *e)
{
	const struct opts *o = L->o;
	const struct lat *lag = e->lag;
	char d[32], d2[32];

	if (o->have_backlog) {
		e->bsrc = "given (--backlog)";
	} else if (lag) {
		e->pl.backlog = lag->p[2];
		e->bsrc = lag == &e->lag_rec ? "measured: recent event lag p99" :
					       "measured: cumulative event lag p99";
	} else {
		e->bsrc = "assumed: no event lag measured yet";
	}
	if (e->have_lq)
		ttl_plan_compute(&e->pl);
	e->bnote[0] = '\0';
	if (lag && e->have_lq && e->ttl_ms) {
		double room = e->ttl_in_force - e->pl.lq;
		if (room <= 0 || lag->p[2] > 0.5 * room)
			snprintf(e->bnote, sizeof(e->bnote),
				 "subscriber backlog eats most of the slack: event lag p99 %s against "
				 "the %s the TTL in force leaves over Lq; fix the subscriber's backlog "
				 "before stretching the TTL",
				 ttl_fmt_dur(d, sizeof(d), lag->p[2]),
				 ttl_fmt_dur(d2, sizeof(d2), room > 0 ? room : 0));
	}
	if (!e->bnote[0] && lag && o->have_backlog && lag->p[2] > o->backlog)
		snprintf(e->bnote, sizeof(e->bnote),
			 "measured event lag p99 %s exceeds the --backlog allowance of %s",
			 ttl_fmt_dur(d, sizeof(d), lag->p[2]), ttl_fmt_dur(d2, sizeof(d2), o->backlog));
}

/* --sweep: the pod's TTL curve, from a snapshot of the histogram Lq came from. */
static void decide_sweep(struct live *L, struct pod_eval *e)
{
	const struct opts *o = L->o;
	const struct kv_view *v = kv_reader_view(L->r);
	enum kv_hist_id id = !o->cumulative && e->rec.n ? KV_HIST_CONFIRM_RECENT : KV_HIST_CONFIRM;
	struct sweep *sw = &L->sw[L->nsw];

	kv_tm_ro_buckets(kv_tm_view_hist(v, e->p->idx, id), L->sw_hist[L->nsw]);
	*sw = (struct sweep){ .in = { .label = e->p->name, .rec = e->have_lq ? e->pl.rec : 0,
				      .in_force = e->ttl_in_force, .have_expo = e->expo,
				      .lambda = e->lambda, .p = e->pf, .tokens = e->tokens,
				      .hist = L->sw_hist[L->nsw], .ttls = o->ttls,
				      .nttl = o->nttl, .cap = o->cap } };
	sweep_compute(sw);
	L->nsw++;
	e->sw = sw;
}

/* Fills the decided half of e, after measure_pod(). */
void decide_pod(struct live *L, struct pod_eval *e)
{
	decide_plan(L, e);
	e->ng = guidance(L, e->p, e->have_lq, e->g, e->bnote);
	e->nset = settings(L->o, &e->set, &e->dflt);
	e->sw = NULL;
	if (L->o->sweep)
		decide_sweep(L, e);
}
