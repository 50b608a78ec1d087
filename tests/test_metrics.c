/*
 * test_metrics.c — the Prometheus exposition (tools/common/prom.c): its structure (HELP
 * before TYPE, one family per name, every sample in its family's block, counter vs gauge),
 * label escaping of hostile pod names and models, the latency histogram (monotone cumulative
 * buckets that match the samples, +Inf == _count), that no key ever appears; the loopback
 * HTTP server of tools/ingestd/metrics.c (200 with the body, 404, 405, 400, 431, an idle
 * client that does not wedge the next one and is closed after the idle timeout, hundreds of
 * idle and slow connections while scrapes go on, 503 until the index exists, the addresses
 * --metrics-listen takes (every address, a bare port on loopback) and refuses, the probes
 * /healthz and /readyz);
 * and kvidx-dump --prometheus.
 *
 * Each test creates its own index "t-met-<pid>-<n>", unlinked in teardown; the dump is found
 * through KVIDX_BIN, as every tool the tests run (util_run.c).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hist.h"
#include "inspect.h"
#include "kvidx_writer.h"
#include "metrics.h"
#include "prom.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_run.h"
#include "util_text.h"

static char name[64];
static struct kvidx *w;

static void setup(void)
{
	tu_index_name(name, sizeof(name), "met");
}

static void teardown(void)
{
	tu_index_remove(name, &w);
}

TestSuite(metrics, .init = setup, .fini = teardown);

/* ---- helpers ---- */

static struct kvidx *open_index(void)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 1000, .pods_per_key = 4,
						.max_pods = 16, .max_readers = 8 } };

	return tu_writer_open(name, &o);
}

/* prom_render() into a malloc'd string. */
static char *render(void)
{
	struct kvidx_reader *r = kvidx_reader_open(name);
	char *buf = NULL;
	size_t len = 0;

	cr_assert_not_null(r, "reader open: %s", kvidx_strerror(-errno));
	FILE *m = open_memstream(&buf, &len);
	cr_assert_not_null(m);
	int rc = prom_render(r, m);
	cr_assert_eq(rc, 0, "prom_render: %s", kvidx_strerror(rc));
	cr_assert_eq(fclose(m), 0);
	kvidx_reader_close(r);
	cr_assert_eq(strlen(buf), len, "NUL byte in the exposition");
	return buf;
}

/* Whether s is valid UTF-8 throughout. */
static bool valid_utf8(const unsigned char *s)
{
	while (*s) {
		unsigned c = *s++;
		int more = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 :
			   c >= 0xf0 && c <= 0xf4 ? 3 : -1;
		if (more < 0)
			return false;
		for (int i = 0; i < more; i++)
			if ((*s++ & 0xc0) != 0x80)
				return false;
	}
	return true;
}

/* The label list of sample line after its '{' at q: the character after its '}', or NULL
 * with the violation in why. */
static const char *check_labels(const char *q, const char *line, char *why, size_t wl)
{
	for (;;) {
		size_t ln = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
				      "QRSTUVWXYZ0123456789_");
		if (!ln || q[ln] != '=' || q[ln + 1] != '"') {
			snprintf(why, wl, "bad label in: %.400s", line);
			return NULL;
		}
		q += ln + 2;
		while (*q != '"') {
			if (!*q) {
				snprintf(why, wl, "unterminated label value");
				return NULL;
			}
			if (*q == '\\') {
				if (q[1] != '\\' && q[1] != '"' && q[1] != 'n') {
					snprintf(why, wl, "bad escape in a label value");
					return NULL;
				}
				q++;
			}
			q++;
		}
		q++;
		if (*q == ',') {
			q++;
			continue;
		}
		if (*q++ != '}') {
			snprintf(why, wl, "bad label list in: %.400s", line);
			return NULL;
		}
		return q;
	}
}

/*
 * Checks the exposition's structure (text format 0.0.4) and returns a message for the first
 * violation, or NULL: lines are comments or samples; each family has # HELP then # TYPE
 * (counter, gauge, histogram, summary or untyped) and appears once; every sample follows its family's
 * TYPE line, without another family in between (histograms: _bucket, _sum, _count); label
 * values are quoted with only \\, \" and \n escapes; values parse as numbers or +Inf.
 */
