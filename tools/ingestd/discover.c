/*
 * discover.c — kvidx-ingestd's pod discovery: the DNS resolver thread and its handoff, the
 * watched config file, and ing_pods_reconcile(), the add/remove path every pod source shares
 * (see discover.h for the contract and the threading).
 */
#include "discover.h"
#include "dischttp.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_PER_MS 1000000ull
#define ANS_MAX 65536 /* a DNS message's largest size (TCP); res_nsearch falls back to TCP */

/* ---- the resolver thread -------------------------------------------------------------------- */

/* Overrides rs's name servers with "IPv4:PORT" (checked by config.c). */
static void use_server(struct __res_state *rs, const char *server)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strchr(server, ':');
	size_t n = (size_t)(colon - server);
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	memcpy(host, server, n);
	host[n] = '\0';
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, host, &sin.sin_addr);
	rs->nscount = 1;
	rs->nsaddr_list[0] = sin;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The A records of answer ans[0..len) into out, sorted and distinct. */
static void parse_answer(const unsigned char *ans, int len, struct disc_set *out)
{
	static _Thread_local uint32_t ip[DISC_MAX_ADDRS];
	ns_msg msg;
	size_t n = 0;

	if (ns_initparse(ans, len, &msg) < 0) {
		snprintf(out->err, sizeof(out->err), "malformed answer (%d bytes)", len);
		return;
	}
	for (int i = 0; i < ns_msg_count(msg, ns_s_an); i++) {
		ns_rr rr;

		if (ns_parserr(&msg, ns_s_an, i, &rr) < 0) {
			snprintf(out->err, sizeof(out->err), "malformed answer record %d", i);
			return;
		}
		if (ns_rr_class(rr) != ns_c_in || ns_rr_type(rr) != ns_t_a || ns_rr_rdlen(rr) != 4)
			continue; /* the CNAMEs leading to the A records, or junk */
		if (n == DISC_MAX_ADDRS) {
			out->truncated = true;
			break;
		}
		memcpy(&ip[n++], ns_rr_rdata(rr), 4);
	}
	for (size_t i = 0; i < n; i++)
		ip[i] = ntohl(ip[i]);
	qsort(ip, n, sizeof(ip[0]), cmp_u32);
	out->n = 0;
	for (size_t i = 0; i < n; i++) {
		struct in_addr a = { .s_addr = htonl(ip[i]) };

		if (i && ip[i] == ip[i - 1])
			continue;
		inet_ntop(AF_INET, &a, out->addr[out->n++], DISC_ADDR_LEN);
	}
	out->ok = true;
}

/* One resolution of dc->dns into out. Blocks: up to retrans x retry seconds per server. */
static void resolve(const struct ing_discover_config *dc, unsigned char *ans,
		    struct disc_set *out)
{
	struct __res_state rs;
	int len;

	out->ok = false;
	out->truncated = false;
	out->n = 0;
	out->err[0] = '\0';
	memset(&rs, 0, sizeof(rs));
	if (res_ninit(&rs) != 0) {
		snprintf(out->err, sizeof(out->err), "res_ninit failed (no usable resolv.conf?)");
		return;
	}
	if (dc->server[0])
		use_server(&rs, dc->server);
	rs.retrans = 1; /* seconds per try: the next round comes soon anyway */
	rs.retry = 2;
	len = res_nsearch(&rs, dc->dns, ns_c_in, ns_t_a, ans, ANS_MAX);
	if (len < 0) {
		/* No such name, or no A record: an answer, and it says "no pods". */
		if (rs.res_h_errno == HOST_NOT_FOUND || rs.res_h_errno == NO_DATA)
			out->ok = true;
		else
			snprintf(out->err, sizeof(out->err), "%s", hstrerror(rs.res_h_errno));
	} else {
		parse_answer(ans, len > ANS_MAX ? ANS_MAX : len, out);
	}
	res_nclose(&rs);
}

void disc_sleep(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *stop, uint32_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)ms * NS_PER_MS;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	while (!*stop && pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT)
		;
}

