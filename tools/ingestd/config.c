/*
 * config.c — kvidx-ingestd's configuration: one table of options shared by the command line
 * and the config file, value parsing, pod specs, and the --help text (see config.h).
 */
#include "config.h"

#include "layout.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "kvidx_writer.h"
#include "listen.h"
#include "parse.h"
#include "ttl.h"

enum opt_kind {
	OPT_STR,   /* copied into a buffer */
	OPT_U64,   /* integer, optional k/m/g suffix (x1024) */
	OPT_U32,
	OPT_MS,    /* a flag named *-ms: a whole number of milliseconds, no suffix */
	OPT_BOOL,  /* no argument on the command line */
	OPT_DURATION, /* "250ms", "2s": milliseconds */
	OPT_FRACTION, /* "0.99", "99%", "p99": (0, 1] */
	OPT_SPECIAL,
};

enum opt_id {
	O_NAME, O_CAPACITY, O_RECORDS, O_PPK, O_MAX_PODS, O_MAX_READERS, O_ALGO, O_SEED,
	O_BLOCK_SIZE, O_GROUP, O_STALL_MS, O_ENGINE_MAP, O_REPLAY_TIMEOUT, O_REPLAY_ON_START,
	O_POD, O_BIND, O_CONFIG, O_LOG_LEVEL, O_HELP,
	O_TTL_POLICY, O_TTL, O_TTL_PERCENTILE, O_TTL_BACKLOG, O_TTL_SLACK, O_TTL_FLOOR, O_TTL_CAP,
	O_TTL_MIN_SAMPLES, O_TTL_INTERVAL, O_TTL_MAX_STEP, O_LATE_WINDOW, O_STALE_LIMIT,
	O_CORR_MAP, O_LOAD_TIMEOUT, O_LATE_MAP, O_REAP_INTERVAL, O_REAP_PASS, O_METRICS,
	O_TOPIC_FILTER, O_REMOTE_TIER, O_CLUSTER, O_DISC_DNS, O_DISC_PORTS, O_DISC_INTERVAL,
	O_DISC_SERVER, O_DISC_ATTRS, O_CONFIG_WATCH, O_READY_STREAMS,
};

struct opt {
	enum opt_id id;
	const char *name;
	enum opt_kind kind;
};

static const struct opt opts[] = {
	{ O_NAME, "name", OPT_STR },
	{ O_CAPACITY, "capacity", OPT_U64 },
	{ O_RECORDS, "records", OPT_U64 },
	{ O_PPK, "pods-per-key", OPT_U32 },
	{ O_MAX_PODS, "max-pods", OPT_U32 },
	{ O_MAX_READERS, "max-readers", OPT_U32 },
	{ O_ALGO, "algo", OPT_SPECIAL },
	{ O_SEED, "seed", OPT_STR },
	{ O_BLOCK_SIZE, "block-size", OPT_U32 },
	{ O_GROUP, "group", OPT_SPECIAL },
	{ O_STALL_MS, "stall-ms", OPT_MS },
	{ O_ENGINE_MAP, "engine-map", OPT_U64 },
	{ O_REPLAY_TIMEOUT, "replay-timeout-ms", OPT_MS },
	{ O_REPLAY_ON_START, "replay-on-start", OPT_BOOL },
	{ O_POD, "pod", OPT_SPECIAL },
	{ O_BIND, "bind", OPT_STR },
	{ O_CONFIG, "config", OPT_STR },
	{ O_LOG_LEVEL, "log-level", OPT_SPECIAL },
	{ O_HELP, "help", OPT_BOOL },
	{ O_TTL_POLICY, "ttl-policy", OPT_SPECIAL },
	{ O_TTL, "ttl", OPT_DURATION },
	{ O_TTL_PERCENTILE, "ttl-percentile", OPT_FRACTION },
	{ O_TTL_BACKLOG, "ttl-backlog", OPT_SPECIAL },
	{ O_TTL_SLACK, "ttl-slack", OPT_DURATION },
	{ O_TTL_FLOOR, "ttl-floor", OPT_DURATION },
	{ O_TTL_CAP, "ttl-cap", OPT_DURATION },
	{ O_TTL_MIN_SAMPLES, "ttl-min-samples", OPT_U64 },
	{ O_TTL_INTERVAL, "ttl-interval", OPT_DURATION },
	{ O_TTL_MAX_STEP, "ttl-max-step", OPT_FRACTION },
	{ O_LATE_WINDOW, "late-window", OPT_SPECIAL },
	{ O_STALE_LIMIT, "stale-limit", OPT_DURATION },
	{ O_CORR_MAP, "corr-map", OPT_U64 },
	{ O_LOAD_TIMEOUT, "load-timeout", OPT_DURATION },
	{ O_LATE_MAP, "late-map", OPT_U64 },
	{ O_REAP_INTERVAL, "reap-interval", OPT_DURATION },
	{ O_REAP_PASS, "reap-pass", OPT_DURATION },
	{ O_METRICS, "metrics-listen", OPT_STR },
	{ O_METRICS, "metrics", OPT_STR }, /* its first name, kept for existing configs */
	{ O_TOPIC_FILTER, "topic-filter", OPT_STR },
	{ O_REMOTE_TIER, "remote-tier", OPT_SPECIAL },
	{ O_CLUSTER, "cluster", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-name", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-user", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-password", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-creds", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-ca", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-clock-skew", OPT_SPECIAL },
	{ O_CLUSTER, "cluster-queue", OPT_SPECIAL },
	{ O_READY_STREAMS, "ready-streams", OPT_SPECIAL },
	{ O_DISC_DNS, "discover-dns", OPT_STR },
	{ O_DISC_PORTS, "discover-ports", OPT_SPECIAL },
	{ O_DISC_INTERVAL, "discover-interval", OPT_DURATION },
	{ O_DISC_SERVER, "discover-dns-server", OPT_SPECIAL },
	{ O_DISC_ATTRS, "discover-pod-attrs", OPT_SPECIAL },
	{ O_CONFIG_WATCH, "config-watch", OPT_DURATION },
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

void ing_config_init(struct ing_config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->name, KVIDX_DEFAULT_NAME);
	c->algo = KVIDX_KEY_CBOR_FNV;
	c->block_size = 16;
	c->replay_timeout_ms = 2000;
	c->log_level = ILOG_INFO;
	c->spec.policy = ING_TTL_STATIC;
	c->spec.ttl_ms = 2000;
	c->spec.percentile = 0.99;
	c->spec.backlog_ms = 250;
	c->spec.slack_ms = 100;
	c->spec.floor_ms = 200;
	c->spec.cap_ms = 5000;
	c->spec.min_samples = 200;
	c->spec.interval_ms = 10000;
	c->spec.max_step = 0.25;
	c->spec.late_window_ms = 0;
	c->spec.stale_limit_ms = 5000;
	c->spec.corr_map = 65536;
	c->spec.load_timeout_ms = 120000;
	c->spec.late_map = 131072;
	c->spec.reap_interval_ms = 10;
	c->spec.reap_pass_ms = 1000;
	ing_cluster_config_init(&c->cluster);
	c->disc.interval_ms = 5000;
}

