/*
 * dischttp.c — kvidx-ingestd's HTTP discovery: the poller thread (libcurl), the parsers of
 * vLLM's GET /kv_event_sources and SGLang's GET /server_info (jansson), and the loop side
 * that hands their pods to ing_pods_reconcile() (see dischttp.h for the contract).
 */
#include "dischttp.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "discover.h"
#include "log.h"
#include "telemetry.h"

#define DH_TIMEOUT_MS 2000
#define DH_MSG 200

enum dh_status { DH_UNKNOWN = 0, DH_POD, DH_NONE, DH_FAILED };

/* One round's outcome: the pods wanted, and per target what its poll said. */
struct dh_set {
	size_t n, nt;
	char who[DH_MAX_TARGETS][280]; /* the targets' HOST:PORT, in poll order */
	struct ing_pod_spec spec[DH_MAX_TARGETS];
	enum dh_status st[DH_MAX_TARGETS];
	char msg[DH_MAX_TARGETS][DH_MSG];
};

struct dh_target {
	char host[260];
	unsigned port;
	int kind; /* 0 not known yet, 1 vLLM's sources, 2 SGLang's server_info */
	unsigned fails;
	bool have;
	struct ing_pod_spec last;
};

struct disc_http {
	const struct ing_config *cfg;
	size_t nt;
	struct dh_target t[DH_MAX_TARGETS];
	pthread_t thr;
	bool thr_ok;
	pthread_mutex_t mu; /* guards slot, fresh, stop */
	pthread_cond_t cv;
	bool stop, fresh;
	struct dh_set *work, *slot, *mine;
	/* Targets the loop posts (DNS answers with --discover-http-port), taken by the poller
	 * at its next round under mu: the poller alone touches t[]. */
	bool posted;
	size_t npost;
	char (*post)[DISC_ADDR_LEN];
	enum dh_status logged[DH_MAX_TARGETS]; /* the loop's: last status logged per target */
	char logged_who[DH_MAX_TARGETS][280];
	struct ilog_limit lim;
	_Atomic uint64_t polls, failures, added, removed, pods;
};

__attribute__((format(printf, 3, 4)))
static int perr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- answers -------------------------------------------------------------------------------- */

static bool wildcard(const char *h)
{
	return !*h || !strcmp(h, "*") || !strcmp(h, "0.0.0.0") || !strcmp(h, "::") ||
	       !strcmp(h, "[::]");
}

/* "tcp://HOST:PORT" into host (brackets of [v6] kept) and port. */
static bool parse_tcp(const char *ep, char *host, size_t cap, unsigned *port)
{
	const char *h, *colon;
	char *end;
	unsigned long v;

	if (strncmp(ep, "tcp://", 6))
		return false;
	h = ep + 6;
	colon = strrchr(h, ':');
	if (!colon || (size_t)(colon - h) >= cap || (h[0] == '[' && colon[-1] != ']'))
		return false;
	v = strtoul(colon + 1, &end, 10);
	if (*end || colon[1] < '0' || colon[1] > '9' || v == 0 || v > 65535)
		return false;
	memcpy(host, h, (size_t)(colon - h));
	host[colon - h] = '\0';
	for (const char *p = host; *p; p++)
		if (*p <= ' ' || *p == '/' || *p == '@' || *p >= 0x7f)
			return false;
	*port = (unsigned)v;
	return true;
}

/* tcp://HOST:PORT of an advertised host (a wildcard: the target's own). */
static bool make_ep(char *out, size_t cap, const char *adv, const char *target, unsigned port)
{
	int n = snprintf(out, cap, "tcp://%s:%u", wildcard(adv) ? target : adv, port);

	return n > 0 && (size_t)n < cap;
}

static bool str_or_null(const json_t *v, const char **out)
{
	*out = NULL;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return false;
	*out = json_string_value(v);
	return true;
}