static void *resolver_main(void *arg)
{
	struct ing_discover *ds = arg;
	unsigned char *ans = malloc(ANS_MAX);

	pthread_mutex_lock(&ds->mu);
	while (!ds->stop) {
		pthread_mutex_unlock(&ds->mu);
		if (ans) {
			resolve(&ds->cfg->disc, ans, ds->work);
		} else {
			ds->work->ok = false;
			snprintf(ds->work->err, sizeof(ds->work->err), "out of memory");
		}
		atomic_fetch_add(&ds->resolutions, 1);
		if (!ds->work->ok)
			atomic_fetch_add(&ds->failures, 1);
		pthread_mutex_lock(&ds->mu);
		struct disc_set *t = ds->slot; /* the newest answer replaces one not taken yet */
		ds->slot = ds->work;
		ds->work = t;
		ds->fresh = true;
		disc_sleep(&ds->cv, &ds->mu, &ds->stop, ds->cfg->disc.interval_ms);
	}
	pthread_mutex_unlock(&ds->mu);
	free(ans);
	return NULL;
}

/* ---- open / close --------------------------------------------------------------------------- */

static int dns_start(struct ing_discover *ds)
{
	pthread_condattr_t ca;
	int rc;

	ds->work = calloc(1, sizeof(*ds->work));
	ds->slot = calloc(1, sizeof(*ds->slot));
	ds->mine = calloc(1, sizeof(*ds->mine));
	if (!ds->work || !ds->slot || !ds->mine)
		return -ENOMEM;
	pthread_mutex_init(&ds->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ds->cv, &ca);
	pthread_condattr_destroy(&ca);
	ds->dns_on = true;
	ds->last_ok = true;
	/* The thread starts with every signal blocked, so SIGHUP and SIGTERM reach the loop's. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&ds->thr, NULL, resolver_main, ds);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	ds->thr_ok = true;
	return 0;
}

int discover_open(struct ing_discover *ds, const struct ing_config *cfg)
{
	const struct ing_discover_config *dc = &cfg->disc;
	int rc;

	memset(ds, 0, sizeof(*ds));
	ds->cfg = cfg;
	if (dc->watch_ms) {
		ds->st_ok = stat(cfg->config_path, &ds->st) == 0;
		ilog(ILOG_INFO, "config watch: %s checked every %ums", cfg->config_path, dc->watch_ms);
	}
	if ((dc->http[0] || dc->http_port) && !(ds->http = dischttp_open(cfg)))
		return -ENOMEM;
	if (!dc->dns[0])
		return 0;
	rc = dns_start(ds);
	if (rc < 0) {
		ilog(ILOG_ERROR, "DNS discovery: cannot start the resolver thread: %s",
		     strerror(-rc));
		discover_close(ds);
		return rc;
	}
	ilog(ILOG_INFO, "DNS discovery: %s every %ums via %s; pods tcp://IP:%u, replay %s%.0u, "
	     "named IP:%u", dc->dns, dc->interval_ms, dc->server[0] ? dc->server : "resolv.conf",
	     dc->port_events, dc->port_replay ? "tcp://IP:" : "none", dc->port_replay,
	     dc->port_http);
	return 0;
}

void discover_close(struct ing_discover *ds)
{
	dischttp_close(ds->http);
	ds->http = NULL;
	if (ds->thr_ok) {
		pthread_mutex_lock(&ds->mu);
		ds->stop = true;
		pthread_cond_signal(&ds->cv);
		pthread_mutex_unlock(&ds->mu);
		pthread_join(ds->thr, NULL);
		ds->thr_ok = false;
	}
	if (ds->dns_on) {
		pthread_cond_destroy(&ds->cv);
		pthread_mutex_destroy(&ds->mu);
		ds->dns_on = false;
	}
	free(ds->work);
	free(ds->slot);
	free(ds->mine);
	ds->work = ds->slot = ds->mine = NULL;
}

/* ---- the one add/remove path ---------------------------------------------------------------- */

void ing_pods_reconcile(struct ing_shared *sh, const struct ing_pod_spec *want, size_t n,
			bool (*mine)(const struct ing_pod *p), const char *why,
			struct ilog_limit *lim, size_t *added, size_t *removed, uint64_t now)
{
	/* Removed: our pods whose spec is no longer wanted (every rank of a pod goes). */
	for (size_t i = sh->npods; i-- > 0;) {
		struct ing_pod *p = sh->pods[i];
		bool keep = false;

		if (p->bind_mode || !mine(p))
			continue;
		for (size_t j = 0; j < n && !keep; j++)
			keep = ing_pod_spec_equal(&p->spec, &want[j]);
		if (!keep) {
			ilog(ILOG_INFO, "%s: unsubscribing %s (pod %s): its entries are dropped", why,
			     p->ep, p->g->name[0] ? p->g->name : "not named yet");
			if (p->st.rank == 0)
				(*removed)++; /* a pod, not each of its ranks' streams */
			ing_pod_close(sh, p, true);
		}
	}
	/* Added: wanted specs not subscribed yet. */
	for (size_t j = 0; j < n; j++) {
		bool have = false, clash = false;

		for (size_t i = 0; i < sh->npods; i++) {
			struct ing_pod *p = sh->pods[i];
			if (p->bind_mode)
				continue;
			if (ing_pod_spec_equal(&p->spec, &want[j]))
				have = true;
			else if (!strcmp(p->spec.endpoint, want[j].endpoint))
				clash = true;
		}
		if (have)
			continue;
		if (clash) {
			ilog_limited(lim, ILOG_WARN, "%s: %s is already subscribed by another source "
				     "(command line, config file or DNS); ignored", why,
				     want[j].endpoint);
			continue;
		}
		ilog(ILOG_INFO, "%s: subscribing %s%s%s", why, want[j].endpoint,
		     want[j].name[0] ? " as pod " : "", want[j].name);
		if (ing_pod_open(sh, &want[j], now))
			(*added)++;
	}
}

/* ---- DNS, loop side ------------------------------------------------------------------------- */

static bool is_discovered(const struct ing_pod *p)
{
	return p->spec.discovered;
}

size_t ing_pods_count(const struct ing_shared *sh, bool (*mine)(const struct ing_pod *p))
{
	size_t n = 0;

	for (size_t i = 0; i < sh->npods; i++)
		n += mine(sh->pods[i]) && sh->pods[i]->st.rank == 0;
	return n;
}

bool ing_pods_in_step(const struct ing_shared *sh, const struct ing_pod_spec *want, size_t n,
		      bool (*mine)(const struct ing_pod *p))
{
	bool same = ing_pods_count(sh, mine) == n;

	for (size_t i = 0; i < sh->npods && same; i++) {
		const struct ing_pod *p = sh->pods[i];
		if (!mine(p) || p->st.rank != 0)
			continue;
		same = false;
		for (size_t j = 0; j < n && !same; j++)
			same = ing_pod_spec_equal(&p->spec, &want[j]);
	}
	return same;
}

/* Discovered pods (their rank-0 streams: one per address). */
static size_t count_discovered(const struct ing_shared *sh)
{
	return ing_pods_count(sh, is_discovered);
}

/* The pod spec of one discovered address. */
static void spec_of(const struct ing_discover_config *dc, const char *ip, struct ing_pod_spec *s)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->endpoint, sizeof(s->endpoint), "tcp://%s:%u", ip, dc->port_events);
	if (dc->port_replay)
		snprintf(s->replay, sizeof(s->replay), "tcp://%s:%u", ip, dc->port_replay);
	snprintf(s->name, sizeof(s->name), "%s:%u", ip, dc->port_http);
	memcpy(s->model, dc->model, sizeof(s->model));
	memcpy(s->topic, dc->topic, sizeof(s->topic));
	s->topic_set = dc->topic_set;
	s->dp_ranks = dc->dp_ranks;
	s->discovered = true;
}