void ing_config_free(struct ing_config *c)
{
	free(c->pods);
	c->pods = NULL;
	c->npods = c->pods_cap = 0;
}

static const struct opt *opt_find(const char *name, size_t len)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
			return &opts[i];
	return NULL;
}

static int parse_u64(const char *key, const char *v, uint64_t max, uint64_t *out, char *err,
		     size_t errlen)
{
	char *end;
	unsigned long long x;
	uint64_t mul = 1;

	if (!*v || *v == '-' || isspace((unsigned char)*v))
		return fail(err, errlen, "%s: expected a non-negative integer, got '%s'", key, v);
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v)
		return fail(err, errlen, "%s: expected a non-negative integer, got '%s'", key, v);
	switch (tolower((unsigned char)*end)) {
	case 'k':
		mul = 1ull << 10;
		end++;
		break;
	case 'm':
		mul = 1ull << 20;
		end++;
		break;
	case 'g':
		mul = 1ull << 30;
		end++;
		break;
	}
	if (mul != 1 && *end == 'i')
		end++;
	if (*end)
		return fail(err, errlen, "%s: trailing characters in '%s'", key, v);
	if (x > max / mul)
		return fail(err, errlen, "%s: %s is out of range (at most %llu)", key, v,
			    (unsigned long long)max);
	*out = x * mul;
	return 0;
}

static int parse_bool(const char *key, const char *v, bool *out, char *err, size_t errlen)
{
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "on")) {
		*out = true;
		return 0;
	}
	if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "off")) {
		*out = false;
		return 0;
	}
	return fail(err, errlen, "%s: expected true or false, got '%s'", key, v);
}

#define DURATION_MAX_MS 86400000ull /* a day: anything longer is a typo */

int ing_parse_duration(const char *key, const char *v, uint64_t max_ms, uint32_t *out_ms,
		       char *err, size_t errlen)
{
	double sec;
	int rc = tc_parse_duration(v, &sec); /* the tools' one duration grammar */

	if (rc < 0)
		return fail(err, errlen, "%s: '%s' %s", key, v, tc_duration_error(rc));
	double x = sec * 1000;
	if (x > (double)max_ms)
		return fail(err, errlen, "%s: %s is out of range (at most %llums)", key, v,
			    (unsigned long long)max_ms);
	uint64_t ms = (uint64_t)(x + 0.5);
	if ((double)ms - x > 1e-6 || x - (double)ms > 1e-6)
		return fail(err, errlen, "%s: '%s' is finer than a millisecond", key, v);
	*out_ms = (uint32_t)ms;
	return 0;
}

/* "0.99", "99%", "p99", "p99.9" -> (0, 1]. */
static int parse_fraction(const char *key, const char *v, double *out, char *err,
			  size_t errlen)
{
	const char *p = v;
	bool percent = false;
	char *end;
	double x;

	if (*p == 'p' || *p == 'P') {
		percent = true;
		p++;
	}
	if (!*p || isspace((unsigned char)*p) || *p == '-' || *p == '+')
		return fail(err, errlen, "%s: expected a fraction (0.99), a percentage (99%%) or "
			    "pNN, got '%s'", key, v);
	errno = 0;
	x = strtod(p, &end);
	if (errno || end == p || x != x)
		return fail(err, errlen, "%s: expected a fraction (0.99), a percentage (99%%) or "
			    "pNN, got '%s'", key, v);
	if (*end == '%' && !percent) {
		percent = true;
		end++;
	}
	if (*end)
		return fail(err, errlen, "%s: trailing characters in '%s'", key, v);
	if (percent)
		x /= 100;
	if (!(x > 0 && x <= 1))
		return fail(err, errlen, "%s: %s is out of range (0, 1], i.e. (0%%, 100%%]", key, v);
	*out = x;
	return 0;
}

int ing_metrics_addr_parse(const char *v, char *out, size_t cap, char *err, size_t errlen)
{
	char buf[ING_ENDPOINT_MAX];
	const char *port;

	/* A bare PORT keeps the endpoint on loopback, the default before pod networks. */
	if (*v && strspn(v, "0123456789") == strlen(v)) {
		if (strlen(v) > 5)
			return fail(err, errlen, "metrics-listen: bad port in '%s' (1-65535)", v);
		snprintf(buf, sizeof(buf), "127.0.0.1:%s", v);
	} else if (strlen(v) >= sizeof(buf)) {
		return fail(err, errlen, "metrics-listen: address too long");
	} else {
		snprintf(buf, sizeof(buf), "%s", v);
	}
	if (*buf == ':')
		return fail(err, errlen, "metrics-listen: no address before the port in '%s' (PORT "
			    "alone is loopback; 0.0.0.0:PORT is every address)", v);
	if (tc_listen_check(buf, err, errlen) < 0) {
		char why[256];
		snprintf(why, sizeof(why), "%s", err);
		return fail(err, errlen, "metrics-listen: %s (expected PORT, IPV4:PORT, "
			    "localhost:PORT, 0.0.0.0:PORT or [IPV6]:PORT)", why);
	}
	port = strrchr(buf, ':') + 1;
	if (atoi(port) == 0)
		return fail(err, errlen, "metrics-listen: port 0 in '%s': give the port Prometheus "
			    "scrapes (1-65535)", v);
	if (out) {
		if (strlen(buf) >= cap)
			return fail(err, errlen, "metrics-listen: address too long");
		memcpy(out, buf, strlen(buf) + 1);
	}
	return 0;
}

int ing_metrics_addr_check(const char *v, char *err, size_t errlen)
{
	return ing_metrics_addr_parse(v, NULL, 0, err, errlen);
}

static int copy_str(const char *key, const char *v, char *dst, size_t cap, char *err,
		    size_t errlen)
{
	size_t n = strlen(v);

	if (n >= cap)
		return fail(err, errlen, "%s: value too long (at most %zu bytes)", key, cap - 1);
	memcpy(dst, v, n + 1);
	return 0;
}

static int parse_group(const char *v, gid_t *out, char *err, size_t errlen)
{
	struct group gr, *res = NULL;
	char buf[4096];
	uint64_t g;

	if (isdigit((unsigned char)*v)) {
		if (parse_u64("group", v, (gid_t)-2, &g, err, errlen) < 0)
			return -EINVAL;
		*out = (gid_t)g;
		return 0;
	}
	if (getgrnam_r(v, &gr, buf, sizeof(buf), &res) != 0 || !res)
		return fail(err, errlen, "group: no group named '%s'", v);
	*out = res->gr_gid;
	return 0;
}

