/*
 * config.c — kvidx-ingestd's configuration: one table of options shared by the command line
 * and the config file, value parsing, pod specs, and the --help text (see config.h).
 */
#include "config.h"

#include "telemetry.h"

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

/* --discover-http HOST:PORT[,HOST:PORT...]: serving addresses (a name, an IPv4 address or
 * [IPv6]) whose HTTP API reports their event endpoints (dischttp.c). "" turns it off. */
static int parse_disc_http(const char *v, struct ing_discover_config *d, char *err,
			   size_t errlen)
{
	const char *p = v;

	if (strlen(v) >= sizeof(d->http))
		return fail(err, errlen, "discover-http: longer than %zu bytes", sizeof(d->http) - 1);
	while (*p) {
		const char *end = strchr(p, ','), *colon;
		size_t n = end ? (size_t)(end - p) : strlen(p), hn;
		char item[300], host[260];
		uint64_t port;

		if (n == 0 || n >= sizeof(item))
			goto bad;
		memcpy(item, p, n);
		item[n] = '\0';
		colon = strrchr(item, ':');
		hn = colon ? (size_t)(colon - item) : 0;
		if (!hn || hn >= sizeof(host) || !tc_parse_dec(colon + 1, 65535, &port) || !port ||
		    hn + 1 + 5 >= KVIDX_POD_NAME_MAX)
			goto bad;
		memcpy(host, item, hn);
		host[hn] = '\0';
		for (size_t i = 0; i < hn; i++)
			if (!isalnum((unsigned char)host[i]) && !strchr(".-_[]:", host[i]))
				goto bad;
		p += n + (end ? 1 : 0);
		if (end && !*p)
			goto bad;
	}
	snprintf(d->http, sizeof(d->http), "%s", v);
	return 0;
bad:
	return fail(err, errlen, "discover-http: expected HOST:PORT[,HOST:PORT...] (a pod's "
		    "serving address, at most %d bytes each), got '%s'", KVIDX_POD_NAME_MAX - 1, v);
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

/*
 * The option table: one row per option, the one place an option is declared. A row names
 * the long flag (also the config-file key), how its value is read (kind), the bounds it must
 * lie in, the field of struct ing_config it sets, and its --help text. ing_config_set() and
 * ing_config_usage() walk it; the config file and the command line both go through
 * ing_config_set(). Rows without a name are --help prose printed where they stand; rows
 * without help are accepted but not listed (older names, values documented elsewhere).
 */
enum opt_kind {
	OPT_TEXT,     /* no option: help is --help prose */
	OPT_STR,      /* copied into the field (a char array) */
	OPT_U64,      /* integer, optional k/m/g suffix (x1024), within min..max */
	OPT_U32,      /* the same, at most UINT32_MAX */
	OPT_MS,       /* a flag named *-ms: a whole number of milliseconds, no suffix */
	OPT_BOOL,     /* no argument on the command line; true/false/yes/no/1/0/on/off */
	OPT_DURATION, /* "250ms", "2s": milliseconds, at most a day, within min.. */
	OPT_FRACTION, /* "0.99", "99%", "p99": (0, 1], a double */
	OPT_CHOICE,   /* one of the names in choices: the field takes its value */
	OPT_SPECIAL,  /* the row's set() parses and stores */
};

struct opt;
typedef int opt_set_fn(struct ing_config *c, const struct opt *o, const char *v,
		       bool from_file, char *err, size_t errlen);

struct choice {
	const char *name;
	unsigned value;
};

struct opt {
	const char *name;      /* the long flag without "--", and the config-file key */
	enum opt_kind kind;
	size_t off, size;      /* the field in struct ing_config (not OPT_SPECIAL) */
	uint64_t min, max;     /* numeric kinds: accepted range (0, 0: what the kind takes) */
	const char *bad;       /* out of range: "name: bad" instead of the range */
	opt_set_fn *set;       /* OPT_SPECIAL */
	const struct choice *choices; /* OPT_CHOICE, ends with a NULL name */
	bool cli_only;         /* refused inside a config file */
	const char *arg, *help; /* --help: the value's name and the text (NULL: not listed) */
};

#define FIELD(f) .off = offsetof(struct ing_config, f), .size = sizeof(((struct ing_config *)0)->f)
#define RANGE(lo, hi) .min = (lo), .max = (hi)
#define POSITIVE .min = 1, .bad = "must be > 0"
#define TEXT(s) { .kind = OPT_TEXT, .help = s }

#define DURATION_MAX_MS 86400000ull /* a day: anything longer is a typo */

static int set_name(struct ing_config *c, const struct opt *o, const char *v, bool from_file,
		    char *err, size_t errlen)
{
	(void)from_file;
	if (!*v)
		return fail(err, errlen, "name: empty");
	return copy_str(o->name, v, c->name, sizeof(c->name), err, errlen);
}

static int set_algo(struct ing_config *c, const struct opt *o, const char *v, bool from_file,
		    char *err, size_t errlen)
{
	(void)o, (void)from_file;
	if (kvidx_key_algo_parse(v, &c->algo) < 0)
		return fail(err, errlen, "algo: expected cbor-fnv or xxh64, got '%s'", v);
	return 0;
}

static int set_group(struct ing_config *c, const struct opt *o, const char *v, bool from_file,
		     char *err, size_t errlen)
{
	(void)o, (void)from_file;
	return parse_group(v, &c->group, err, errlen);
}

static int set_pod(struct ing_config *c, const struct opt *o, const char *v, bool from_file,
		   char *err, size_t errlen)
{
	(void)o;
	return add_pod(c, v, from_file, err, errlen);
}

void ing_bind_replay(const struct ing_config *c, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);

	out[0] = '\0';
	for (const char *p = c->bind_replay; *p;) {
		const char *end = strchr(p, ','), *eq = strchr(p, '=');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (eq && eq < p + n && (size_t)(eq - p) == nl && !memcmp(p, name, nl)) {
			snprintf(out, len, "%.*s", (int)(p + n - eq - 1), eq + 1);
			return;
		}
		p += n + (end ? 1 : 0);
	}
}