static void dns_apply(struct ing_discover *ds, struct ing_shared *sh, uint64_t now)
{
	const struct ing_discover_config *dc = &ds->cfg->disc;
	const struct disc_set *set = ds->mine;
	char why[300];
	size_t added = 0, removed = 0;

	snprintf(why, sizeof(why), "DNS %s", dc->dns);
	if (!set->ok) {
		/* Pods stay as they are: a resolver outage is not a fleet outage. */
		ilog(ds->last_ok ? ILOG_WARN : ILOG_DEBUG, "%s: resolution failed (%s); pods unchanged",
		     why, set->err);
		ds->last_ok = false;
		return;
	}
	if (!ds->last_ok)
		ilog(ILOG_INFO, "%s: resolving again", why);
	ds->last_ok = true;
	if (set->truncated)
		ilog_limited(&ds->lim, ILOG_WARN, "%s: more than %d addresses, the first %d taken",
			     why, DISC_MAX_ADDRS, DISC_MAX_ADDRS);
	if (dc->http_port) { /* each address is asked over HTTP (dischttp.c) */
		dischttp_set_targets(ds->http, (const char(*)[DISC_ADDR_LEN])set->addr, set->n);
		return;
	}
	struct ing_pod_spec *want = set->n ? calloc(set->n, sizeof(*want)) : NULL;
	if (set->n && !want) {
		ilog(ILOG_ERROR, "%s: out of memory; pods unchanged", why);
		return;
	}
	for (size_t j = 0; j < set->n; j++)
		spec_of(dc, set->addr[j], &want[j]);
	/* Already in step (the usual case, every interval): nothing to change or log. */
	if (ing_pods_in_step(sh, want, set->n, is_discovered)) {
		free(want);
		return;
	}
	ing_pods_reconcile(sh, want, set->n, is_discovered, why, &ds->lim, &added, &removed, now);
	free(want);
	atomic_fetch_add(&ds->added, added);
	atomic_fetch_add(&ds->removed, removed);
	atomic_store(&ds->pods, count_discovered(sh));
	ilog(ILOG_INFO, "%s: %zu in the answer; %zu pods added, %zu removed, %zu discovered now", why,
	     set->n, added, removed, count_discovered(sh));
}