/* --discover-ports EVENTS,REPLAY,HTTP: REPLAY 0 means no replay socket; the others 1..65535. */
static int parse_disc_ports(const char *v, struct ing_discover_config *d, char *err,
			    size_t errlen)
{
	uint16_t *out[3] = { &d->port_events, &d->port_replay, &d->port_http };
	const char *p = v;

	for (int i = 0; i < 3; i++) {
		char num[8];
		size_t n = strcspn(p, ",");
		uint64_t u;

		if (n == 0 || n >= sizeof(num))
			goto bad;
		memcpy(num, p, n);
		num[n] = '\0';
		if (!tc_parse_dec(num, 65535, &u) || (u == 0 && i != 1))
			goto bad;
		*out[i] = (uint16_t)u;
		p += n;
		if (i < 2 && *p++ != ',')
			goto bad;
	}
	if (*p)
		goto bad;
	return 0;
bad:
	return fail(err, errlen, "discover-ports: expected EVENTS,REPLAY,HTTP (ports; REPLAY 0 "
		    "for none), got '%s'", v);
}

/* --discover-dns-server IPv4[:PORT] (port default 53), kept as "IPv4:PORT". */
static int parse_disc_server(const char *v, struct ing_discover_config *d, char *err,
			     size_t errlen)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strchr(v, ':');
	size_t n = colon ? (size_t)(colon - v) : strlen(v);
	uint64_t port = 53;
	struct in_addr a;

	if (!*v) {
		d->server[0] = '\0';
		return 0;
	}
	if (n == 0 || n >= sizeof(host))
		goto bad;
	memcpy(host, v, n);
	host[n] = '\0';
	if (inet_pton(AF_INET, host, &a) != 1 ||
	    (colon && (!tc_parse_dec(colon + 1, 65535, &port) || port == 0)))
		goto bad;
	snprintf(d->server, sizeof(d->server), "%s:%u", host, (unsigned)port);
	return 0;
bad:
	return fail(err, errlen, "discover-dns-server: expected IPv4[:PORT], got '%s'", v);
}

static bool endpoint_ok(const char *e);

/* --discover-pod-attrs ATTRS: the --pod attributes model=, topic=, dp-ranks= that every
 * discovered pod takes ("" resets them). */
static int parse_disc_attrs(const char *v, struct ing_discover_config *d, char *err,
			    size_t errlen)
{
	char buf[3 * ING_ENDPOINT_MAX];
	struct ing_pod_spec s;
	int rc;

	if (strlen(v) >= sizeof(buf) - 32)
		return fail(err, errlen, "discover-pod-attrs: too long");
	snprintf(buf, sizeof(buf), "tcp://discovered:0%s%s", *v ? "," : "", v);
	rc = ing_pod_spec_parse(buf, &s, err, errlen);
	if (rc < 0)
		return rc;
	if (s.replay[0] || s.name[0])
		return fail(err, errlen, "discover-pod-attrs: replay= and name= come from "
			    "--discover-ports; give model=, topic= or dp-ranks= only");
	memcpy(d->model, s.model, sizeof(d->model));
	memcpy(d->topic, s.topic, sizeof(d->topic));
	d->topic_set = s.topic_set;
	d->dp_ranks = s.dp_ranks;
	return 0;
}

static bool endpoint_ok(const char *e)
{
	const char *p = strstr(e, "://");

	return p && p > e && p[3];
}

int ing_pod_spec_parse(const char *s, struct ing_pod_spec *out, char *err, size_t errlen)
{
	char buf[4 * ING_ENDPOINT_MAX];
	char *save = NULL, *tok;
	bool first = true;

	memset(out, 0, sizeof(*out));
	if (strlen(s) >= sizeof(buf))
		return fail(err, errlen, "pod: spec too long");
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), first = false) {
		while (isspace((unsigned char)*tok))
			tok++;
		size_t n = strlen(tok);
		while (n && isspace((unsigned char)tok[n - 1]))
			tok[--n] = '\0';
		if (first) {
			if (!endpoint_ok(tok))
				return fail(err, errlen,
					    "pod: '%s' is not a ZeroMQ endpoint (e.g. tcp://10.0.0.1:5557)",
					    tok);
			if (copy_str("pod endpoint", tok, out->endpoint, sizeof(out->endpoint), err,
				     errlen) < 0)
				return -EINVAL;
			continue;
		}
		char *eq = strchr(tok, '=');
		if (!eq)
			return fail(err, errlen, "pod: expected key=value, got '%s'", tok);
		*eq = '\0';
		const char *k = tok, *v = eq + 1;
		int rc;
		if (!strcmp(k, "replay")) {
			if (!endpoint_ok(v))
				return fail(err, errlen, "pod: replay '%s' is not a ZeroMQ endpoint", v);
			rc = copy_str("pod replay", v, out->replay, sizeof(out->replay), err, errlen);
		} else if (!strcmp(k, "name")) {
			if (!*v)
				return fail(err, errlen, "pod: empty name");
			rc = copy_str("pod name", v, out->name, sizeof(out->name), err, errlen);
		} else if (!strcmp(k, "model")) {
			rc = copy_str("pod model", v, out->model, sizeof(out->model), err, errlen);
		} else if (!strcmp(k, "topic")) {
			rc = copy_str("pod topic", v, out->topic, sizeof(out->topic), err, errlen);
			out->topic_set = true;
		} else if (!strcmp(k, "dp-ranks")) {
			uint64_t nr;
			if (parse_u64("pod dp-ranks", v, KV_POD_RANKS, &nr, err, errlen) < 0)
				return -EINVAL;
			if (nr == 0)
				return fail(err, errlen, "pod: dp-ranks must be 1..%d", KV_POD_RANKS);
			out->dp_ranks = (unsigned)nr;
			rc = 0;
		} else {
			return fail(err, errlen, "pod: unknown attribute '%s' (replay, name, model, "
				    "topic, dp-ranks)", k);
		}
		if (rc < 0)
			return rc;
	}
	if (first)
		return fail(err, errlen, "pod: empty spec");
	if (out->dp_ranks > 1) {
		/* Rank r is at port + r: the endpoints need a numeric port with room. */
		const char *eps[2] = { out->endpoint, out->replay };
		for (int i = 0; i < 2; i++) {
			const char *c = eps[i][0] ? strrchr(eps[i], ':') : NULL;
			char *end;
			unsigned long port;
			if (!eps[i][0])
				continue;
			port = c ? strtoul(c + 1, &end, 10) : 0;
			if (!c || !c[1] || *end || port + out->dp_ranks - 1 > 65535)
				return fail(err, errlen, "pod: dp-ranks=%u needs '%s' to end in a port "
					    "with room for %u more", out->dp_ranks, eps[i],
					    out->dp_ranks - 1);
		}
	}
	return 0;
}

bool ing_pod_spec_equal(const struct ing_pod_spec *a, const struct ing_pod_spec *b)
{
	return !strcmp(a->endpoint, b->endpoint) && !strcmp(a->replay, b->replay) &&
	       !strcmp(a->name, b->name) && !strcmp(a->model, b->model) &&
	       a->topic_set == b->topic_set && !strcmp(a->topic, b->topic) &&
	       (a->dp_ranks ? a->dp_ranks : 1) == (b->dp_ranks ? b->dp_ranks : 1);
}