/* --bind-replay NAME=ENDPOINT[,NAME=ENDPOINT...]: checked whole, kept as given. */
static int set_bind_replay(struct ing_config *c, const struct opt *o, const char *v,
			   bool from_file, char *err, size_t errlen)
{
	(void)from_file;
	for (const char *p = v; *p;) {
		const char *end = strchr(p, ','), *eq = strchr(p, '=');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char ep[ING_ENDPOINT_MAX];

		if (!eq || eq >= p + n || eq == p || (size_t)(eq - p) >= KVIDX_POD_NAME_MAX ||
		    (size_t)(p + n - eq - 1) >= sizeof(ep))
			goto bad;
		snprintf(ep, sizeof(ep), "%.*s", (int)(p + n - eq - 1), eq + 1);
		if (!endpoint_ok(ep) || !strrchr(ep, ':'))
			goto bad;
		p += n + (end ? 1 : 0);
		if (end && !*p)
			goto bad;
	}
	return copy_str(o->name, v, c->bind_replay, sizeof(c->bind_replay), err, errlen);
bad:
	return fail(err, errlen, "bind-replay: expected NAME=ENDPOINT[,NAME=ENDPOINT...] (the "
		    "topic's pod name, its replay ROUTER), got '%s'", v);
}

static int set_bind(struct ing_config *c, const struct opt *o, const char *v, bool from_file,
		    char *err, size_t errlen)
{
	(void)from_file;
	if (*v && !endpoint_ok(v))
		return fail(err, errlen, "bind: '%s' is not a ZeroMQ endpoint", v);
	return copy_str(o->name, v, c->bind, sizeof(c->bind), err, errlen);
}

static int set_log_level(struct ing_config *c, const struct opt *o, const char *v,
			 bool from_file, char *err, size_t errlen)
{
	(void)o, (void)from_file;
	if (ilog_level_parse(v, &c->log_level) < 0)
		return fail(err, errlen, "log-level: expected error, warn, info or debug, got '%s'",
			    v);
	return 0;
}

/* --ttl-backlog DURATION|measured */
static int set_ttl_backlog(struct ing_config *c, const struct opt *o, const char *v,
			   bool from_file, char *err, size_t errlen)
{
	uint32_t ms;
	int rc;

	(void)from_file;
	if (!strcmp(v, "measured")) {
		c->spec.backlog_measured = true;
		return 0;
	}
	rc = ing_parse_duration(o->name, v, DURATION_MAX_MS, &ms, err, errlen);
	if (rc < 0)
		return rc;
	c->spec.backlog_measured = false;
	c->spec.backlog_ms = ms;
	return 0;
}

/* --late-window DURATION|auto (0 in the field: auto) */
static int set_late_window(struct ing_config *c, const struct opt *o, const char *v,
			   bool from_file, char *err, size_t errlen)
{
	uint32_t ms;
	int rc;

	(void)from_file;
	if (!strcmp(v, "auto")) {
		c->spec.late_window_ms = 0;
		return 0;
	}
	rc = ing_parse_duration(o->name, v, DURATION_MAX_MS, &ms, err, errlen);
	if (rc < 0)
		return rc;
	if (!ms)
		return fail(err, errlen, "late-window: must be > 0 (or auto)");
	c->spec.late_window_ms = ms;
	return 0;
}