/* The subscription topic of an answer: "" and absent mean every topic (ingestd's default). */
static bool set_topic(struct ing_pod_spec *s, const char *topic)
{
	if (!topic || !*topic)
		return true;
	if (strlen(topic) >= sizeof(s->topic))
		return false;
	snprintf(s->topic, sizeof(s->topic), "%s", topic);
	s->topic_set = true;
	return true;
}

/* One entry of vLLM's sources: its rank, endpoint and replay endpoint, parsed. */
struct vsrc {
	bool seen;
	char host[260], rhost[260];
	unsigned port, rport; /* rport 0: no replay endpoint */
	const char *topic;
};

static int vllm_entry(const json_t *e, struct vsrc *r, char *err, size_t errlen)
{
	const json_t *rank = json_object_get(e, "data_parallel_rank");
	const char *ep, *rep;
	json_int_t k;

	if (!json_is_object(e) || !json_is_integer(rank))
		return perr(err, errlen, "a source without an integer data_parallel_rank");
	k = json_integer_value(rank);
	if (k < 0 || k >= KV_POD_RANKS)
		return perr(err, errlen, "data_parallel_rank %lld out of 0..%d", (long long)k,
			    KV_POD_RANKS - 1);
	r += k;
	if (r->seen)
		return perr(err, errlen, "data_parallel_rank %lld listed twice", (long long)k);
	if (!str_or_null(json_object_get(e, "endpoint"), &ep) || !ep ||
	    !parse_tcp(ep, r->host, sizeof(r->host), &r->port))
		return perr(err, errlen, "rank %lld: endpoint is not tcp://HOST:PORT", (long long)k);
	if (!str_or_null(json_object_get(e, "replay_endpoint"), &rep) ||
	    (rep && !parse_tcp(rep, r->rhost, sizeof(r->rhost), &r->rport)))
		return perr(err, errlen, "rank %lld: replay_endpoint is neither null nor "
			    "tcp://HOST:PORT", (long long)k);
	if (!str_or_null(json_object_get(e, "topic"), &r->topic))
		return perr(err, errlen, "rank %lld: topic is not a string", (long long)k);
	r->seen = true;
	return 0;
}

/* Ranks 1..n-1 beside rank 0 as dp-ranks=n takes them: same hosts, ports + r. */
static unsigned consecutive(const struct vsrc *r, size_t n)
{
	for (size_t k = 1; k < n; k++)
		if (!r[k].seen || strcmp(r[k].host, r[0].host) || r[k].port != r[0].port + k ||
		    (r[0].rport ? r[k].rport != r[0].rport + k || strcmp(r[k].rhost, r[0].rhost)
				: r[k].rport != 0))
			return 1;
	return (unsigned)n;
}

static int parse_vllm(const json_t *root, const char *host, struct ing_pod_spec *s, char *err,
		      size_t errlen)
{
	const json_t *list = json_is_array(root) ? root : json_object_get(root, "sources");
	struct vsrc r[KV_POD_RANKS];

	if (!json_is_array(list))
		return perr(err, errlen, "expected {\"sources\": [...]} or an array");
	if (json_array_size(list) == 0)
		return 0;
	if (json_array_size(list) > KV_POD_RANKS)
		return perr(err, errlen, "%zu sources, at most %d ranks", json_array_size(list),
			    KV_POD_RANKS);
	memset(r, 0, sizeof(r));
	for (size_t i = 0; i < json_array_size(list); i++)
		if (vllm_entry(json_array_get(list, i), r, err, errlen) < 0)
			return -1;
	if (!r[0].seen)
		return perr(err, errlen, "no source for data_parallel_rank 0");
	s->dp_ranks = consecutive(r, json_array_size(list));
	if (s->dp_ranks == 1 && json_array_size(list) > 1)
		perr(err, errlen, "%zu ranks not on consecutive ports: rank 0 only",
		     json_array_size(list));
	if (!make_ep(s->endpoint, sizeof(s->endpoint), r[0].host, host, r[0].port) ||
	    (r[0].rport &&
	     !make_ep(s->replay, sizeof(s->replay), r[0].rhost, host, r[0].rport)) ||
	    !set_topic(s, r[0].topic))
		return perr(err, errlen, "an endpoint or the topic is too long");
	return 1;
}