/* The watched file: true when it changed since the last look. */
static bool watch_changed(struct ing_discover *ds, uint64_t now)
{
	const char *path = ds->cfg->config_path;
	struct stat st;

	if (!ds->cfg->disc.watch_ms || now < ds->next_watch_ns)
		return false;
	ds->next_watch_ns = now + ds->cfg->disc.watch_ms * NS_PER_MS;
	if (stat(path, &st) != 0) {
		if (ds->st_ok)
			ilog(ILOG_WARN, "config watch: %s: %s; pods unchanged until it is back", path,
			     strerror(errno));
		ds->st_ok = false;
		return false;
	}
	bool changed = !ds->st_ok || st.st_ino != ds->st.st_ino || st.st_dev != ds->st.st_dev ||
		       st.st_size != ds->st.st_size ||
		       st.st_mtim.tv_sec != ds->st.st_mtim.tv_sec ||
		       st.st_mtim.tv_nsec != ds->st.st_mtim.tv_nsec ||
		       st.st_ctim.tv_sec != ds->st.st_ctim.tv_sec ||
		       st.st_ctim.tv_nsec != ds->st.st_ctim.tv_nsec;
	ds->st = st;
	ds->st_ok = true;
	if (changed)
		ilog(ILOG_INFO, "config watch: %s changed: reloading its pods", path);
	return changed;
}

bool discover_poll(struct ing_discover *ds, struct ing_shared *sh, uint64_t now)
{
	dischttp_poll(ds->http, sh, now);
	if (ds->dns_on && pthread_mutex_trylock(&ds->mu) == 0) {
		bool got = ds->fresh;
		if (got) {
			struct disc_set *t = ds->mine;
			ds->mine = ds->slot;
			ds->slot = t;
			ds->fresh = false;
		}
		pthread_mutex_unlock(&ds->mu);
		if (got)
			dns_apply(ds, sh, now);
	}
	return watch_changed(ds, now);
}

void discover_count_reload(struct ing_discover *ds)
{
	atomic_fetch_add(&ds->watch_reloads, 1);
}

/* ---- metrics -------------------------------------------------------------------------------- */

void discover_metric(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
		(unsigned long long)v);
}

void discover_render(FILE *f, void *arg)
{
	struct ing_discover *ds = arg;

	if (ds->cfg->disc.dns[0]) {
		discover_metric(f, "kvidx_discovery_resolutions_total", "counter",
		       "DNS resolutions of --discover-dns done, failed ones included.",
		       atomic_load(&ds->resolutions));
		discover_metric(f, "kvidx_discovery_resolution_failures_total", "counter",
		       "DNS resolutions that failed (timeout, SERVFAIL, malformed); pods unchanged.",
		       atomic_load(&ds->failures));
		discover_metric(f, "kvidx_discovery_pods_added_total", "counter",
		       "Pods subscribed because DNS discovery found them.", atomic_load(&ds->added));
		discover_metric(f, "kvidx_discovery_pods_removed_total", "counter",
		       "Pods unsubscribed and dropped because their address left the DNS answer.",
		       atomic_load(&ds->removed));
		discover_metric(f, "kvidx_discovery_pods", "gauge",
		       "Pods subscribed now through DNS discovery.", atomic_load(&ds->pods));
	}
	dischttp_render(f, ds->http);
	if (ds->cfg->disc.watch_ms)
		discover_metric(f, "kvidx_config_watch_reloads_total", "counter",
		       "Pod-list reloads because --config-watch saw the config file change.",
		       atomic_load(&ds->watch_reloads));
}