/* --metrics-listen and its older name --metrics; "" = no endpoint */
static int set_metrics(struct ing_config *c, const struct opt *o, const char *v,
		       bool from_file, char *err, size_t errlen)
{
	(void)o, (void)from_file;
	if (!*v) {
		c->metrics[0] = '\0';
		return 0;
	}
	return ing_metrics_addr_parse(v, c->metrics, sizeof(c->metrics), err, errlen);
}

/* cluster*: cluster.c owns their values */
static int set_cluster(struct ing_config *c, const struct opt *o, const char *v,
		       bool from_file, char *err, size_t errlen)
{
	return ing_cluster_config_set(&c->cluster, o->name, v, from_file, err, errlen);
}

static int set_disc_ports(struct ing_config *c, const struct opt *o, const char *v,
			  bool from_file, char *err, size_t errlen)
{
	(void)o, (void)from_file;
	return parse_disc_ports(v, &c->disc, err, errlen);
}

static int set_disc_server(struct ing_config *c, const struct opt *o, const char *v,
			   bool from_file, char *err, size_t errlen)
{
	(void)o, (void)from_file;
	return parse_disc_server(v, &c->disc, err, errlen);
}

static int set_disc_http(struct ing_config *c, const struct opt *o, const char *v,
			 bool from_file, char *err, size_t errlen)
{
	(void)o, (void)from_file;
	return parse_disc_http(v, &c->disc, err, errlen);
}

static int set_disc_attrs(struct ing_config *c, const struct opt *o, const char *v,
			  bool from_file, char *err, size_t errlen)
{
	(void)o, (void)from_file;
	return parse_disc_attrs(v, &c->disc, err, errlen);
}

static const struct choice ttl_policies[] = {
	{ "static", ING_TTL_STATIC }, { "adaptive", ING_TTL_ADAPTIVE }, { NULL, 0 },
};
static const struct choice remote_tiers[] = {
	{ "none", 0 }, { "gpu", KVIDX_TIER_GPU }, { "cpu", KVIDX_TIER_CPU },
	{ "disk", KVIDX_TIER_DISK }, { "other", KVIDX_TIER_OTHER }, { NULL, 0 },
};
static const struct choice ready_streams[] = { { "all", 0 }, { "any", 1 }, { NULL, 0 } };

/* In --help order. The defaults are ing_config_init()'s; a default named in a help text
 * must match it. */