static int parse_sglang(const json_t *root, const char *host, unsigned bs, struct ing_pod_spec *s,
			char *err, size_t errlen)
{
	const json_t *kv = json_object_get(root, "kv_events");
	const json_t *port = json_object_get(kv, "endpoint_port_base");
	const json_t *dp = json_object_get(kv, "dp_size"), *b = json_object_get(kv, "block_size");
	const char *pub, *eh, *topic, *model;

	if (!json_is_object(root))
		return perr(err, errlen, "server_info is not an object");
	if (!kv || json_is_null(kv))
		return 0;
	if (!json_is_object(kv) || !str_or_null(json_object_get(kv, "publisher"), &pub) ||
	    !str_or_null(json_object_get(kv, "endpoint_host"), &eh) ||
	    !str_or_null(json_object_get(kv, "topic"), &topic) || !json_is_integer(port) ||
	    json_integer_value(port) < 1 || json_integer_value(port) > 65535)
		return perr(err, errlen, "kv_events: expected publisher, endpoint_host, "
			    "endpoint_port_base (1..65535), topic");
	if (pub && strcmp(pub, "zmq"))
		return perr(err, errlen, "kv_events: publisher \"%s\", not zmq", pub);
	if (dp && (!json_is_integer(dp) || json_integer_value(dp) < 1 ||
		   json_integer_value(dp) > KV_POD_RANKS ||
		   json_integer_value(port) + json_integer_value(dp) - 1 > 65535))
		return perr(err, errlen, "kv_events: dp_size not in 1..%d (or past port 65535)",
			    KV_POD_RANKS);
	s->dp_ranks = dp ? (unsigned)json_integer_value(dp) : 1;
	if (eh && (strlen(eh) >= 256 || strpbrk(eh, " /@")))
		return perr(err, errlen, "kv_events: endpoint_host is not a host");
	if (!make_ep(s->endpoint, sizeof(s->endpoint), eh ? eh : "", host,
		     (unsigned)json_integer_value(port)) ||
	    !set_topic(s, topic))
		return perr(err, errlen, "kv_events: endpoint or topic too long");
	if (str_or_null(json_object_get(root, "served_model_name"), &model) && model &&
	    strlen(model) < sizeof(s->model))
		snprintf(s->model, sizeof(s->model), "%s", model);
	if (json_is_integer(b) && json_integer_value(b) != (json_int_t)bs)
		perr(err, errlen, "block_size %lld is not the index's %u: its keys will not match "
		     "the routers'", (long long)json_integer_value(b), bs);
	return 1;
}

static int parse_kind(const char *kind, const char *body, size_t len, const char *host,
		      unsigned port, unsigned bs, struct ing_pod_spec *s, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root;
	int rc;

	memset(s, 0, sizeof(*s));
	err[0] = '\0';
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return perr(err, errlen, "not JSON: %s", je.text);
	if (!strcmp(kind, "kv_event_sources"))
		rc = parse_vllm(root, host, s, err, errlen);
	else
		rc = parse_sglang(root, host, bs, s, err, errlen);
	json_decref(root);
	if (rc == 1 && snprintf(s->name, sizeof(s->name), "%s:%u", host, port) >= (int)sizeof(s->name))
		rc = perr(err, errlen, "pod name %s:%u too long", host, port);
	if (rc == 1)
		s->http_found = true;
	return rc;
}

int dischttp_parse(const char *kind, const char *body, size_t len, const char *host,
		   unsigned port, struct ing_pod_spec *spec, char *err, size_t errlen)
{
	return parse_kind(kind, body, len, host, port, 16, spec, err, errlen);
}

/* ---- the poller thread ---------------------------------------------------------------------- */

struct body {
	char *p;
	size_t n;
	bool over;
};