static int add_pod(struct ing_config *c, const char *v, bool from_file, char *err, size_t errlen)
{
	struct ing_pod_spec spec;
	int rc = ing_pod_spec_parse(v, &spec, err, errlen);

	if (rc < 0)
		return rc;
	spec.from_file = from_file;
	if (c->npods == c->pods_cap) {
		size_t ncap = c->pods_cap ? 2 * c->pods_cap : 8;
		struct ing_pod_spec *np = realloc(c->pods, ncap * sizeof(*np));
		if (!np)
			return fail(err, errlen, "out of memory");
		c->pods = np;
		c->pods_cap = ncap;
	}
	c->pods[c->npods++] = spec;
	return 0;
}

/* Ranges of the numeric options that size the index: a value outside is refused with the
 * option's name and the range (0 included: the defaults are what leaving an option out
 * gives). Limits that depend on two options are checked by ing_config_check(). */
static const struct {
	enum opt_id id;
	uint64_t min, max;
} num_limits[] = {
	{ O_CAPACITY, 1, KVIDX_MAX_CAPACITY },     { O_RECORDS, 1, UINT32_MAX },
	{ O_PPK, 1, KVIDX_MAX_PODS_PER_KEY },      { O_MAX_PODS, 1, KVIDX_MAX_PODS },
	{ O_MAX_READERS, 1, KVIDX_MAX_READERS },   { O_BLOCK_SIZE, 1, KVIDX_MAX_BLOCK_SIZE },
	{ O_STALL_MS, 1, KVIDX_MAX_STALL_MS },     { O_ENGINE_MAP, 1, 1ull << 32 },
};

static int check_num_limit(const struct opt *o, const char *value, uint64_t u, char *err,
			   size_t errlen)
{
	for (size_t i = 0; i < sizeof(num_limits) / sizeof(num_limits[0]); i++)
		if (num_limits[i].id == o->id && (u < num_limits[i].min || u > num_limits[i].max))
			return fail(err, errlen, "%s: %s is out of range (%llu..%llu)", o->name,
				    value, (unsigned long long)num_limits[i].min,
				    (unsigned long long)num_limits[i].max);
	return 0;
}

int ing_config_set(struct ing_config *c, const char *key, const char *value, bool from_file,
		   char *err, size_t errlen)
{
	const struct opt *o = opt_find(key, strlen(key));
	uint64_t u;
	int rc = 0;

	if (!o)
		return fail(err, errlen, "unknown option '%s' (see --help)", key);
	if (!value)
		return fail(err, errlen, "%s: missing value", key);
	switch (o->kind) {
	case OPT_U64:
	case OPT_U32:
		rc = parse_u64(key, value, o->kind == OPT_U32 ? UINT32_MAX : UINT64_MAX, &u, err,
			       errlen);
		if (rc < 0 || (rc = check_num_limit(o, value, u, err, errlen)) < 0)
			return rc;
		break;
	case OPT_MS:
		/* The name carries the unit, so no suffix: "1m" is neither a minute nor 1Mi ms. */
		if (!tc_parse_dec(value, UINT32_MAX, &u))
			return fail(err, errlen, "%s: expected a whole number of milliseconds, got '%s'",
				    key, value);
		if ((rc = check_num_limit(o, value, u, err, errlen)) < 0)
			return rc;
		break;
	default:
		u = 0;
	}
	uint32_t ms = 0;
	double frac = 0;
	if (o->kind == OPT_DURATION &&
	    (rc = ing_parse_duration(key, value, DURATION_MAX_MS, &ms, err, errlen)) < 0)
		return rc;
	if (o->kind == OPT_FRACTION && (rc = parse_fraction(key, value, &frac, err, errlen)) < 0)
		return rc;
	switch (o->id) {
	case O_NAME:
		if (!*value)
			return fail(err, errlen, "name: empty");
		return copy_str(key, value, c->name, sizeof(c->name), err, errlen);
	case O_CAPACITY:
		c->geo.capacity = u;
		return 0;
	case O_RECORDS:
		c->geo.records = u;
		return 0;
	case O_PPK:
		c->geo.pods_per_key = (uint32_t)u;
		return 0;
	case O_MAX_PODS:
		c->geo.max_pods = (uint32_t)u;
		return 0;
	case O_MAX_READERS:
		c->geo.max_readers = (uint32_t)u;
		return 0;
	case O_ALGO:
		if (kvidx_key_algo_parse(value, &c->algo) < 0)
			return fail(err, errlen, "algo: expected cbor-fnv or xxh64, got '%s'", value);
		return 0;
	case O_SEED:
		return copy_str(key, value, c->seed, sizeof(c->seed), err, errlen);
	case O_BLOCK_SIZE:
		if (u == 0)
			return fail(err, errlen, "block-size: must be > 0");
		c->block_size = (uint32_t)u;
		return 0;
	case O_GROUP:
		return parse_group(value, &c->group, err, errlen);
	case O_STALL_MS:
		c->stall_ms = (uint32_t)u;
		return 0;
	case O_ENGINE_MAP:
		c->engine_map = u;
		return 0;
	case O_REPLAY_TIMEOUT:
		if (u == 0)
			return fail(err, errlen, "replay-timeout-ms: must be > 0");
		c->replay_timeout_ms = (uint32_t)u;
		return 0;
	case O_REPLAY_ON_START:
		return parse_bool(key, value, &c->replay_on_start, err, errlen);
	case O_POD:
		return add_pod(c, value, from_file, err, errlen);
	case O_BIND:
		if (*value && !endpoint_ok(value))
			return fail(err, errlen, "bind: '%s' is not a ZeroMQ endpoint", value);
		return copy_str(key, value, c->bind, sizeof(c->bind), err, errlen);
	case O_CONFIG:
		if (from_file)
			return fail(err, errlen, "config: not allowed inside a config file");
		return copy_str(key, value, c->config_path, sizeof(c->config_path), err, errlen);
	case O_LOG_LEVEL:
		if (ilog_level_parse(value, &c->log_level) < 0)
			return fail(err, errlen,
				    "log-level: expected error, warn, info or debug, got '%s'", value);
		return 0;
	case O_HELP:
		if (from_file)
			return fail(err, errlen, "help: not allowed inside a config file");
		return parse_bool(key, value, &c->help, err, errlen);
	case O_TTL_POLICY:
		if (!strcmp(value, "static"))
			c->spec.policy = ING_TTL_STATIC;
		else if (!strcmp(value, "adaptive"))
			c->spec.policy = ING_TTL_ADAPTIVE;
		else
			return fail(err, errlen, "ttl-policy: expected static or adaptive, got '%s'",
				    value);
		return 0;
	case O_TTL:
		if (!ms)
			return fail(err, errlen, "ttl: must be > 0");
		c->spec.ttl_ms = ms;
		return 0;
	case O_TTL_PERCENTILE:
		c->spec.percentile = frac;
		return 0;
	case O_TTL_BACKLOG:
		if (!strcmp(value, "measured")) {
			c->spec.backlog_measured = true;
			return 0;
		}
		rc = ing_parse_duration(key, value, DURATION_MAX_MS, &ms, err, errlen);
		if (rc < 0)
			return rc;
		c->spec.backlog_measured = false;
		c->spec.backlog_ms = ms;
		return 0;
	case O_TTL_SLACK:
		c->spec.slack_ms = ms;
		return 0;
	case O_TTL_FLOOR:
		if (!ms)
			return fail(err, errlen, "ttl-floor: must be > 0");
		c->spec.floor_ms = ms;
		return 0;
	case O_TTL_CAP:
		if (!ms)
			return fail(err, errlen, "ttl-cap: must be > 0");
		c->spec.cap_ms = ms;
		return 0;
	case O_TTL_MIN_SAMPLES:
		c->spec.min_samples = u;
		return 0;
	case O_TTL_INTERVAL:
		if (!ms)
			return fail(err, errlen, "ttl-interval: must be > 0");
		c->spec.interval_ms = ms;
		return 0;
	case O_TTL_MAX_STEP:
		c->spec.max_step = frac;
		return 0;
	case O_LATE_WINDOW:
		if (!strcmp(value, "auto")) {
			c->spec.late_window_ms = 0;
			return 0;
		}
		rc = ing_parse_duration(key, value, DURATION_MAX_MS, &ms, err, errlen);
		if (rc < 0)
			return rc;
		if (!ms)
			return fail(err, errlen, "late-window: must be > 0 (or auto)");
		c->spec.late_window_ms = ms;
		return 0;
	case O_STALE_LIMIT:
		c->spec.stale_limit_ms = ms; /* 0: never pause for a broken pipeline */
		return 0;
	case O_CORR_MAP:
		if (u == 0 || u > (1ull << 30))
			return fail(err, errlen, "corr-map: must be 1..1Gi");
		c->spec.corr_map = u;
		return 0;
	case O_LOAD_TIMEOUT:
		if (!ms)
			return fail(err, errlen, "load-timeout: must be > 0");
		c->spec.load_timeout_ms = ms;
		return 0;
	case O_LATE_MAP:
		if (u == 0 || u > (1ull << 30))
			return fail(err, errlen, "late-map: must be 1..1Gi");
		c->spec.late_map = u;
		return 0;
	case O_REAP_INTERVAL:
		if (!ms)
			return fail(err, errlen, "reap-interval: must be > 0");
		c->spec.reap_interval_ms = ms;
		return 0;
	case O_REAP_PASS:
		if (!ms)
			return fail(err, errlen, "reap-pass: must be > 0");
		c->spec.reap_pass_ms = ms;
		return 0;
	case O_METRICS:
		if (!*value) { /* empty: no endpoint */
			c->metrics[0] = '\0';
			return 0;
		}
		return ing_metrics_addr_parse(value, c->metrics, sizeof(c->metrics), err, errlen);
	case O_TOPIC_FILTER:
		return copy_str(key, value, c->topic_filter, sizeof(c->topic_filter), err, errlen);
	case O_REMOTE_TIER:
		if (!strcmp(value, "none"))
			c->remote_tier = 0;
		else if (!strcmp(value, "gpu"))
			c->remote_tier = KVIDX_TIER_GPU;
		else if (!strcmp(value, "cpu"))
			c->remote_tier = KVIDX_TIER_CPU;
		else if (!strcmp(value, "disk"))
			c->remote_tier = KVIDX_TIER_DISK;
		else if (!strcmp(value, "other"))
			c->remote_tier = KVIDX_TIER_OTHER;
		else
			return fail(err, errlen,
				    "remote-tier: expected none, gpu, cpu, disk or other, got '%s'",
				    value);
		return 0;
	case O_CLUSTER:
		return ing_cluster_config_set(&c->cluster, key, value, from_file, err, errlen);
	case O_READY_STREAMS:
		if (strcmp(value, "all") && strcmp(value, "any"))
			return fail(err, errlen, "ready-streams: expected all or any, got '%s'", value);
		c->ready_any = !strcmp(value, "any");
		return 0;
	case O_DISC_DNS:
		return copy_str(key, value, c->disc.dns, sizeof(c->disc.dns), err, errlen);
	case O_DISC_PORTS:
		return parse_disc_ports(value, &c->disc, err, errlen);
	case O_DISC_INTERVAL:
		if (ms == 0)
			return fail(err, errlen, "discover-interval: must be > 0");
		c->disc.interval_ms = ms;
		return 0;
	case O_DISC_SERVER:
		return parse_disc_server(value, &c->disc, err, errlen);
	case O_DISC_ATTRS:
		return parse_disc_attrs(value, &c->disc, err, errlen);
	case O_CONFIG_WATCH:
		c->disc.watch_ms = ms;
		return 0;
	}
	return fail(err, errlen, "%s: unhandled option", key);
}