static const struct opt opts[] = {
	TEXT("Usage: kvidx-ingestd [FLAGS]\n"
	     "\n"
	     "The one writer of a kvidx index: subscribes to vLLM pods' KV-cache events over ZeroMQ\n"
	     "(3-frame messages: topic, 8-byte big-endian seq, msgpack batch) and keeps the\n"
	     "shared-memory index \"request block key -> pods\" true.\n"
	     "\n"
	     "Index (fixed when the index is created; a restart publishes a fresh generation):\n"),
	{ "name", OPT_SPECIAL, .set = set_name, .arg = "NAME",
	  .help = "index name, /dev/shm/NAME and NAME.data.G (default kvidx)" },
	{ "capacity", OPT_U64, FIELD(geo.capacity), RANGE(1, KVIDX_MAX_CAPACITY), .arg = "N",
	  .help = "keys (default 1Mi); N may end in k, m, g (x1024)" },
	{ "records", OPT_U64, FIELD(geo.records), RANGE(1, UINT32_MAX), .arg = "N",
	  .help = "pod records in all (default 2 x capacity)" },
	{ "pods-per-key", OPT_U32, FIELD(geo.pods_per_key), RANGE(1, KVIDX_MAX_PODS_PER_KEY), .arg = "N",
	  .help = "pods recorded per key (default 10, at most 64)" },
	{ "max-pods", OPT_U32, FIELD(geo.max_pods), RANGE(1, KVIDX_MAX_PODS), .arg = "N",
	  .help = "pods (default 256, at most 4096)" },
	{ "max-readers", OPT_U32, FIELD(geo.max_readers), RANGE(1, KVIDX_MAX_READERS), .arg = "N",
	  .help = "reader slots (default 64, at most 4096)" },
	{ "algo", OPT_SPECIAL, .set = set_algo, .arg = "ALGO",
	  .help = "request-key scheme: cbor-fnv (default, llm-d) or xxh64" },
	{ "seed", OPT_STR, FIELD(seed), .arg = "STRING",
	  .help = "key seed, as llm-d's hash seed / PYTHONHASHSEED (default \"\")" },
	{ "block-size", OPT_U32, FIELD(block_size), RANGE(1, KVIDX_MAX_BLOCK_SIZE), .arg = "N",
	  .help = "tokens per index block (default 16)" },
	{ "group", OPT_SPECIAL, .set = set_group, .arg = "GROUP",
	  .help = "gid or group name: segments 0640/0660 for that group (default\n"
		  "0600, owner only)" },
	{ "stall-ms", OPT_MS, FIELD(stall_ms), RANGE(1, KVIDX_MAX_STALL_MS), .arg = "N",
	  .help = "expel a reader stalled this long (default 1000)" },
	TEXT("\n"
	     "Ingest:\n"),
	{ "pod", OPT_SPECIAL, .set = set_pod, .arg = "SPEC",
	  .help = "connect mode, repeatable: SPEC is\n"
		  "  ENDPOINT[,replay=ENDPOINT][,name=IP:PORT][,model=MODEL]\n"
		  "  [,topic=PREFIX][,dp-ranks=N]\n"
		  "ingestd connects a SUB (topic prefix topic=, else --topic-filter)\n"
		  "to the pod's PUB ENDPOINT and, on a sequence gap, asks its replay\n"
		  "ROUTER. The pod is named name=, else by a kv@POD@MODEL topic, else\n"
		  "ENDPOINT's host:port (warned: routers use the serving address);\n"
		  "its model is model=, else the topic's (warned when neither).\n"
		  "dp-ranks=N (1-32): data parallelism, rank r publishes at ENDPOINT's\n"
		  "port + r and replays at the replay port + r, all one pod; each rank\n"
		  "has its own sequence, replay and clears (kvidx-dump --pods)" },
	{ "topic-filter", OPT_STR, FIELD(topic_filter), .arg = "PREFIX",
	  .help = "topic prefix of pods without topic= and of --bind (default \"\":\n"
		  "everything, vLLM's default topic included)" },
	{ "remote-tier", OPT_CHOICE, FIELD(remote_tier), .choices = remote_tiers, .arg = "TIER",
	  .help = "blocks with locality REMOTE: none (default, not indexed), or gpu,\n"
		  "cpu, disk, other: indexed on that tier (weighted as that tier)" },
	{ "bind", OPT_SPECIAL, .set = set_bind, .arg = "ENDPOINT",
	  .help = "bind mode: a SUB bound at ENDPOINT, pods connect in and are\n"
		  "told apart by topic (a gap clears the pod unless --bind-replay\n"
		  "names its replay endpoint)" },
	{ "bind-ranks", OPT_U32, FIELD(bind_ranks), RANGE(1, KV_POD_RANKS), .arg = "N",
	  .help = "bind N SUB sockets, rank r's at ENDPOINT's port + r (data-parallel\n"
		  "publishers dial port + rank): what comes on socket r is rank r of\n"
		  "the pod its topic names (default 1)" },
	{ "bind-replay", OPT_SPECIAL, .set = set_bind_replay, .arg = "NAME=ENDPOINT[,...]",
	  .help = "the replay ROUTER of the bound pod NAME (its topic's pod; rank r at\n"
		  "the port + r): gaps and restarts are replayed from it, live messages\n"
		  "that arrive meanwhile wait (up to 1024)" },
	{ "engine-map", OPT_U64, FIELD(engine_map), RANGE(1, 1ull << 32), .arg = "N",
	  .help = "entries of the engine-key -> request-key map, oldest evicted\n"
		  "first (default 4 x capacity)" },
	{ "replay-timeout-ms", OPT_MS, FIELD(replay_timeout_ms), POSITIVE, .arg = "N",
	  .help = "a replay silent this long fails, the pod is cleared (default 2000)" },
	{ "replay-on-start", OPT_BOOL, FIELD(replay_on_start),
	  .help = "ask every pod's replay socket from seq 0 at start (to rebuild\n"
		  "after a restart; only the batches the pod still keeps come\n"
		  "back); otherwise the first message sets the sequence" },
	TEXT("\n"
	     "Speculative entries (docs/DESIGN.md, docs/ttl.md). Routers commit each routing decision\n"
	     "(kvidx_commit); ingestd then predicts the prompt's blocks on the chosen decode pod (and\n"
	     "prefill pod under P/D) until a BlockStored confirms them or the TTL ends. Readers ignore an\n"
	     "expired prediction themselves, so the reaper's delay never extends trust.\n"
	     "Durations take a unit: 250ms, 2s, 1.5s. A TTL above 65535ms (the record format's limit)\n"
	     "is clamped to 65535ms.\n"),
	{ "ttl-policy", OPT_CHOICE, FIELD(spec.policy), .choices = ttl_policies, .arg = "POLICY",
	  .help = "static (default): every pod uses --ttl; adaptive: per pod\n"
		  "T = clamp(Lq + J, floor, cap), Lq the --ttl-percentile of the pod's\n"
		  "recent route-to-confirmation latency, J = backlog + slack" },
	{ "ttl", OPT_DURATION, FIELD(spec.ttl_ms), POSITIVE, .arg = "DURATION",
	  .help = "the static TTL, and the adaptive start (default 2s, llm-d's)" },
	{ "ttl-percentile", OPT_FRACTION, FIELD(spec.percentile), .arg = "Q",
	  .help = "adaptive Lq: 0.99, 99% or p99 (default 0.99)" },
	{ "ttl-backlog", OPT_SPECIAL, .set = set_ttl_backlog, .arg = "DURATION|measured",
	  .help = "adaptive J: subscriber queue growth in bursts (default 250ms);\n"
		  "measured: the --ttl-percentile of the pod's recent event path lag\n"
		  "(batch ts to applied, histogram lag), the duration above while\n"
		  "the pod has fewer than --ttl-min-samples lag samples" },
	{ "ttl-slack", OPT_DURATION, FIELD(spec.slack_ms), .arg = "DURATION",
	  .help = "adaptive J: scheduling jitter, measurement resolution (default\n"
		  "100ms)" },
	{ "ttl-floor", OPT_DURATION, FIELD(spec.floor_ms), POSITIVE, .arg = "DURATION",
	  .help = "adaptive: smallest TTL (default 200ms)" },
	{ "ttl-cap", OPT_DURATION, FIELD(spec.cap_ms), POSITIVE, .arg = "DURATION",
	  .help = "adaptive: largest TTL, the largest stale window the routing SLO\n"
		  "allows (default 5s)" },
	{ "ttl-min-samples", OPT_U64, FIELD(spec.min_samples), .arg = "N",
	  .help = "adaptive: recent samples a pod needs before its TTL moves; until\n"
		  "then it keeps --ttl (clamped to floor..cap) (default 200)" },
	{ "ttl-interval", OPT_DURATION, FIELD(spec.interval_ms), POSITIVE, .arg = "DURATION",
	  .help = "adaptive: re-evaluation period (default 10s)" },
	{ "ttl-max-step", OPT_FRACTION, FIELD(spec.max_step), .arg = "Q",
	  .help = "adaptive: largest change per interval, a fraction or percentage\n"
		  "of the TTL in force (default 25%): change slowly" },
	{ "late-window", OPT_SPECIAL, .set = set_late_window, .arg = "DURATION",
	  .help = "after the reaper expires a prediction, a BlockStored for it this\n"
		  "long after is a late confirmation and an early expiry (the TTL did\n"
		  "not cover the event path); none is a stale expiry (default auto:\n"
		  "the larger of 10s and 5 x the largest TTL)" },
	{ "stale-limit", OPT_DURATION, FIELD(spec.stale_limit_ms), .arg = "DURATION",
	  .help = "\"routed but silent\": routes were sent to a pod and nothing (no\n"
		  "batch, no heartbeat) came from it for this long since the earliest\n"
		  "of them: routed_silent=1, its speculation paused (spec_paused=2)\n"
		  "until it is heard again. 0 disables (default 5s)" },
	{ "corr-map", OPT_U64, FIELD(spec.corr_map), RANGE(1, 1ull << 30), .bad = "must be 1..1Gi", .arg = "N",
	  .help = "route commits remembered for outcome reports, oldest forgotten\n"
		  "first (default 64Ki)" },
	{ "load-timeout", OPT_DURATION, FIELD(spec.load_timeout_ms), POSITIVE, .arg = "DURATION",
	  .help = "the load view (kvidx_pod_load) counts a routed request until its\n"
		  "outcome report, or for this long when none comes (a router that\n"
		  "crashed leaves no load behind it for longer) (default 120s)" },
	{ "late-map", OPT_U64, FIELD(spec.late_map), RANGE(1, 1ull << 30), .bad = "must be 1..1Gi", .arg = "N",
	  .help = "expired predictions remembered for --late-window, oldest counted\n"
		  "stale early when full (default 128Ki)" },
	{ "reap-interval", OPT_DURATION, FIELD(spec.reap_interval_ms), POSITIVE, .arg = "DURATION",
	  .help = "reaper wake-up period (default 10ms)" },
	{ "reap-pass", OPT_DURATION, FIELD(spec.reap_pass_ms), POSITIVE, .arg = "DURATION",
	  .help = "time the reaper takes to walk the whole table: it examines\n"
		  "slots x interval / pass slots per wake-up (default 1s)" },
	TEXT("\n"
	     "Discovery (pods found rather than listed; each source optional, all add and remove pods\n"
	     "the way SIGHUP does, a removed pod's entries dropped at once):\n"),
	{ "discover-dns", OPT_STR, FIELD(disc.dns), .arg = "NAME",
	  .help = "re-resolve NAME's A records (a Kubernetes headless Service; the\n"
		  "search domains of /etc/resolv.conf apply) on a helper thread;\n"
		  "each address is a pod tcp://IP:EVENTS (replay tcp://IP:REPLAY)\n"
		  "named IP:HTTP. An address that leaves the answer is removed; no\n"
		  "address (NXDOMAIN) removes them all; a failed resolution\n"
		  "(timeout, SERVFAIL) changes nothing. Default: off" },
	{ "discover-http", OPT_SPECIAL, .set = set_disc_http, .arg = "HOST:PORT[,...]",
	  .help = "ask each of these serving addresses, every --discover-interval,\n"
		  "where its KV events are published: vLLM's GET /kv_event_sources\n"
		  "(one entry per data-parallel rank), else SGLang's GET /server_info\n"
		  "(its kv_events); a wildcard host there is the address's own. Each\n"
		  "is a pod named HOST:PORT; one that reports no publisher is removed,\n"
		  "one that does not answer 3 times in a row too. Default: off" },
	{ "discover-http-port", OPT_U32, FIELD(disc.http_port), RANGE(1, 65535), .arg = "PORT",
	  .help = "with --discover-dns: each address found is asked over HTTP at\n"
		  "IP:PORT, as --discover-http asks its addresses, instead of taking\n"
		  "--discover-ports (pods with ports of their own, ephemeral ones too)" },
	{ "discover-ports", OPT_SPECIAL, .set = set_disc_ports, .arg = "EVENTS,REPLAY,HTTP",
	  .help = "ports of every discovered pod: its event PUB, its replay ROUTER\n"
		  "(0: none), its serving port (the name routers use); required\n"
		  "with --discover-dns, e.g. 5557,5558,8000" },
	{ "discover-interval", OPT_DURATION, FIELD(disc.interval_ms), POSITIVE, .arg = "DURATION",
	  .help = "time between two resolutions (default 5s)" },
	{ "discover-dns-server", OPT_SPECIAL, .set = set_disc_server, .arg = "IPv4[:PORT]",
	  .help = "ask this server (port default 53) instead of resolv.conf's" },
	{ "discover-pod-attrs", OPT_SPECIAL, .set = set_disc_attrs, .arg = "ATTRS",
	  .help = "--pod attributes every discovered pod takes: model=MODEL,\n"
		  "topic=PREFIX, dp-ranks=N (e.g. 'model=org/m,dp-ranks=2')" },
	{ "config-watch", OPT_DURATION, FIELD(disc.watch_ms), .arg = "DURATION",
	  .help = "check the --config file this often (stat: inode, size, mtime, so a\n"
		  "replaced file or a Kubernetes ConfigMap's swapped link is seen) and\n"
		  "reload its pod list on a change, as SIGHUP does. 0: off (default)" },
	TEXT("\n"
	     "Metrics:\n"),
	{ "metrics-listen", OPT_SPECIAL, .set = set_metrics, .arg = "ADDR:PORT | PORT",
	  .help = "serve HTTP on ADDR:PORT: GET /metrics (per-pod metrics, labels\n"
		  "pod and model only), /healthz (200 while the process runs),\n"
		  "/readyz (200 once the index is published and every connect-mode\n"
		  "stream is connected, else 503 with the reason). PORT alone is\n"
		  "127.0.0.1:PORT. ADDR: an IPv4 address, localhost, 0.0.0.0 or *\n"
		  "(all), [IPV6]. The endpoint has no authentication: bind a pod IP\n"
		  "or 0.0.0.0 only where the network is yours. Default: off.\n"
		  "--metrics is the same flag under its older name.\n"
		  "With discovery also kvidx_discovery_resolutions_total,\n"
		  "_resolution_failures_total, _pods_added_total, _pods_removed_total,\n"
		  "kvidx_discovery_pods and kvidx_config_watch_reloads_total; with\n"
		  "--discover-http kvidx_discovery_http_polls_total, _failures_total,\n"
		  "_pods_added_total, _pods_removed_total and kvidx_discovery_http_pods" },
	{ "metrics", OPT_SPECIAL, .set = set_metrics }, /* its first name, kept for existing configs */
	{ "ready-streams", OPT_CHOICE, FIELD(ready_any), .choices = ready_streams, .arg = "all|any",
	  .help = "/readyz needs every connect-mode stream connected (all, the\n"
		  "default) or at least one (any: a model server down or rolling\n"
		  "does not make a router sidecar unready; none configured is ready)" },
	TEXT("\n"
	     "Cluster (docs/cluster.md): router hosts share their route commits over NATS\n"),
	{ "cluster", OPT_SPECIAL, .set = set_cluster, .arg = "URL[,URL...]",
	  .help = "NATS servers (nats://HOST:PORT, tls://HOST:PORT); default: off.\n"
		  "Unreachable servers mean local-only operation and reconnection\n"
		  "with backoff (metric kvidx_cluster_connected)" },
	{ "cluster-name", OPT_SPECIAL, .set = set_cluster, .arg = "NAME",
	  .help = "subject scope, [A-Za-z0-9_-]{1,32}; hosts share predictions with\n"
		  "the same name and key scheme (algo, seed, block-size) (default kvidx)" },
	{ "cluster-user", OPT_SPECIAL, .set = set_cluster, .arg = "USER",
	  .help = "user name; cluster-password PASS is read from the config file only" },
	{ "cluster-password", OPT_SPECIAL, .set = set_cluster }, /* in cluster-user's help */
	{ "cluster-creds", OPT_SPECIAL, .set = set_cluster, .arg = "FILE",
	  .help = "NATS credentials file (user JWT and NKey seed)" },
	{ "cluster-ca", OPT_SPECIAL, .set = set_cluster, .arg = "FILE",
	  .help = "CA certificates for the servers' TLS certificates (TLS required)" },
	{ "cluster-clock-skew", OPT_SPECIAL, .set = set_cluster, .arg = "DURATION",
	  .help = "bound on the clock offset between hosts: a peer's prediction\n"
		  "expires at min(origin commit + TTL, receipt + TTL) - this (default 5ms)" },
	{ "cluster-queue", OPT_SPECIAL, .set = set_cluster, .arg = "N",
	  .help = "messages queued per direction between the writer and the network\n"
		  "threads; beyond, messages are dropped and counted (default 1024)" },
	TEXT("  With JetStream on the server (nats-server -js), a host that joins or restarts replays\n"
	     "  the stream KVIDX_<cluster-name> (recent commits, kept for the largest TTL) before it\n"
	     "  reports ready (warm start, at most 10 s)\n"),
	TEXT("\n"
	     "Other:\n"),
	{ "config", OPT_STR, FIELD(config_path), .cli_only = true, .arg = "FILE",
	  .help = "read settings from FILE first; flags given here override them" },
	{ "log-level", OPT_SPECIAL, .set = set_log_level, .arg = "LEVEL",
	  .help = "error, warn, info (default) or debug; logs go to stderr" },
	{ "help", OPT_BOOL, FIELD(help), .cli_only = true,
	  .help = "this text" },
	TEXT("\n"
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
	     "Exit status: 0 after a clean stop, 1 on a startup error, 2 on bad usage.\n"),
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const struct opt *opt_find(const char *name, size_t len)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (opts[i].name && strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
			return &opts[i];
	return NULL;
}

/* Stores an unsigned value into a field of the width the row names. */
static void store_uint(void *dst, size_t size, uint64_t u)
{
	switch (size) {
	case sizeof(uint64_t): {
		uint64_t x = u;
		memcpy(dst, &x, sizeof(x));
		break;
	}
	case sizeof(uint32_t): {
		uint32_t x = (uint32_t)u;
		memcpy(dst, &x, sizeof(x));
		break;
	}
	case sizeof(bool):
		*(bool *)dst = u != 0;
		break;
	default:
		abort(); /* a row whose field has no integer width: a bug in the table */
	}
}

/* OPT_CHOICE: the value's entry, or a message listing the names ("a, b or c"). */
static int parse_choice(const struct opt *o, const char *v, unsigned *out, char *err,
			size_t errlen)
{
	char names[256] = "";
	size_t n = 0, len = 0;

	for (const struct choice *ch = o->choices; ch->name; ch++, n++)
		if (!strcmp(ch->name, v)) {
			*out = ch->value;
			return 0;
		}
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
					i == 0 ? "" : i + 1 == n ? " or " : ", ", o->choices[i].name);
	return fail(err, errlen, "%s: expected %s, got '%s'", o->name, names, v);
}