static size_t on_data(char *d, size_t sz, size_t nm, void *arg)
{
	struct body *b = arg;
	size_t n = sz * nm;

	if (b->n + n > DH_MAX_BODY) {
		b->over = true;
		return 0;
	}
	char *np = realloc(b->p, b->n + n + 1);
	if (!np)
		return 0;
	b->p = np;
	memcpy(b->p + b->n, d, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

/* GET http://host:port/path into b. The HTTP status, or -1 (err says why). */
static long http_get(CURL *c, const char *host, unsigned port, const char *path, struct body *b,
		     char *err, size_t errlen)
{
	char url[400];
	long code = -1;
	CURLcode rc;

	snprintf(url, sizeof(url), "http://%s:%u/%s", host, port, path);
	b->n = 0;
	b->over = false;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		perr(err, errlen, "GET /%s: %s", path,
		     b->over ? "body over 1 MiB" : curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	return code;
}

/* One target's poll: DH_POD (*s), DH_NONE or DH_FAILED, msg saying why or noting. */
static enum dh_status poll_one(struct disc_http *dh, CURL *c, struct dh_target *t,
			       struct body *b, struct ing_pod_spec *s, char *msg)
{
	static const char *const path[] = { "kv_event_sources", "server_info" };

	for (int k = t->kind ? t->kind - 1 : 0; k < 2; k++) {
		long code = http_get(c, t->host, t->port, path[k], b, msg, DH_MSG);

		if (code < 0)
			return DH_FAILED;
		if (code == 404 && k == 0 && !t->kind)
			continue; /* not vLLM's API: SGLang's? */
		if (code != 200) {
			perr(msg, DH_MSG, "GET /%s: HTTP %ld", path[k], code);
			t->kind = 0;
			return DH_FAILED;
		}
		int rc = parse_kind(path[k], b->p ? b->p : "", b->n, t->host, t->port,
				    dh->cfg->block_size, s, msg, DH_MSG);
		if (rc < 0)
			return DH_FAILED;
		t->kind = k + 1;
		if (rc == 1 && dh->cfg->disc.model[0])
			memcpy(s->model, dh->cfg->disc.model, sizeof(s->model));
		return rc ? DH_POD : DH_NONE;
	}
	perr(msg, DH_MSG, "neither GET /kv_event_sources nor GET /server_info is served");
	return DH_FAILED;
}

/* The poller's side of dischttp_set_targets() (mu held): the posted addresses, each at the
 * HTTP port, keeping what it knew of addresses it already had. */
static void take_posted(struct disc_http *dh)
{
	static struct dh_target old[DH_MAX_TARGETS];
	size_t nold = dh->nt;

	memcpy(old, dh->t, nold * sizeof(*old));
	dh->nt = 0;
	for (size_t i = 0; i < dh->npost && dh->nt < DH_MAX_TARGETS; i++) {
		struct dh_target *t = &dh->t[dh->nt++];
		memset(t, 0, sizeof(*t));
		snprintf(t->host, sizeof(t->host), "%s", dh->post[i]);
		t->port = dh->cfg->disc.http_port;
		for (size_t j = 0; j < nold; j++)
			if (!strcmp(old[j].host, t->host) && old[j].port == t->port)
				*t = old[j];
	}
	dh->posted = false;
}

static void poll_round(struct disc_http *dh, CURL *c, struct body *b, struct dh_set *out)
{
	out->n = 0;
	out->nt = dh->nt;
	for (size_t i = 0; i < dh->nt; i++) {
		struct dh_target *t = &dh->t[i];
		struct ing_pod_spec s;

		snprintf(out->who[i], sizeof(out->who[i]), "%s:%u", t->host, t->port);
		out->msg[i][0] = '\0';
		out->st[i] = poll_one(dh, c, t, b, &s, out->msg[i]);
		atomic_fetch_add(&dh->polls, 1);
		if (out->st[i] == DH_FAILED) {
			atomic_fetch_add(&dh->failures, 1);
			if (++t->fails >= DH_FAIL_LIMIT)
				t->have = false;
		} else {
			t->fails = 0;
			t->have = out->st[i] == DH_POD;
			t->last = s;
		}
		if (t->have)
			out->spec[out->n++] = t->last;
	}
}

static void *poller_main(void *arg)
{
	struct disc_http *dh = arg;
	CURL *c = curl_easy_init();
	struct body b = { 0 };

	if (c) {
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)DH_TIMEOUT_MS);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)DH_TIMEOUT_MS / 2);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
	}
	pthread_mutex_lock(&dh->mu);
	while (!dh->stop) {
		if (dh->posted)
			take_posted(dh);
		pthread_mutex_unlock(&dh->mu);
		if (c)
			poll_round(dh, c, &b, dh->work);
		pthread_mutex_lock(&dh->mu);
		struct dh_set *t = dh->slot; /* the newest round replaces one not taken yet */
		dh->slot = dh->work;
		dh->work = t;
		dh->fresh = c != NULL;
		disc_sleep(&dh->cv, &dh->mu, &dh->stop, dh->cfg->disc.interval_ms);
	}
	pthread_mutex_unlock(&dh->mu);
	free(b.p);
	if (c)
		curl_easy_cleanup(c);
	return NULL;
}