/*
 * Reads one line of a config file into buf (without its newline), refusing what no config
 * file holds, so that a wrong path (/dev/zero, a binary, a pipe that never ends) fails at
 * once instead of being read forever: a line over CONFIG_LINE_MAX bytes, a NUL byte, a file
 * over CONFIG_FILE_MAX bytes (*total counts). Returns 1 (a line), 0 (end of file) or a
 * negative errno with the reason in *why.
 */
#define CONFIG_LINE_MAX 4096
#define CONFIG_FILE_MAX (1 << 20)
static int config_line(FILE *f, char buf[CONFIG_LINE_MAX + 1], size_t *total, const char **why)
{
	size_t n = 0;
	int ch;

	while ((ch = getc(f)) != EOF) {
		if (++*total > CONFIG_FILE_MAX) {
			*why = "file too large (a config file is at most 1 MiB)";
			return -EFBIG;
		}
		if (ch == '\n')
			break;
		if (ch == '\0') {
			*why = "NUL byte (not a text file?)";
			return -EINVAL;
		}
		if (n == CONFIG_LINE_MAX) {
			*why = "line too long (at most 4096 bytes)";
			return -EINVAL;
		}
		buf[n++] = (char)ch;
	}
	buf[n] = '\0';
	if (ch == EOF && ferror(f)) {
		*why = "read error";
		return -EIO;
	}
	return ch == EOF && n == 0 ? 0 : 1;
}