/* Reads v by the row's kind into *u (the numeric kinds); 1 when the row is done already. */
static int parse_value(struct ing_config *c, const struct opt *o, const char *v,
		       bool from_file, uint64_t *u, char *err, size_t errlen)
{
	void *dst = (char *)c + o->off;
	uint32_t ms = 0;
	unsigned choice = 0;
	bool b = false;
	double frac = 0;
	int rc;

	switch (o->kind) {
	case OPT_STR:
		rc = copy_str(o->name, v, dst, o->size, err, errlen);
		return rc < 0 ? rc : 1;
	case OPT_U64:
	case OPT_U32:
		return parse_u64(o->name, v, o->kind == OPT_U32 ? UINT32_MAX : UINT64_MAX, u, err,
				 errlen);
	case OPT_MS:
		/* The name carries the unit, so no suffix: "1m" is neither a minute nor 1Mi ms. */
		if (!tc_parse_dec(v, UINT32_MAX, u))
			return fail(err, errlen, "%s: expected a whole number of milliseconds, got '%s'",
				    o->name, v);
		return 0;
	case OPT_DURATION:
		rc = ing_parse_duration(o->name, v, DURATION_MAX_MS, &ms, err, errlen);
		*u = ms;
		return rc;
	case OPT_BOOL:
		rc = parse_bool(o->name, v, &b, err, errlen);
		*u = b;
		return rc;
	case OPT_FRACTION:
		rc = parse_fraction(o->name, v, &frac, err, errlen);
		if (rc == 0)
			memcpy(dst, &frac, sizeof(frac));
		return rc < 0 ? rc : 1;
	case OPT_CHOICE:
		rc = parse_choice(o, v, &choice, err, errlen);
		*u = choice;
		return rc;
	case OPT_SPECIAL:
		rc = o->set(c, o, v, from_file, err, errlen);
		return rc < 0 ? rc : 1;
	case OPT_TEXT:
		break;
	}
	return fail(err, errlen, "%s: unhandled option", o->name);
}