/* ---- open / close --------------------------------------------------------------------------- */

/* The targets of cfg->disc.http (its form checked by config.c). */
static void targets_of(struct disc_http *dh, const char *list)
{
	for (const char *p = list; *p && dh->nt < DH_MAX_TARGETS;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		struct dh_target *t = &dh->t[dh->nt];
		char item[300];
		const char *colon;

		snprintf(item, sizeof(item), "%.*s", (int)n, p);
		colon = strrchr(item, ':');
		if (colon && (size_t)(colon - item) < sizeof(t->host)) {
			snprintf(t->host, sizeof(t->host), "%.*s", (int)(colon - item), item);
			t->port = (unsigned)atoi(colon + 1);
			dh->nt++;
		}
		p += n + (end ? 1 : 0);
	}
}

struct disc_http *dischttp_open(const struct ing_config *cfg)
{
	struct disc_http *dh = calloc(1, sizeof(*dh));
	pthread_condattr_t ca;
	sigset_t all, old;

	if (!dh)
		return NULL;
	dh->cfg = cfg;
	targets_of(dh, cfg->disc.http);
	dh->work = calloc(1, sizeof(*dh->work));
	dh->slot = calloc(1, sizeof(*dh->slot));
	dh->mine = calloc(1, sizeof(*dh->mine));
	if (!dh->work || !dh->slot || !dh->mine || curl_global_init(CURL_GLOBAL_DEFAULT)) {
		ilog(ILOG_ERROR, "HTTP discovery: out of memory");
		dischttp_close(dh);
		return NULL;
	}
	pthread_mutex_init(&dh->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&dh->cv, &ca);
	pthread_condattr_destroy(&ca);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	dh->thr_ok = pthread_create(&dh->thr, NULL, poller_main, dh) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!dh->thr_ok) {
		ilog(ILOG_ERROR, "HTTP discovery: cannot start the poller thread");
		dischttp_close(dh);
		return NULL;
	}
	ilog(ILOG_INFO, "HTTP discovery: %s asked every %ums (GET /kv_event_sources, else GET "
	     "/server_info)", cfg->disc.http_port ? "the DNS answer's addresses" : "the addresses",
	     cfg->disc.interval_ms);
	return dh;
}

void dischttp_close(struct disc_http *dh)
{
	if (!dh)
		return;
	if (dh->thr_ok) {
		pthread_mutex_lock(&dh->mu);
		dh->stop = true;
		pthread_cond_signal(&dh->cv);
		pthread_mutex_unlock(&dh->mu);
		pthread_join(dh->thr, NULL);
		pthread_cond_destroy(&dh->cv);
		pthread_mutex_destroy(&dh->mu);
	}
	free(dh->work);
	free(dh->slot);
	free(dh->mine);
	free(dh->post);
	free(dh);
}