static const char *check_exposition(const char *text)
{
	static char why[512];
	char fam[128] = "", type[16] = "", help_for[128] = "";
	char seen[256][128];
	int nseen = 0;

	if (!valid_utf8((const unsigned char *)text))
		return "not valid UTF-8";
	for (const char *p = text; *p;) {
		const char *e = strchr(p, '\n');
		if (!e)
			return "last line not terminated by a line feed";
		char line[2048];
		size_t n = (size_t)(e - p);
		if (n >= sizeof(line))
			return "line too long";
		memcpy(line, p, n);
		line[n] = '\0';
		p = e + 1;
		if (!strncmp(line, "# HELP ", 7)) {
			sscanf(line + 7, "%127s", help_for);
			continue;
		}
		if (!strncmp(line, "# TYPE ", 7)) {
			if (sscanf(line + 7, "%127s %15s", fam, type) != 2)
				return "malformed TYPE line";
			if (strcmp(help_for, fam)) {
				snprintf(why, sizeof(why), "TYPE %s without HELP just before", fam);
				return why;
			}
			if (strcmp(type, "counter") && strcmp(type, "gauge") &&
			    strcmp(type, "histogram") && strcmp(type, "summary") &&
			    strcmp(type, "untyped"))
				return "unknown type";
			for (int i = 0; i < nseen; i++)
				if (!strcmp(seen[i], fam)) {
					snprintf(why, sizeof(why), "family %s declared twice", fam);
					return why;
				}
			if (nseen < 256)
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", fam);
			continue;
		}
		if (line[0] == '#') {
			snprintf(why, sizeof(why), "stray comment: %.400s", line);
			return why;
		}
		/* A sample: name [{labels}] value */
		size_t nl = strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					 "0123456789_:");
		char sname[128];
		if (!nl || nl >= sizeof(sname)) {
			snprintf(why, sizeof(why), "bad sample name: %.400s", line);
			return why;
		}
		memcpy(sname, line, nl);
		sname[nl] = '\0';
		bool ok = !strcmp(sname, fam);
		if (!strcmp(type, "histogram") || !strcmp(type, "summary")) {
			size_t fl = strlen(fam);
			ok = ok || (!strncmp(sname, fam, fl) &&
				    ((!strcmp(sname + fl, "_bucket") && type[0] == 'h') ||
				     !strcmp(sname + fl, "_sum") || !strcmp(sname + fl, "_count")));
		}
		if (!ok) {
			snprintf(why, sizeof(why), "sample %s outside its family (in %s)", sname,
				 fam);
			return why;
		}
		const char *q = line + nl;
		if (*q == '{' && (q = check_labels(q + 1, line, why, sizeof(why))) == NULL)
			return why;
		if (*q++ != ' ') {
			snprintf(why, sizeof(why), "no space before the value: %.400s", line);
			return why;
		}
		char *end;
		if (strcmp(q, "+Inf")) {
			strtod(q, &end);
			if (end == q || *end) {
				snprintf(why, sizeof(why), "bad value: %.400s", line);
				return why;
			}
		}
	}
	return NULL;
}

static void assert_exposition(const char *text)
{
	const char *why = check_exposition(text);

	cr_assert_null(why, "%s\nin:\n%.8000s", why, text);
}

/* The checker must be able to fail. */
Test(metrics, checker_rejects_bad_expositions)
{
	cr_assert_null(check_exposition("# HELP a x\n# TYPE a gauge\na{p=\"\\\"\"} 1\na 2\n"));
	cr_assert_not_null(check_exposition("# TYPE a gauge\na 1\n"));
	cr_assert_not_null(check_exposition("# HELP a x\n# TYPE a gauge\nb 1\n"));
	cr_assert_not_null(check_exposition("# HELP a x\n# TYPE a gauge\na 1\n"
					    "# HELP a x\n# TYPE a gauge\na 1\n"));
	cr_assert_not_null(check_exposition("# HELP a x\n# TYPE a gauge\na{p=\"x\ny\"} 1\n"));
	cr_assert_not_null(check_exposition("# HELP a x\n# TYPE a gauge\na{p=\"\\q\"} 1\n"));
	cr_assert_not_null(check_exposition("# HELP a x\n# TYPE a gauge\na x\n"));
	cr_assert_not_null(check_exposition("# HELP a x\n# TYPE a gauge\na 1"));
}

/* ---- rendering ---- */

static const char *const pod_ctr_names[] = {
#define NAME(n) #n,
	KV_POD_CTRS(NAME)
#undef NAME
};

/* Every per-pod counter of the layout is exported in t: a counter as <name>_total, a level
 * under its name, an age in seconds, a value with a unit in base units (renamed). */
static void assert_pod_families(const char *t)
{
	char want[256];

	static const char *const renamed[][2] = { { "ttl_ms", "ttl_seconds" },
						  { "lag_last_us", "event_lag_last_seconds" },
						  { "events_per_s", "events_last_second" } };
	for (size_t i = 0; i < sizeof(pod_ctr_names) / sizeof(pod_ctr_names[0]); i++) {
		const char *n = pod_ctr_names[i];
		size_t l = strlen(n);
		char alt[160];
		snprintf(want, sizeof(want), "# TYPE kvidx_pod_%s_total counter\n", n);
		snprintf(alt, sizeof(alt), "# TYPE kvidx_pod_%s gauge\n", n);
		for (size_t j = 0; j < sizeof(renamed) / sizeof(renamed[0]); j++)
			if (!strcmp(n, renamed[j][0]))
				snprintf(alt, sizeof(alt), "# TYPE kvidx_pod_%s gauge\n",
					 renamed[j][1]);
		if (l > 3 && !strcmp(n + l - 3, "_ns"))
			snprintf(alt, sizeof(alt), "# TYPE kvidx_pod_seconds_since_%.*s gauge\n",
				 (int)(l - 3), n);
		cr_assert(strstr(t, want) || strstr(t, alt), "%s: neither '%s' nor '%s'", n, want,
			  alt);
		/* A unit in a name ends in seconds, never ms, us or per_s. */
		cr_assert(!strstr(t, "_ms{") && !strstr(t, "_us{") && !strstr(t, "_per_s{"));
	}
}