int ing_config_set(struct ing_config *c, const char *key, const char *value, bool from_file,
		   char *err, size_t errlen)
{
	const struct opt *o = opt_find(key, strlen(key));
	uint64_t u = 0;
	int rc;

	if (!o)
		return fail(err, errlen, "unknown option '%s' (see --help)", key);
	if (!value)
		return fail(err, errlen, "%s: missing value", key);
	if (o->cli_only && from_file)
		return fail(err, errlen, "%s: not allowed inside a config file", key);
	rc = parse_value(c, o, value, from_file, &u, err, errlen);
	if (rc != 0)
		return rc < 0 ? rc : 0;
	if ((o->min || o->max) && (u < o->min || (o->max && u > o->max))) {
		if (o->bad)
			return fail(err, errlen, "%s: %s", key, o->bad);
		return fail(err, errlen, "%s: %s is out of range (%llu..%llu)", key, value,
			    (unsigned long long)o->min, (unsigned long long)o->max);
	}
	store_uint((char *)c + o->off, o->size, u);
	return 0;
}

/* One option's --help entry: "  --name ARG" in a 25-column first column (the text on the
 * next line when the flag is wider), the text's lines indented to that column. */
static void usage_row(FILE *f, const struct opt *o)
{
	int n = fprintf(f, "  --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");

	if (n > 23)
		fprintf(f, "\n%25s", "");
	else
		fprintf(f, "%*s", 25 - n, "");
	for (const char *p = o->help; *p; p++) {
		fputc(*p, f);
		if (*p == '\n' && p[1])
			fprintf(f, "%25s", "");
	}
	fputc('\n', f);
}