void dischttp_set_targets(struct disc_http *dh, const char (*addr)[DISC_ADDR_LEN], size_t n)
{
	if (!dh)
		return;
	if (n > DH_MAX_TARGETS)
		n = DH_MAX_TARGETS;
	pthread_mutex_lock(&dh->mu);
	if (!dh->post)
		dh->post = calloc(DH_MAX_TARGETS, sizeof(*dh->post));
	if (dh->post) {
		memcpy(dh->post, addr, n * sizeof(*addr));
		dh->npost = n;
		dh->posted = true;
		pthread_cond_signal(&dh->cv); /* ask the new set now, not an interval later */
	}
	pthread_mutex_unlock(&dh->mu);
}

/* ---- loop side ------------------------------------------------------------------------------ */

static bool is_http(const struct ing_pod *p)
{
	return p->spec.http_found;
}

static size_t count_http(const struct ing_shared *sh)
{
	return ing_pods_count(sh, is_http);
}

/* Logs each target whose status changed (and a pod's note, once per change). */
static void log_changes(struct disc_http *dh, const struct dh_set *set)
{
	for (size_t i = 0; i < set->nt; i++) {
		if (set->st[i] == dh->logged[i] && !strcmp(set->who[i], dh->logged_who[i]))
			continue;
		dh->logged[i] = set->st[i];
		snprintf(dh->logged_who[i], sizeof(dh->logged_who[i]), "%s", set->who[i]);
		if (set->st[i] == DH_FAILED)
			ilog(ILOG_WARN, "HTTP discovery %s: %s (a pod is dropped after %d failures in "
			     "a row)", set->who[i], set->msg[i], DH_FAIL_LIMIT);
		else if (set->st[i] == DH_NONE)
			ilog(ILOG_INFO, "HTTP discovery %s: no KV-event publisher reported",
			     set->who[i]);
		else if (set->msg[i][0])
			ilog(ILOG_WARN, "HTTP discovery %s: %s", set->who[i], set->msg[i]);
	}
}

void dischttp_poll(struct disc_http *dh, struct ing_shared *sh, uint64_t now)
{
	size_t added = 0, removed = 0;

	if (!dh || pthread_mutex_trylock(&dh->mu) != 0)
		return;
	bool got = dh->fresh;
	if (got) {
		struct dh_set *t = dh->mine;
		dh->mine = dh->slot;
		dh->slot = t;
		dh->fresh = false;
	}
	pthread_mutex_unlock(&dh->mu);
	if (!got)
		return;
	log_changes(dh, dh->mine);
	if (ing_pods_in_step(sh, dh->mine->spec, dh->mine->n, is_http))
		return;
	ing_pods_reconcile(sh, dh->mine->spec, dh->mine->n, is_http, "HTTP discovery", &dh->lim,
			   &added, &removed, now);
	atomic_fetch_add(&dh->added, added);
	atomic_fetch_add(&dh->removed, removed);
	atomic_store(&dh->pods, count_http(sh));
	ilog(ILOG_INFO, "HTTP discovery: %zu pods reported; %zu added, %zu removed, %zu now",
	     dh->mine->n, added, removed, count_http(sh));
}

void dischttp_render(FILE *f, struct disc_http *dh)
{
	if (!dh)
		return;
	discover_metric(f, "kvidx_discovery_http_polls_total", "counter",
	       "Polls of --discover-http addresses, failed ones included.", atomic_load(&dh->polls));
	discover_metric(f, "kvidx_discovery_http_failures_total", "counter",
	       "Polls that got no usable answer (no connection, HTTP error, bad body).",
	       atomic_load(&dh->failures));
	discover_metric(f, "kvidx_discovery_http_pods_added_total", "counter",
	       "Pods subscribed because HTTP discovery reported them.", atomic_load(&dh->added));
	discover_metric(f, "kvidx_discovery_http_pods_removed_total", "counter",
	       "Pods dropped because their address stopped reporting a publisher or answering.",
	       atomic_load(&dh->removed));
	discover_metric(f, "kvidx_discovery_http_pods", "gauge", "Pods subscribed now through HTTP discovery.",
	       atomic_load(&dh->pods));
}