Test(metrics, help_type_and_values)
{
	char want[256];

	w = open_index();
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "llama-3");
	int b = kvidx_pod_add(w, "10.0.0.2:8000", NULL);
	cr_assert_geq(a, 0);
	cr_assert_geq(b, 0);
	tu_set_pod_ctr(w, a, KV_PC_speculations, 1000);
	tu_set_pod_ctr(w, a, KV_PC_stale_expiries, 4);
	tu_set_pod_ctr(w, a, KV_PC_ttl_ms, 2000);
	tu_set_pod_ctr(w, a, KV_PC_spec_paused, 2);
	tu_set_pod_ctr(w, a, KV_PC_routed_silent, 1);
	tu_set_pod_ctr(w, a, KV_PC_restarts, 3);
	tu_set_pod_ctr(w, a, KV_PC_events_per_s, 350);
	tu_set_pod_ctr(w, a, KV_PC_last_event_ns, kvidx_now_ns() - 3000000000ull); /* 3 s ago */
	kvidx_writer_tick(w, kvidx_now_ns());

	char *t = render();
	assert_exposition(t);
	assert_pod_families(t);
	static const char *gauges[] = { "ttl_seconds", "spec_paused", "events_last_second",
					"queue_depth",
					"connected", "last_seq", "routed_silent" };
	for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++) {
		snprintf(want, sizeof(want), "# TYPE kvidx_pod_%s gauge\n", gauges[i]);
		tu_assert_has(t, want);
	}
	static const char *counters[] = { "speculations", "confirmed_in_time", "early_expiries",
					  "stale_expiries", "late_confirmations", "routes_predicted",
					  "routes_confirmed", "routes_nomatch", "outcomes",
					  "false_warm_routes", "wasted_prefill_tokens", "events",
					  "seq_gaps" };
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		snprintf(want, sizeof(want), "# TYPE kvidx_pod_%s_total counter\n", counters[i]);
		tu_assert_has(t, want);
	}
	tu_assert_has(t, "# HELP kvidx_pod_speculations_total Speculative entries");
	tu_assert_lacks(t, "kvidx_pod_last_event_ns");
	tu_assert_lacks(t, "# TYPE kvidx_pod_restarts counter");
	tu_assert_has(t, "kvidx_pod_routed_silent{pod=\"10.0.0.1:8000\",model=\"llama-3\"} 1\n");
	tu_assert_has(t, "kvidx_pod_restarts_total{pod=\"10.0.0.1:8000\",model=\"llama-3\"} 3\n");
	tu_assert_has(t, "kvidx_pod_speculations_total{pod=\"10.0.0.1:8000\",model=\"llama-3\"} 1000\n");
	tu_assert_has(t, "kvidx_pod_speculations_total{pod=\"10.0.0.2:8000\",model=\"\"} 0\n");
	tu_assert_has(t, "kvidx_pod_ttl_seconds{pod=\"10.0.0.1:8000\",model=\"llama-3\"} 2.000\n");
	tu_assert_has(t, "kvidx_pod_spec_paused{pod=\"10.0.0.1:8000\",model=\"llama-3\"} 2\n");
	tu_assert_has(t, "kvidx_pod_events_last_second{pod=\"10.0.0.1:8000\",model=\"llama-3\"} 350\n");
	/* Ages: seconds, +Inf for never. */
	const char *age = strstr(t, "kvidx_pod_seconds_since_last_event{pod=\"10.0.0.1:8000\","
				    "model=\"llama-3\"} ");
	cr_assert_not_null(age, "%s", t);
	double s = strtod(strchr(age, '}') + 2, NULL);
	cr_assert(s >= 3.0 && s < 60.0, "age %g", s);
	tu_assert_has(t, "kvidx_pod_seconds_since_last_event{pod=\"10.0.0.2:8000\",model=\"\"} "
			 "+Inf\n");
	/* Index-wide. */
	tu_assert_has(t, "# TYPE kvidx_keys gauge\nkvidx_keys 0\n");
	tu_assert_has(t, "# TYPE kvidx_stores_total counter\n");
	tu_assert_has(t, "# TYPE kvidx_route_commits_total counter\n");
	/* kvidx_pod_clears_total is per pod. */
	tu_assert_has(t, "# TYPE kvidx_index_pod_clears_total counter\n");
	tu_assert_has(t, "kvidx_reader_slots 8\n");
	tu_assert_has(t, "kvidx_readers{state=\"active\"} 1\n"); /* the renderer's own */
	tu_assert_has(t, "kvidx_pods 2\n");
	const char *hb = strstr(t, "\nkvidx_writer_heartbeat_age_seconds ");
	cr_assert_not_null(hb);
	cr_assert_lt(strtod(hb + 36, NULL), 30.0);
	/* Labels: pod and model only. */
	for (const char *p = strchr(t, '{'); p; p = strchr(p + 1, '{')) {
		if (!strncmp(p, "{state=", 7))
			continue;
		cr_assert(!strncmp(p, "{pod=\"", 6), "label other than pod: %.60s", p);
	}
	tu_assert_lacks(t, "le=\"+Inf\",");
	free(t);

	/* A reader added is counted. */
	struct kvidx_reader *extra = kvidx_reader_open(name);
	cr_assert_not_null(extra);
	t = render();
	tu_assert_has(t, "kvidx_readers{state=\"active\"} 2\n");
	free(t);
	kvidx_reader_close(extra);
}