void ing_config_usage(FILE *f)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (opts[i].kind == OPT_TEXT)
			fputs(opts[i].help, f);
		else if (opts[i].help)
			usage_row(f, &opts[i]);
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
		if (!strcmp(o->name, "config"))
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
	if (c->spec.reap_interval_ms > c->spec.reap_pass_ms)
		return fail(err, errlen, "reap-interval (%ums) is longer than reap-pass (%ums): a "
			    "pass over the table takes at least one wake-up",
			    c->spec.reap_interval_ms, c->spec.reap_pass_ms);
	if (!c->npods && !c->bind[0] && !c->disc.dns[0] && !c->disc.http[0] && !c->disc.watch_ms)
		return fail(err, errlen, "no pods: give --pod (connect mode), --bind (bind mode), "
			    "--discover-dns, --discover-http or --config-watch");
	if ((c->bind_ranks > 1 || c->bind_replay[0]) && !c->bind[0])
		return fail(err, errlen, "--bind-ranks and --bind-replay need --bind ENDPOINT");
	if (c->bind_ranks > 1) {
		const char *colon = strrchr(c->bind, ':');
		uint64_t port = 0;
		if (!colon || !tc_parse_dec(colon + 1, 65535, &port) ||
		    port + c->bind_ranks - 1 > 65535)
			return fail(err, errlen, "--bind %s --bind-ranks %u: needs a numeric port "
				    "with room for %u more", c->bind, c->bind_ranks, c->bind_ranks - 1);
	}
	if (c->disc.http_port && (!c->disc.dns[0] || c->disc.port_events || c->disc.http[0]))
		return fail(err, errlen, "--discover-http-port goes with --discover-dns, instead of "
			    "--discover-ports (and without a --discover-http list)");
	if (c->disc.dns[0] && !c->disc.port_events && !c->disc.http_port)
		return fail(err, errlen, "--discover-dns needs --discover-ports EVENTS,REPLAY,HTTP "
			    "(or --discover-http-port PORT)");
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