int ing_config_load_file(struct ing_config *c, const char *path, char *err, size_t errlen)
{
	char line[CONFIG_LINE_MAX + 1];
	unsigned lineno = 0;
	size_t total = 0;
	FILE *f = fopen(path, "re");
	int rc = 0, got;
	const char *why = NULL;

	if (!f) {
		rc = -errno;
		if (errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	while ((got = config_line(f, line, &total, &why)) != 0) {
		char msg[512];
		char *p = line, *eq, *k, *v;
		size_t n;

		lineno++;
		if (got < 0) {
			rc = got;
			if (errlen)
				snprintf(err, errlen, "%s:%u: %s", path, lineno, why);
			break;
		}
		/* '#' at the start or after whitespace starts a comment. */
		for (char *q = p; *q; q++) {
			if (*q == '#' && (q == p || isspace((unsigned char)q[-1]))) {
				*q = '\0';
				break;
			}
		}
		while (isspace((unsigned char)*p))
			p++;
		n = strlen(p);
		while (n && isspace((unsigned char)p[n - 1]))
			p[--n] = '\0';
		if (!*p)
			continue;
		eq = strchr(p, '=');
		if (!eq) {
			rc = fail(err, errlen, "%s:%u: expected 'key = value'", path, lineno);
			break;
		}
		*eq = '\0';
		k = p;
		v = eq + 1;
		n = strlen(k);
		while (n && isspace((unsigned char)k[n - 1]))
			k[--n] = '\0';
		while (isspace((unsigned char)*v))
			v++;
		rc = ing_config_set(c, k, v, true, msg, sizeof(msg));
		if (rc < 0) {
			if (errlen)
				snprintf(err, errlen, "%s:%u: %s", path, lineno, msg);
			break;
		}
	}
	fclose(f);
	return rc;
}

int ing_config_parse_args(struct ing_config *c, int argc, char **argv, char *err, size_t errlen)
{
	int rc;

	/* Pass 1: --help wins; --config is loaded before the other flags apply on top. */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			c->help = true;
			return 0;
		}
		if (!strcmp(argv[i], "--"))
			break;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		if (!strncmp(a, "--config=", 9))
			v = a + 9;
		else if (!strcmp(a, "--config") && i + 1 < argc)
			v = argv[++i];
		else
			continue;
		rc = copy_str("config", v, c->config_path, sizeof(c->config_path), err, errlen);
		if (rc < 0)
			return rc;
	}
	if (c->config_path[0]) {
		rc = ing_config_load_file(c, c->config_path, err, errlen);
		if (rc < 0)
			return rc;
	}
	/* Pass 2: every flag, in order. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq;
		const struct opt *o;
		const char *v;

		if (strncmp(a, "--", 2) || !a[2])
			return fail(err, errlen, "unexpected argument '%s' (see --help)", a);
		a += 2;
		eq = strchr(a, '=');
		o = opt_find(a, eq ? (size_t)(eq - a) : strlen(a));
		if (!o)
			return fail(err, errlen, "unknown flag '%s' (see --help)", argv[i]);
		if (o->kind == OPT_BOOL) {
			v = eq ? eq + 1 : "true";
		} else if (eq) {
			v = eq + 1;
		} else {
			if (i + 1 >= argc)
				return fail(err, errlen, "--%s needs a value", o->name);
			v = argv[++i];
		}
		if (o->id == O_CONFIG)
			continue; /* loaded above */
		rc = ing_config_set(c, o->name, v, false, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The option (flag and config-file key) behind a field of struct kvidx_writer_opts. */
static const char *flag_of(const char *field)
{
	static const char *const map[][2] = {
		{ "capacity", "capacity" },       { "records", "records" },
		{ "pods_per_key", "pods-per-key" }, { "max_pods", "max-pods" },
		{ "max_readers", "max-readers" }, { "block_size", "block-size" },
		{ "stall_ms", "stall-ms" },       { "seed", "seed" },
		{ "name", "name" },               { "algo", "algo" },
	};
	for (size_t i = 0; field && i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(map[i][0], field))
			return map[i][1];
	return field ? field : "?";
}

int ing_config_check(const struct ing_config *c, char *err, size_t errlen)
{
	/* The whole geometry, as kvidx_writer_open() will check it before creating anything. */
	struct kvidx_writer_opts wo = { .name = c->name, .geo = c->geo, .algo = c->algo,
					.seed = c->seed, .block_size = c->block_size,
					.stall_ms = c->stall_ms };
	struct kvidx_limit lim;
	if (kvidx_writer_check(&wo, &lim) < 0) {
		if (lim.depends && !strcmp(lim.field, "records") && !c->geo.records)
			return fail(err, errlen, "--capacity %llu needs --records at most %llu (the "
				    "default, 2 x capacity, is %llu)",
				    (unsigned long long)lim.dep_value, (unsigned long long)lim.max,
				    (unsigned long long)lim.value);
		if (lim.depends)
			return fail(err, errlen, "--%s %llu with --%s %llu: at most %llu",
				    flag_of(lim.field), (unsigned long long)lim.value,
				    flag_of(lim.depends), (unsigned long long)lim.dep_value,
				    (unsigned long long)lim.max);
		return fail(err, errlen, "--%s: %s", flag_of(lim.field), lim.reason);
	}
	if (c->spec.floor_ms > c->spec.cap_ms)
		return fail(err, errlen, "ttl-floor (%ums) is above ttl-cap (%ums)",
			    c->spec.floor_ms, c->spec.cap_ms);
	if (!c->npods && !c->bind[0] && !c->disc.dns[0] && !c->disc.watch_ms)
		return fail(err, errlen, "no pods: give --pod (connect mode), --bind (bind mode), "
			    "--discover-dns or --config-watch");
	if (c->disc.dns[0] && !c->disc.port_events)
		return fail(err, errlen, "--discover-dns needs --discover-ports EVENTS,REPLAY,HTTP");
	unsigned dr = c->disc.dp_ranks ? c->disc.dp_ranks : 1;
	if (c->disc.dns[0] && (c->disc.port_events + dr - 1 > 65535 ||
			       (c->disc.port_replay && c->disc.port_replay + dr - 1 > 65535)))
		return fail(err, errlen, "--discover-pod-attrs dp-ranks=%u: --discover-ports leave "
			    "no room for %u more ports", dr, dr - 1);
	if (c->disc.watch_ms && !c->config_path[0])
		return fail(err, errlen, "--config-watch needs --config FILE");
	for (size_t i = 0; i < c->npods; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(c->pods[i].endpoint, c->pods[j].endpoint))
				return fail(err, errlen, "pod %s is listed twice", c->pods[i].endpoint);
			else if (c->pods[i].name[0] && !strcmp(c->pods[i].name, c->pods[j].name))
				return fail(err, errlen, "two pods are named %s", c->pods[i].name);
	return 0;
}

const char *ing_fmt_count(uint64_t v, char *buf, size_t len)
{
	if (v && v % (1ull << 30) == 0)
		snprintf(buf, len, "%lluGi", (unsigned long long)(v >> 30));
	else if (v && v % (1ull << 20) == 0)
		snprintf(buf, len, "%lluMi", (unsigned long long)(v >> 20));
	else if (v && v % (1ull << 10) == 0)
		snprintf(buf, len, "%lluKi", (unsigned long long)(v >> 10));
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

void ing_config_usage(FILE *f)
{
	fputs(
"Usage: kvidx-ingestd [FLAGS]\n"
"\n"
"The one writer of a kvidx index: subscribes to vLLM pods' KV-cache events over ZeroMQ\n"
"(3-frame messages: topic, 8-byte big-endian seq, msgpack batch) and keeps the\n"
"shared-memory index \"request block key -> pods\" true.\n"
"\n"
"Index (fixed when the index is created; a restart publishes a fresh generation):\n"
"  --name NAME            index name, /dev/shm/NAME and NAME.data.G (default kvidx)\n"
"  --capacity N           keys (default 1Mi); N may end in k, m, g (x1024)\n"
"  --records N            pod records in all (default 2 x capacity)\n"
"  --pods-per-key N       pods recorded per key (default 10, at most 64)\n"
"  --max-pods N           pods (default 256, at most 4096)\n"
"  --max-readers N        reader slots (default 64, at most 4096)\n"
"  --algo ALGO            request-key scheme: cbor-fnv (default, llm-d) or xxh64\n"
"  --seed STRING          key seed, as llm-d's hash seed / PYTHONHASHSEED (default \"\")\n"
"  --block-size N         tokens per index block (default 16)\n"
"  --group GROUP          gid or group name: segments 0640/0660 for that group (default\n"
"                         0600, owner only)\n"
"  --stall-ms N           expel a reader stalled this long (default 1000)\n"
"\n"
"Ingest:\n"
"  --pod SPEC             connect mode, repeatable: SPEC is\n"
"                           ENDPOINT[,replay=ENDPOINT][,name=IP:PORT][,model=MODEL]\n"
"                           [,topic=PREFIX][,dp-ranks=N]\n"
"                         ingestd connects a SUB (topic prefix topic=, else --topic-filter)\n"
"                         to the pod's PUB ENDPOINT and, on a sequence gap, asks its replay\n"
"                         ROUTER. The pod is named name=, else by a kv@POD@MODEL topic, else\n"
"                         ENDPOINT's host:port (warned: routers use the serving address);\n"
"                         its model is model=, else the topic's (warned when neither).\n"
"                         dp-ranks=N (1-32): data parallelism, rank r publishes at ENDPOINT's\n"
"                         port + r and replays at the replay port + r, all one pod; each rank\n"
"                         has its own sequence, replay and clears (kvidx-dump --pods)\n"
"  --topic-filter PREFIX  topic prefix of pods without topic= and of --bind (default \"\":\n"
"                         everything, vLLM's default topic included)\n"
"  --remote-tier TIER     blocks with locality REMOTE: none (default, not indexed), or gpu,\n"
"                         cpu, disk, other: indexed on that tier (weighted as that tier)\n"
"  --bind ENDPOINT        bind mode: one SUB bound at ENDPOINT, pods connect in and are\n"
"                         told apart by topic (no replay: a gap clears the pod)\n"
"  --engine-map N         entries of the engine-key -> request-key map, oldest evicted\n"
"                         first (default 4 x capacity)\n"
"  --replay-timeout-ms N  a replay silent this long fails, the pod is cleared (default 2000)\n"
"  --replay-on-start      ask every pod's replay socket from seq 0 at start (to rebuild\n"
"                         after a restart; only the batches the pod still keeps come\n"
"                         back); otherwise the first message sets the sequence\n"
"\n"
"Speculative entries (docs/DESIGN.md, docs/ttl.md). Routers commit each routing decision\n"
"(kvidx_commit); ingestd then predicts the prompt's blocks on the chosen decode pod (and\n"
"prefill pod under P/D) until a BlockStored confirms them or the TTL ends. Readers ignore an\n"
"expired prediction themselves, so the reaper's delay never extends trust.\n"
"Durations take a unit: 250ms, 2s, 1.5s. A TTL above 65535ms (the record format's limit)\n"
"is clamped to 65535ms.\n"
"  --ttl-policy POLICY    static (default): every pod uses --ttl; adaptive: per pod\n"
"                         T = clamp(Lq + J, floor, cap), Lq the --ttl-percentile of the pod's\n"
"                         recent route-to-confirmation latency, J = backlog + slack\n"
"  --ttl DURATION         the static TTL, and the adaptive start (default 2s, llm-d's)\n"
"  --ttl-percentile Q     adaptive Lq: 0.99, 99% or p99 (default 0.99)\n"
"  --ttl-backlog DURATION|measured\n"
"                         adaptive J: subscriber queue growth in bursts (default 250ms);\n"
"                         measured: the --ttl-percentile of the pod's recent event path lag\n"
"                         (batch ts to applied, histogram lag), the duration above while\n"
"                         the pod has fewer than --ttl-min-samples lag samples\n"
"  --ttl-slack DURATION   adaptive J: scheduling jitter, measurement resolution (default\n"
"                         100ms)\n"
"  --ttl-floor DURATION   adaptive: smallest TTL (default 200ms)\n"
"  --ttl-cap DURATION     adaptive: largest TTL, the largest stale window the routing SLO\n"
"                         allows (default 5s)\n"
"  --ttl-min-samples N    adaptive: recent samples a pod needs before its TTL moves; until\n"
"                         then it keeps --ttl (clamped to floor..cap) (default 200)\n"
"  --ttl-interval DURATION\n"
"                         adaptive: re-evaluation period (default 10s)\n"
"  --ttl-max-step Q       adaptive: largest change per interval, a fraction or percentage\n"
"                         of the TTL in force (default 25%): change slowly\n"
"  --late-window DURATION\n"
"                         after the reaper expires a prediction, a BlockStored for it this\n"
"                         long after is a late confirmation and an early expiry (the TTL did\n"
"                         not cover the event path); none is a stale expiry (default auto:\n"
"                         the larger of 10s and 5 x the largest TTL)\n"
"  --stale-limit DURATION\n"
"                         \"routed but silent\": routes were sent to a pod and nothing (no\n"
"                         batch, no heartbeat) came from it for this long since the earliest\n"
"                         of them: routed_silent=1, its speculation paused (spec_paused=2)\n"
"                         until it is heard again. 0 disables (default 5s)\n"
"  --corr-map N           route commits remembered for outcome reports, oldest forgotten\n"
"                         first (default 64Ki)\n"
"  --load-timeout DURATION\n"
"                         the load view (kvidx_pod_load) counts a routed request until its\n"
"                         outcome report, or for this long when none comes (a router that\n"
"                         crashed leaves no load behind it for longer) (default 120s)\n"
"  --late-map N           expired predictions remembered for --late-window, oldest counted\n"
"                         stale early when full (default 128Ki)\n"
"  --reap-interval DURATION\n"
"                         reaper wake-up period (default 10ms)\n"
"  --reap-pass DURATION   time the reaper takes to walk the whole table: it examines\n"
"                         slots x interval / pass slots per wake-up (default 1s)\n"
"\n"
"Discovery (pods found rather than listed; each source optional, all add and remove pods\n"
"the way SIGHUP does, a removed pod's entries dropped at once):\n"
"  --discover-dns NAME    re-resolve NAME's A records (a Kubernetes headless Service; the\n"
"                         search domains of /etc/resolv.conf apply) on a helper thread;\n"
"                         each address is a pod tcp://IP:EVENTS (replay tcp://IP:REPLAY)\n"
"                         named IP:HTTP. An address that leaves the answer is removed; no\n"
"                         address (NXDOMAIN) removes them all; a failed resolution\n"
"                         (timeout, SERVFAIL) changes nothing. Default: off\n"
"  --discover-ports EVENTS,REPLAY,HTTP\n"
"                         ports of every discovered pod: its event PUB, its replay ROUTER\n"
"                         (0: none), its serving port (the name routers use); required\n"
"                         with --discover-dns, e.g. 5557,5558,8000\n"
"  --discover-interval DURATION\n"
"                         time between two resolutions (default 5s)\n"
"  --discover-dns-server IPv4[:PORT]\n"
"                         ask this server (port default 53) instead of resolv.conf's\n"
"  --discover-pod-attrs ATTRS\n"
"                         --pod attributes every discovered pod takes: model=MODEL,\n"
"                         topic=PREFIX, dp-ranks=N (e.g. 'model=org/m,dp-ranks=2')\n"
"  --config-watch DURATION\n"
"                         check the --config file this often (stat: inode, size, mtime, so a\n"
"                         replaced file or a Kubernetes ConfigMap's swapped link is seen) and\n"
"                         reload its pod list on a change, as SIGHUP does. 0: off (default)\n"
"\n"
"Metrics:\n"
"  --metrics-listen ADDR:PORT | PORT\n"
"                         serve HTTP on ADDR:PORT: GET /metrics (per-pod metrics, labels\n"
"                         pod and model only), /healthz (200 while the process runs),\n"
"                         /readyz (200 once the index is published and every connect-mode\n"
"                         stream is connected, else 503 with the reason). PORT alone is\n"
"                         127.0.0.1:PORT. ADDR: an IPv4 address, localhost, 0.0.0.0 or *\n"
"                         (all), [IPV6]. The endpoint has no authentication: bind a pod IP\n"
"                         or 0.0.0.0 only where the network is yours. Default: off.\n"
"                         --metrics is the same flag under its older name.\n"
"                         With discovery also kvidx_discovery_resolutions_total,\n"
"                         _resolution_failures_total, _pods_added_total, _pods_removed_total,\n"
"                         kvidx_discovery_pods and kvidx_config_watch_reloads_total\n"
"  --ready-streams all|any\n"
"                         /readyz needs every connect-mode stream connected (all, the\n"
"                         default) or at least one (any: a model server down or rolling\n"
"                         does not make a router sidecar unready; none configured is ready)\n"
"\n"
"Cluster (docs/cluster.md): router hosts share their route commits over NATS\n"
"  --cluster URL[,URL...] NATS servers (nats://HOST:PORT, tls://HOST:PORT); default: off.\n"
"                         Unreachable servers mean local-only operation and reconnection\n"
"                         with backoff (metric kvidx_cluster_connected)\n"
"  --cluster-name NAME    subject scope, [A-Za-z0-9_-]{1,32}; hosts share predictions with\n"
"                         the same name and key scheme (algo, seed, block-size) (default kvidx)\n"
"  --cluster-user USER    user name; cluster-password PASS is read from the config file only\n"
"  --cluster-creds FILE   NATS credentials file (user JWT and NKey seed)\n"
"  --cluster-ca FILE      CA certificates for the servers' TLS certificates (TLS required)\n"
"  --cluster-clock-skew DURATION\n"
"                         bound on the clock offset between hosts: a peer's prediction\n"
"                         expires at min(origin commit + TTL, receipt + TTL) - this (default 5ms)\n"
"  --cluster-queue N      messages queued per direction between the writer and the network\n"
"                         threads; beyond, messages are dropped and counted (default 1024)\n"
"  With JetStream on the server (nats-server -js), a host that joins or restarts replays\n"
"  the stream KVIDX_<cluster-name> (recent commits, kept for the largest TTL) before it\n"
"  reports ready (warm start, at most 10 s)\n"
"\n"
"Other:\n"
"  --config FILE          read settings from FILE first; flags given here override them\n"
"  --log-level LEVEL      error, warn, info (default) or debug; logs go to stderr\n"
"  --help                 this text\n"
"\n"
"Config file: one 'key = value' per line, keys exactly the long flag names above without\n"
"'--' (name, capacity, ..., pod, bind, log-level); '#' starts a comment; 'pod = SPEC' may\n"
"repeat; replay-on-start takes true or false. Example: examples/ingestd.conf.\n"
"\n"
"Signals: SIGHUP re-reads the config file's pod list (added pods are subscribed, removed\n"
"ones unsubscribed and dropped from the index, a changed pod line is both; other settings\n"
"need a restart). Pods from --pod and from --discover-dns are never touched by it.\n"
"SIGTERM / SIGINT stop cleanly; the index stays and readers keep serving its last state.\n"
"\n"
"Sequence numbers, per pod: a small step back is a duplicate (ignored); a gap is replayed\n"
"from the pod's replay socket while its live messages wait; a replay that cannot cover the\n"
"gap, a missing replay socket, or a timeout clears the pod and live ingest continues; a big\n"
"step back or a return to 0 is a publisher restart (pod cleared, resynced).\n"
"AllBlocksCleared clears the pod.\n"
"\n"
"Health per pod is in the index's pod counters (kvidx-dump --pods): batches, events,\n"
"blocks_stored/removed, clears, seq_gaps/dups, restarts, replays_ok/truncated/failed,\n"
"decode_errors (whole messages), skipped_events (events, the sum of the reasons:\n"
"bad_events, unknown_type, skipped_group, skipped_shape, skipped_remote, unknown_parent,\n"
"unknown_removed, offload_unknown, unkeyable_extras), offload_applied, dup_copies,\n"
"copies_kept, other_medium, ranks, last_seq, last_event_ns, events_per_s (last full second),\n"
"queue_depth (messages read for the pod in the last poll round, at most 256 per round: 256\n"
"means a backlog) and connected (every rank's TCP connection up; bind mode: 1 after the\n"
"first message). Per rank: connected, replaying, last_seq, batches, events, seq_gaps,\n"
"restarts, clears.\n"
"\n"
"Speculation per pod, in the same counters: ttl_ms (the TTL in force), speculations\n"
"(records predicted), confirmed_in_time, late_confirmations, early_expiries (expired, then\n"
"confirmed within the late window), stale_expiries (never confirmed), routes_predicted\n"
"(the router matched speculative blocks on the chosen pod), routes_confirmed (matched only\n"
"confirmed blocks), routes_nomatch, last_route_ns, outcomes, false_warm_routes (decided on\n"
"a prediction, fewer cached tokens than predicted) and wasted_prefill_tokens (predicted\n"
"minus cached on those), spec_paused (0 fresh; 1 replaying or disconnected; 2 pipeline\n"
"broken, see --stale-limit). Route-to-confirmation latency (commit -> BlockStored applied,\n"
"one sample per route) is in the pod's cumulative and recent histograms (kvidx-dump).\n"
"Predicted tokens are matched blocks x --block-size, at most the prompt less one token\n"
"rounded down to a block (vLLM recomputes a prompt's last token).\n"
"\n"
"Each event is judged on its own; a batch is never dropped for one bad event. Engine block\n"
"sizes neither a multiple nor a divisor of --block-size are skipped (skipped_shape);\n"
"blocks with prompt embeds end their event's chain (unkeyable_extras); a parent the\n"
"engine-key map no longer knows skips its event (unknown_parent), as llm-d does.\n"
"\n"
"Exit status: 0 after a clean stop, 1 on a startup error, 2 on bad usage.\n",
	      f);
}