Test(metrics, label_escaping)
{
	w = open_index();
	int a = kvidx_pod_add(w, "we\"ird\\pod\nname", "m\"odel\xff\t}\\n");
	cr_assert_geq(a, 0);
	tu_set_pod_ctr(w, a, KV_PC_speculations, 7);

	char *t = render();
	assert_exposition(t);
	tu_assert_has(t, "kvidx_pod_speculations_total{pod=\"we\\\"ird\\\\pod\\nname\",model=\"m\\\"odel"
			 "\xef\xbf\xbd\xef\xbf\xbd}\\\\n\"} 7\n");
	/* No raw line feed inside a sample: every line is a comment or starts with kvidx_. */
	for (const char *p = t; *p; p = strchr(p, '\n') + 1)
		cr_assert(*p == '#' || !strncmp(p, "kvidx_", 6), "line: %.80s", p);
	free(t);
}

Test(metrics, histogram_buckets)
{
	static const struct {
		uint64_t us;
		int n;
	} samples[] = { { 7, 3 }, { 180000, 500 }, { 620000, 450 }, { 1150000, 47 },
			{ 90000000, 2 } /* 90 s: the open last bucket */ };
	const char *pfx = "kvidx_pod_confirmation_latency_seconds_bucket{pod=\"p\",model=\"m\",le=\"";
	uint64_t total = 0;
	double true_sum = 0;

	w = open_index();
	int a = kvidx_pod_add(w, "p", "m");
	cr_assert_geq(kvidx_pod_add(w, "empty", "m"), 0);
	for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
		tu_add_latency(w, a, KV_HIST_CONFIRM, samples[i].us, samples[i].n);
		total += (uint64_t)samples[i].n;
		true_sum += (double)samples[i].n * (double)samples[i].us / 1e6;
	}
	/* The recent histogram is not exported. */
	kv_tm_hist_add(kv_tm_hist(w, a, KV_HIST_CONFIRM_RECENT), 5);

	char *t = render();
	assert_exposition(t);
	tu_assert_has(t, "# TYPE kvidx_pod_confirmation_latency_seconds histogram\n");
	tu_assert_has(t, "_sum is approximated from bucket midpoints");

	double prev_le = -1;
	uint64_t prev = 0, inf = 0;
	int nb = 0;
	for (const char *p = strstr(t, pfx); p; p = strstr(p + 1, pfx)) {
		const char *v = p + strlen(pfx);
		uint64_t cnt = strtoull(strstr(v, "} ") + 2, NULL, 10);
		cr_assert_geq(cnt, prev, "bucket counts not cumulative at %.40s", v);
		prev = cnt;
		if (!strncmp(v, "+Inf\"", 5)) {
			inf = cnt;
			break;
		}
		double le = strtod(v, NULL);
		cr_assert_gt(le, prev_le, "le not increasing at %.40s", v);
		prev_le = le;
		/* Exactly the samples at or below le (values are whole microseconds). */
		uint64_t want = 0;
		for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
			if ((double)samples[i].us <= le * 1e6 + 0.5)
				want += (uint64_t)samples[i].n;
		cr_assert_eq(cnt, want, "le=%g: %" PRIu64 " counted, %" PRIu64 " samples", le, cnt,
			     want);
		nb++;
	}
	cr_assert_gt(nb, 40, "only %d finite buckets", nb);
	cr_assert_eq(inf, total);
	char want[256];
	snprintf(want, sizeof(want),
		 "kvidx_pod_confirmation_latency_seconds_count{pod=\"p\",model=\"m\"} %" PRIu64 "\n",
		 total);
	tu_assert_has(t, want);
	const char *sum = strstr(t, "kvidx_pod_confirmation_latency_seconds_sum{pod=\"p\",model="
				    "\"m\"} ");
	cr_assert_not_null(sum);
	double s = strtod(strstr(sum, "} ") + 2, NULL);
	/* Midpoints are within 12.5% of any value in their bucket; the 90 s samples sit in the
	 * open last bucket, counted at its lower bound (about 60 s). */
	cr_assert(s > 0.8 * true_sum && s < 1.1 * true_sum, "sum %g, true %g", s, true_sum);
	tu_assert_has(t, "kvidx_pod_confirmation_latency_seconds_bucket{pod=\"empty\",model=\"m\","
			 "le=\"+Inf\"} 0\n");
	tu_assert_has(t, "kvidx_pod_confirmation_latency_seconds_count{pod=\"empty\",model=\"m\"} "
			 "0\n");
	free(t);
}

Test(metrics, no_keys_in_output)
{
	const uint64_t keys[] = { 0xdeadbeefcafef00dull, 0x8464eee8f2cf3412ull };
	char hex[3][32];

	w = open_index();
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "m");
	cr_assert_geq(a, 0);
	cr_assert_eq(kvidx_store(w, a, keys, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);
	cr_assert_eq(kvidx_speculate(w, a, keys + 1, 1, kvidx_now_ns(), 60000), 1);

	char *t = render();
	assert_exposition(t);
	tu_assert_has(t, "kvidx_keys 2\n"); /* the keys are there, counted */
	for (size_t i = 0; i < 2; i++) {
		snprintf(hex[0], sizeof(hex[0]), "%" PRIx64, keys[i]);
		snprintf(hex[1], sizeof(hex[1]), "%" PRIX64, keys[i]);
		snprintf(hex[2], sizeof(hex[2]), "%" PRIu64, keys[i]);
		for (int k = 0; k < 3; k++)
			tu_assert_lacks(t, hex[k]);
		snprintf(hex[0], sizeof(hex[0]), "%08" PRIx64, keys[i] >> 32);
		tu_assert_lacks(t, hex[0]);
	}
	tu_assert_lacks(t, "0x");
	free(t);
}

Test(metrics, write_error_reported)
{
	w = open_index();
	cr_assert_geq(kvidx_pod_add(w, "p", "m"), 0);
	struct kvidx_reader *r = kvidx_reader_open(name);
	cr_assert_not_null(r);
	FILE *f = fopen("/dev/full", "w");
	cr_assert_not_null(f);
	cr_assert_eq(prom_render(r, f), -EIO);
	fclose(f);
	kvidx_reader_close(r);
}

/* ---- HTTP ---- */

/* Starts a server on 127.0.0.1 and returns its port. */
static int start_server(const char *index)
{
	char addr[64];
	int rc = -EADDRINUSE, port = 0;

	for (int tries = 0; tries < 5 && rc == -EADDRINUSE; tries++) {
		port = tu_free_port();
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
		rc = metrics_http_start(addr, index);
	}
	cr_assert_eq(rc, 0, "metrics_http_start(%s): %s", addr, strerror(-rc));
	return port;
}

static int connect_to(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	return fd;
}

/* Reads until EOF (at most 10 s). The caller frees the result. */
static char *read_all(int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);

	cr_assert_not_null(buf);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		cr_assert_eq(poll(&pfd, 1, 10000), 1, "no answer within 10 s");
		if (cap - len < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
		ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return buf;
}

/* Whether resp starts with an HTTP/1.x status line with this code. */
static bool status_is(const char *resp, int code)
{
	int got = 0;

	return sscanf(resp, "HTTP/1.%*1[01] %3d ", &got) == 1 && got == code;
}

/* Sends req on a new connection and returns the whole response. */
static char *http(int port, const char *req, size_t len)
{
	int fd = connect_to(port);

	cr_assert_eq(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	char *resp = read_all(fd);
	close(fd);
	return resp;
}

static char *get(int port, const char *req)
{
	return http(port, req, strlen(req));
}

Test(metrics, http_serves_metrics)
{
	w = open_index();
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "llama-3");
	tu_set_pod_ctr(w, a, KV_PC_speculations, 1000);
	int port = start_server(name);

	char *resp = get(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	tu_assert_has(resp, "\r\nContent-Type: text/plain; version=0.0.4");
	char *body = strstr(resp, "\r\n\r\n");
	cr_assert_not_null(body);
	body += 4;
	const char *cl = strstr(resp, "\r\nContent-Length: ");
	cr_assert_not_null(cl);
	cr_assert_eq(strtoul(cl + 18, NULL, 10), strlen(body));
	assert_exposition(body);
	tu_assert_has(body, "kvidx_pod_speculations_total{pod=\"10.0.0.1:8000\",model=\"llama-3\"} "
			    "1000\n");
	free(resp);

	/* Again (one connection at a time, the reader kept), with a query string, HTTP/1.0. */
	tu_set_pod_ctr(w, a, KV_PC_speculations, 1001);
	resp = get(port, "GET /metrics?x=1 HTTP/1.0\n\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	tu_assert_has(resp, "kvidx_pod_speculations_total{pod=\"10.0.0.1:8000\",model=\"llama-3\"} "
			    "1001\n");
	free(resp);

	resp = get(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	cr_assert_str_eq(strstr(resp, "\r\n\r\n"), "\r\n\r\n", "HEAD with a body");
	free(resp);
}

Test(metrics, http_errors)
{
	w = open_index();
	int port = start_server(name);
	char *resp;

	resp = get(port, "GET /other HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 404), "%.300s", resp);
	tu_assert_lacks(resp, "kvidx_");
	free(resp);
	resp = get(port, "GET /metricsx HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 404), "%.300s", resp);
	free(resp);
	resp = get(port, "GET / HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 404), "%.300s", resp);
	free(resp);
	resp = get(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
	cr_assert(status_is(resp, 405), "%.300s", resp);
	tu_assert_has(resp, "\r\nAllow: GET, HEAD\r\n");
	free(resp);
	resp = get(port, "GET /metrics\r\n\r\n"); /* no HTTP version */
	cr_assert(status_is(resp, 400), "%.300s", resp);
	free(resp);
	resp = get(port, "GET /metrics HTTP/9.9\r\n\r\n");
	cr_assert(status_is(resp, 505), "%.300s", resp);
	free(resp);
	/* Not a request line at all: the connection is closed without an answer. */
	resp = get(port, "garbage\r\n\r\n");
	cr_assert_eq(resp[0], '\0', "%.300s", resp);
	free(resp);

	/* Oversized: 32 KiB of headers without an end (the limit is 16 KiB a connection). */
	static char big[32768];
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /metrics HTTP/1.0\r\nX: ", 26);
	resp = http(port, big, sizeof(big));
	cr_assert(status_is(resp, 431), "%.300s", resp);
	free(resp);

	/* Still serving. */
	resp = get(port, "GET /metrics HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	free(resp);
}

Test(metrics, http_idle_client_does_not_wedge)
{
	w = open_index();
	int port = start_server(name);

	/* A client that connects and sends half a request, then nothing: the next one is
	 * answered while it is still connected (the server does not wait for it). */
	int idle = connect_to(port);
	cr_assert_eq(send(idle, "GET /met", 8, 0), 8);
	char *resp = get(port, "GET /metrics HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	free(resp);
	struct pollfd pfd = { .fd = idle, .events = POLLIN };
	cr_assert_eq(poll(&pfd, 1, 0), 0, "the idle client was answered or closed first");
	/* It is closed after the idle timeout, not kept forever. */
	resp = read_all(idle);
	cr_assert_eq(resp[0], '\0', "%.300s", resp);
	free(resp);
	close(idle);
}

/* Hundreds of idle and slow connections (issue 10: seventeen took the old server down). */
Test(metrics, http_survives_hundreds_of_idle_connections, .timeout = 60)
{
	enum { IDLE = 300, SLOW = 200, SCRAPES = 20 };
	static int fds[IDLE + SLOW];

	w = open_index();
	int port = start_server(name);
	for (int i = 0; i < IDLE + SLOW; i++) {
		fds[i] = connect_to(port);
		if (i >= IDLE) /* slow: a request head that never ends */
			cr_assert_eq(send(fds[i], "GET /metrics HTTP/1.1\r\nX-Slow: ", 32, 0), 32);
	}
	for (int i = 0; i < SCRAPES; i++) {
		char *resp = get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
		cr_assert(status_is(resp, 200), "scrape %d under %d idle/slow connections: %.300s",
			  i, IDLE + SLOW, resp);
		tu_assert_has(resp, "kvidx_readers{state=\"active\"}");
		free(resp);
	}
	for (int i = 0; i < IDLE + SLOW; i++)
		close(fds[i]);
}

Test(metrics, http_index_appears_later)
{
	int port = start_server(name);

	char *resp = get(port, "GET /metrics HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 503), "%.300s", resp);
	tu_assert_has(resp, "cannot be read");
	free(resp);
	w = open_index();
	cr_assert_geq(kvidx_pod_add(w, "late", "m"), 0);
	resp = get(port, "GET /metrics HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	tu_assert_has(resp, "kvidx_pod_speculations_total{pod=\"late\",model=\"m\"} 0\n");
	free(resp);
}

Test(metrics, http_listen_addresses)
{
	static const char *bad[] = {
		"example.com:9100", "127.0.0.1",     "localhost",     "127.0.0.1:0",
		"127.0.0.1:65536",  "127.0.0.1:abc", "127.0.0.1:80x", "127.0.0.1:-1",
		":9100",            "[::1]9100",     "[::1:9100",     "127.1:9100",
		"0",                "",              NULL,
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(metrics_http_start(bad[i], name), -EINVAL, "%s accepted",
			     bad[i] ? bad[i] : "NULL");
	cr_assert_eq(metrics_http_start("127.0.0.1:9100", "../x"), -EINVAL);

	/* Every address (a pod's network), reached here through loopback. */
	char addr[64];
	int port = tu_free_port();
	snprintf(addr, sizeof(addr), "0.0.0.0:%d", port);
	cr_assert_eq(metrics_http_start(addr, name), 0, "%s", addr);
	char *resp = get(port, "GET /healthz HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	free(resp);
	/* An address this host does not have: the bind's error, not a parse error. */
	snprintf(addr, sizeof(addr), "192.0.2.1:%d", tu_free_port());
	cr_assert_eq(metrics_http_start(addr, name), -EADDRNOTAVAIL, "%s", addr);
	/* A bare port is loopback; localhost is served too. */
	port = tu_free_port();
	snprintf(addr, sizeof(addr), "%d", port);
	cr_assert_eq(metrics_http_start(addr, name), 0, "%s", addr);
	resp = get(port, "GET /other HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 404), "%.300s", resp);
	tu_assert_has(resp, "/healthz");
	free(resp);
	port = tu_free_port();
	snprintf(addr, sizeof(addr), "localhost:%d", port);
	cr_assert_eq(metrics_http_start(addr, name), 0, "%s", addr);
	/* The same port again: in use. */
	cr_assert_eq(metrics_http_start(addr, name), -EADDRINUSE);
	snprintf(addr, sizeof(addr), "[::1]:%d", tu_free_port());
	int rc = metrics_http_start(addr, name);
	cr_assert(rc == 0 || rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT, "%s: %s", addr,
		  strerror(-rc));
}

/* /healthz answers while the process lives, index or not; /readyz what the loop last said. */
Test(metrics, http_probes)
{
	int port = start_server(name); /* no index yet: /metrics is 503, /healthz is not */
	char *resp;

	resp = get(port, "GET /healthz HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	tu_assert_has(resp, "\r\n\r\nok\n");
	free(resp);
	resp = get(port, "HEAD /healthz HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	free(resp);
	resp = get(port, "GET /readyz HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 503), "%.300s", resp);
	tu_assert_has(resp, "\r\n\r\nnot ready: starting\n");
	free(resp);
	metrics_set_ready(false, "2 of 3 streams not connected (first: tcp://10.0.0.9:5557)");
	resp = get(port, "GET /readyz?verbose HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 503), "%.300s", resp);
	tu_assert_has(resp, "not ready: 2 of 3 streams not connected (first: tcp://10.0.0.9:5557)\n");
	free(resp);
	metrics_set_ready(true, "ignored");
	resp = get(port, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	cr_assert(status_is(resp, 200), "%.300s", resp);
	tu_assert_has(resp, "\r\n\r\nready\n");
	free(resp);
	resp = get(port, "POST /readyz HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
	cr_assert(status_is(resp, 405), "%.300s", resp);
	free(resp);
	resp = get(port, "GET /healthzx HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 404), "%.300s", resp);
	free(resp);
	resp = get(port, "GET /metrics HTTP/1.0\r\n\r\n");
	cr_assert(status_is(resp, 503), "%.300s", resp);
	free(resp);
}

/* ---- kvidx-dump --prometheus ---- */

#define run_dump(...) tu_run_tool("kvidx-dump", __VA_ARGS__)

Test(metrics, dump_prometheus)
{
	w = open_index();
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "llama-3");
	tu_set_pod_ctr(w, a, KV_PC_stale_expiries, 4);
	tu_add_latency(w, a, KV_HIST_CONFIRM, 180000, 10);

	struct tu_run r = run_dump("--name %s --prometheus", name);
	cr_assert_eq(r.status, 0, "%s", r.out);
	assert_exposition(r.out);
	tu_assert_has(r.out, "kvidx_pod_stale_expiries_total{pod=\"10.0.0.1:8000\",model=\"llama-3\"} "
			     "4\n");
	tu_assert_has(r.out, "kvidx_pod_confirmation_latency_seconds_count{pod=\"10.0.0.1:8000\","
			     "model=\"llama-3\"} 10\n");
	tu_assert_lacks(r.out, "index ");
	free(r.out);

	static const char *bad[] = { "--prometheus --json", "--json --prometheus",
				     "--prometheus --pods", "--prometheus --key 1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = run_dump("--name %s %s 2>&1", name, bad[i]);
		cr_assert_eq(r.status, 2, "%s: exit %d", bad[i], r.status);
		tu_assert_has(r.out, "--prometheus prints every metric on its own");
		free(r.out);
	}
	r = run_dump("--help");
	cr_assert_eq(r.status, 0);
	tu_assert_has(r.out, "  --prometheus ");
	free(r.out);

	kvidx_writer_close(w, true);
	w = NULL;
	r = run_dump("--name %s --prometheus 2>&1", name);
	cr_assert_eq(r.status, 1, "%s", r.out);
	tu_assert_has(r.out, "not found");
	free(r.out);
}

/*
 * examples/monitoring: the Prometheus rules (promtool check and test), the Grafana dashboard
 * (structure), and every metric either uses present in kvidx-dump --prometheus of an index
 * holding a pod with counters, histograms and a router worker (tests/check_monitoring.py),
 * and per instance (groupings keep instance, the dashboard selects by it, the writer and
 * target alerts exist). Then the checker is shown to fail: a metric missing from the
 * exposition, a broken dashboard, a rule that drops instance.
 */
Test(metrics, monitoring_rules_and_dashboard_use_real_metrics, .timeout = 60)
{
	char mpath[128], dir[128];
	struct tu_run r;

	w = open_index();
	int a = kvidx_pod_add(w, "10.0.0.1:8000", "llama-3");
	cr_assert_geq(a, 0);
	tu_add_latency(w, a, KV_HIST_CONFIRM, 180000, 10);
	tu_add_latency(w, a, KV_HIST_CONFIRM_RECENT, 180000, 10);
	tu_add_latency(w, a, KV_HIST_LAG, 20000, 10);
	tu_add_latency(w, a, KV_HIST_LAG_RECENT, 20000, 10);
	tu_add_latency(w, a, KV_HIST_CLASS(1), 180000, 10);
	/* A router worker: this test's own reader holds slot 0, the statistics name its pid. */
	struct kvidx_reader *me = kvidx_reader_open(name);
	cr_assert_not_null(me);
	struct kvidx_router *rt = kv_writer_router(w, 0);
	cr_assert_not_null(rt);
	rt->rt_ctr[KV_RT_routes] = 5;
	rt->rt_ctr[KV_RT_pid] = (uint64_t)getpid();
	kv_hist_add(rt->rt_hist, 150000);

	snprintf(mpath, sizeof(mpath), "/tmp/%s.prom", name);
	r = run_dump("--name %s --prometheus > %s", name, mpath);
	cr_assert_eq(r.status, 0, "%s", r.out);
	free(r.out);
	/* Issue 22, item 3: the exposition itself passes promtool's lint (no finding). */
	r = tu_run_sh("grep -c 'quantile=' %s && grep 'kvidx_router_info{' %s && "
		      "promtool check metrics < %s 2>&1", mpath, mpath, mpath);
	cr_assert_eq(r.status, 0, "promtool check metrics:\n%s", r.out);
	tu_assert_has(r.out, "slot=\"0\"");
	tu_assert_lacks(r.out, "should");
	free(r.out);
	r = tu_run_sh("/usr/bin/python3 tests/check_monitoring.py --metrics %s 2>&1", mpath);
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "monitoring: ok (");
	free(r.out);

	/* A family the rules use, missing from the exposition, is named. */
	r = tu_run_sh("grep -v kvidx_pod_seq_gaps_total %s > %s.less && /usr/bin/python3 "
		       "tests/check_monitoring.py --no-promtool --metrics %s.less 2>&1; "
		       "s=$?; rm -f %s.less; exit $s", mpath, mpath, mpath, mpath);
	cr_assert_eq(r.status, 1, "%s", r.out);
	tu_assert_has(r.out, "KvidxSequenceGaps: metric kvidx_pod_seq_gaps_total is not in kvidx's "
			     "exposition");
	free(r.out);

	/* A dashboard with overlapping panels, an undefined variable and a series not selected
	 * by instance is refused, and so is a rule aggregating the instances away. */
	snprintf(dir, sizeof(dir), "/tmp/%s.mon", name);
	r = tu_run_sh("mkdir -p %s && cp examples/monitoring/* %s/ && /usr/bin/python3 -c '"
		   "import json, sys; p = sys.argv[1]; d = json.load(open(p)); "
		   "d[\"panels\"][1][\"gridPos\"][\"x\"] = 6; "
		   "d[\"panels\"][0][\"targets\"][0][\"expr\"] += \" * $nosuch\"; "
		   "d[\"panels\"][1][\"targets\"][0][\"expr\"] = \"max(kvidx_pod_ttl_seconds)\"; "
		   "json.dump(d, open(p, \"w\"))' %s/kvidx-dashboard.json && "
		   "sed -i '0,/by (instance, pod, model)/s//by (pod, model)/' %s/kvidx-rules.yml && "
		   "/usr/bin/python3 "
		   "tests/check_monitoring.py --no-promtool --dir %s --metrics %s 2>&1; s=$?; "
		   "rm -rf %s; exit $s", dir, dir, dir, dir, dir, mpath, dir);
	cr_assert_eq(r.status, 1, "%s", r.out);
	tu_assert_has(r.out, "overlaps panel");
	tu_assert_has(r.out, "$nosuch is used but not defined in templating");
	tu_assert_has(r.out, "kvidx_pod_ttl_seconds is not selected by instance=~\"$instance\"");
	tu_assert_has(r.out, "kvidx:pod_routes:rate5m: 'by (pod, model)' drops instance");
	free(r.out);
	unlink(mpath);
	kvidx_reader_close(me);
}
