/*
 * test_discover.c — Criterion suite "discover": kvidx-ingestd finding its pods rather than
 * having them typed, end to end: DNS discovery against a real resolver (Debian's dnsmasq,
 * started by the test on a loopback port with a hosts file the test rewrites; SIGHUP makes it
 * re-read the file), the watched config file (--config-watch, no SIGHUP), and HTTP discovery
 * (--discover-http) against kvidx-fakepod serving vLLM's GET /kv_event_sources and SGLang's
 * GET /server_info (--kv-sources), with the answers' parser fed bad bodies too.
 *
 * The fake pods (util_ingestd.h) bind 127.0.0.2 and 127.0.0.3 at the same two ports, so the
 * addresses in the DNS answer are all that tells them apart, as on Kubernetes. ingestd asks
 * dnsmasq directly (--discover-dns-server 127.0.0.1:PORT): the system resolver's port 53 is
 * not the test's. Every check waits for what it expects with TU_DEADLINE_MS; nothing sleeps.
 */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util_http.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "util_run.h"
#include "dischttp.h"

#define MODEL "test-model"
#define BS 16
#define DNS_NAME "vllm-kv.test"

static char confpath[256], hostspath[256], dnslog[256];
static pid_t dns_pid = -1;
static struct tu_child fpod; /* the fake pod of the HTTP tests */

static void setup(void)
{
	tu_ingestd_setup("disc");
	fpod = (struct tu_child){ .pid = -1, .in = -1, .out = -1, .err = -1 };
	snprintf(confpath, sizeof(confpath), "/tmp/%s.conf", tu_ing.name);
	snprintf(hostspath, sizeof(hostspath), "/tmp/%s.hosts", tu_ing.name);
	snprintf(dnslog, sizeof(dnslog), "/tmp/%s.dnsmasq.log", tu_ing.name);
}

static void teardown(void)
{
	tu_child_kill(&fpod);
	if (dns_pid > 0) {
		kill(dns_pid, SIGKILL);
		waitpid(dns_pid, NULL, 0);
		dns_pid = -1;
	}
	tu_ingestd_teardown();
	unlink(confpath);
	unlink(hostspath);
	if (!getenv("KVIDX_KEEP_LOGS"))
		unlink(dnslog);
}

TestSuite(discover, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers -------------------------------------------------------------------------------- */

/* Replaces path's content with body (write and rename: readers never see half a file). */
static void write_file(const char *path, const char *body)
{
	char tmp[300];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	cr_assert_not_null(f);
	fputs(body, f);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(rename(tmp, path), 0);
}

/* Starts dnsmasq answering DNS_NAME from the hosts file only, on 127.0.0.1:port. */
static void dnsmasq_start(int port)
{
	char portarg[32], hosts[300];

	snprintf(portarg, sizeof(portarg), "--port=%d", port);
	snprintf(hosts, sizeof(hosts), "--addn-hosts=%s", hostspath);
	dns_pid = fork();
	cr_assert_geq(dns_pid, 0);
	if (dns_pid == 0) {
		int fd = open(dnslog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* --local: names under .test are answered from the hosts file alone, NXDOMAIN
		 * when absent there (as a Kubernetes DNS answers for a Service without pods). */
		execl("/usr/sbin/dnsmasq", "dnsmasq", "--conf-file=/dev/null", "--no-resolv",
		      "--no-hosts", hosts, portarg, "--listen-address=127.0.0.1", "--bind-interfaces",
		      "--keep-in-foreground", "--pid-file=", "--local=/test/", "--log-facility=-",
		      "--log-queries", (char *)NULL);
		_exit(127);
	}
}

/* New hosts file content, and dnsmasq told to re-read it. */
static void hosts_set(const char *body)
{
	write_file(hostspath, body);
	if (dns_pid > 0)
		cr_assert_eq(kill(dns_pid, SIGHUP), 0);
}

static int pod_index(const char *pod)
{
	return kvidx_reader_pod_find(tu_ing.rd, pod);
}

static int wait_pod(const char *pod)
{
	TU_EVENTUALLY(pod_index(pod) >= 0, "pod %s never registered; log: %s; dnsmasq: %s", pod,
		      tu_ing.log, dnslog);
	return pod_index(pod);
}

static bool holds(uint64_t key, int pod)
{
	struct kvidx_rec rec;
	int st = tu_rec_state(tu_ing.rd, key, pod, &rec);

	cr_assert(st >= 0, "lookup of 0x%016llx failed", (unsigned long long)key);
	return st != TU_ABSENT;
}

/* Publishes one BlockStored of BS tokens from base with engine hash h; returns its key. */
static uint64_t pub_block(struct tu_pub *p, uint64_t h, uint32_t base)
{
	const uint32_t *t = tu_toks(base, BS);
	struct kvw_event ev = tu_stored(&h, 1, false, 0, t, BS, BS);
	uint64_t k;

	tu_keys_of(MODEL, 0, t, BS, &k);
	tu_pub_events(p, &ev, 1);
	return k;
}

/* The daemon's log so far contains s. */
static bool log_has(const char *s)
{
	char buf[1 << 16];
	FILE *f = fopen(tu_ing.log, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, s) != NULL;
}

/* The value of the sample line "name " in the daemon's /metrics, -1 if absent. */
static long long metric(int port_n, const char *name)
{
	struct tu_http r;
	long long v = -1;
	char key[128];

	tu_http(tu_url(port_n, "/metrics"), NULL, NULL, 3000, &r);
	cr_assert_eq(r.status, 200, "GET /metrics: status %ld", r.status);
	snprintf(key, sizeof(key), "\n%s ", name);
	const char *p = strstr(r.body, key);
	if (p)
		v = atoll(p + strlen(key));
	tu_http_free(&r);
	return v;
}

#define START(...) tu_ingestd_start((const char *const[]){ __VA_ARGS__, NULL })

/* ---- DNS ------------------------------------------------------------------------------------ */

Test(discover, dns_adds_and_removes_pods)
{
	int ev_port = tu_port(1), rp_port = tu_port(2);
	char server[64], ports[64], metrics[64];
	struct tu_pub *a = tu_pub_open_at("kv@a@" MODEL, "127.0.0.2", ev_port, rp_port);
	struct tu_pub *b = tu_pub_open_at("kv@b@" MODEL, "127.0.0.3", ev_port, rp_port);

	hosts_set("127.0.0.2 " DNS_NAME "\n");
	dnsmasq_start(tu_port(0));
	snprintf(server, sizeof(server), "127.0.0.1:%d", tu_port(0));
	snprintf(ports, sizeof(ports), "%d,%d,8000", ev_port, rp_port);
	snprintf(metrics, sizeof(metrics), "127.0.0.1:%d", tu_port(3));
	START("--capacity", "16k", "--discover-dns", DNS_NAME, "--discover-ports", ports,
	      "--discover-dns-server", server, "--discover-interval", "200ms", "--metrics",
	      metrics);

	/* In the answer: subscribed, named IP:HTTP, its events indexed. */
	tu_pub_wait_subscribed(a);
	int pa = wait_pod("127.0.0.2:8000");
	uint64_t ka = pub_block(a, 11, 100000);
	TU_EVENTUALLY(holds(ka, pa), "pod A's block not indexed; log: %s", tu_ing.log);

	/* A second address: a second pod. */
	hosts_set("127.0.0.2 " DNS_NAME "\n127.0.0.3 " DNS_NAME "\n");
	tu_pub_wait_subscribed(b);
	int pb = wait_pod("127.0.0.3:8000");
	uint64_t kb = pub_block(b, 12, 101000);
	TU_EVENTUALLY(holds(kb, pb), "pod B's block not indexed; log: %s", tu_ing.log);
	cr_assert(holds(ka, pa));

	/* A's address leaves the answer: A is removed with its entries, B stays. */
	hosts_set("127.0.0.3 " DNS_NAME "\n");
	TU_EVENTUALLY(pod_index("127.0.0.2:8000") < 0, "pod A not removed; log: %s", tu_ing.log);
	cr_assert(!holds(ka, pa), "the removed pod's entries are still visible");
	cr_assert(holds(kb, pb));
	cr_assert(log_has("DNS " DNS_NAME ": unsubscribing tcp://127.0.0.2:"));

	/* No address at all (NXDOMAIN): B goes too. */
	hosts_set("");
	TU_EVENTUALLY(pod_index("127.0.0.3:8000") < 0, "pod B not removed; log: %s", tu_ing.log);
	cr_assert(!holds(kb, pb));

	cr_assert_eq(metric(3, "kvidx_discovery_pods_added_total"), 2);
	cr_assert_eq(metric(3, "kvidx_discovery_pods_removed_total"), 2);
	cr_assert_eq(metric(3, "kvidx_discovery_pods"), 0);
	cr_assert_geq(metric(3, "kvidx_discovery_resolutions_total"), 4);
}

Test(discover, dns_failure_keeps_pods)
{
	int ev_port = tu_port(1), rp_port = tu_port(2);
	char server[64], ports[64], metrics[64];
	struct tu_pub *a = tu_pub_open_at("kv@a@" MODEL, "127.0.0.2", ev_port, rp_port);

	hosts_set("127.0.0.2 " DNS_NAME "\n");
	dnsmasq_start(tu_port(0));
	snprintf(server, sizeof(server), "127.0.0.1:%d", tu_port(0));
	snprintf(ports, sizeof(ports), "%d,0,8000", ev_port);
	snprintf(metrics, sizeof(metrics), "127.0.0.1:%d", tu_port(3));
	START("--capacity", "16k", "--discover-dns", DNS_NAME, "--discover-ports", ports,
	      "--discover-dns-server", server, "--discover-interval", "200ms", "--metrics",
	      metrics);
	tu_pub_wait_subscribed(a);
	int pa = wait_pod("127.0.0.2:8000");
	uint64_t ka = pub_block(a, 21, 102000);
	TU_EVENTUALLY(holds(ka, pa), "pod A's block not indexed; log: %s", tu_ing.log);

	/* The resolver goes away: resolutions fail, the pod and its entries stay. */
	kill(dns_pid, SIGKILL);
	waitpid(dns_pid, NULL, 0);
	dns_pid = -1;
	TU_EVENTUALLY(log_has("DNS " DNS_NAME ": resolution failed"),
		      "failure not logged; log: %s", tu_ing.log);
	TU_EVENTUALLY(metric(3, "kvidx_discovery_resolution_failures_total") >= 1,
		      "failure not counted");
	cr_assert_eq(pod_index("127.0.0.2:8000"), pa);
	cr_assert(holds(ka, pa));
	cr_assert_eq(metric(3, "kvidx_discovery_pods"), 1);
	/* Events still flow. */
	uint64_t k2 = pub_block(a, 22, 103000);
	TU_EVENTUALLY(holds(k2, pa), "events stopped; log: %s", tu_ing.log);
}

Test(discover, dns_pod_attrs_ranks_and_model)
{
	int ev_port = tu_port(4), rp_port = tu_port(6);
	char server[64], ports[64];
	/* One pod of two data-parallel ranks: rank r at the ports + r. */
	struct tu_pub *r0 = tu_pub_open_at("kv@a@ignored", "127.0.0.2", ev_port, rp_port);
	struct tu_pub *r1 = tu_pub_open_at("kv@a@ignored", "127.0.0.2", ev_port + 1, rp_port + 1);

	hosts_set("127.0.0.2 " DNS_NAME "\n");
	dnsmasq_start(tu_port(0));
	snprintf(server, sizeof(server), "127.0.0.1:%d", tu_port(0));
	snprintf(ports, sizeof(ports), "%d,%d,8000", ev_port, rp_port);
	START("--capacity", "16k", "--discover-dns", DNS_NAME, "--discover-ports", ports,
	      "--discover-dns-server", server, "--discover-interval", "200ms",
	      "--discover-pod-attrs", "model=" MODEL ",dp-ranks=2");
	tu_pub_wait_subscribed(r0);
	tu_pub_wait_subscribed(r1);
	int pa = wait_pod("127.0.0.2:8000");
	/* Keys are computed for model= (the topic's model is overridden), on both ranks. */
	uint64_t k0 = pub_block(r0, 41, 106000), k1 = pub_block(r1, 42, 107000);
	TU_EVENTUALLY(holds(k0, pa) && holds(k1, pa), "ranks' blocks not indexed; log: %s",
		      tu_ing.log);
	cr_assert_eq(tu_ctr(pa, KV_PC_ranks), 2);

	/* Gone from the answer: the pod goes, both ranks' entries with it. */
	hosts_set("");
	TU_EVENTUALLY(pod_index("127.0.0.2:8000") < 0, "pod not removed; log: %s", tu_ing.log);
	cr_assert(!holds(k0, pa) && !holds(k1, pa));
}

/* ---- the watched config file ---------------------------------------------------------------- */

Test(discover, config_watch_adds_and_removes_pods)
{
	struct tu_pub *a = tu_pub_open("kv@10.0.0.1:8000@" MODEL);
	struct tu_pub *b = tu_pub_open("kv@10.0.0.2:8000@" MODEL);
	char conf[1024];

	snprintf(conf, sizeof(conf), "capacity = 16k\npod = %s,name=10.0.0.1:8000\n", a->ep);
	write_file(confpath, conf);
	START("--config", confpath, "--config-watch", "100ms");
	tu_pub_wait_subscribed(a);
	int pa = wait_pod("10.0.0.1:8000");
	uint64_t ka = pub_block(a, 31, 104000);
	TU_EVENTUALLY(holds(ka, pa), "pod A's block not indexed; log: %s", tu_ing.log);

	/* A added: both; no signal is sent. */
	snprintf(conf, sizeof(conf),
		 "capacity = 16k\npod = %s,name=10.0.0.1:8000\npod = %s,name=10.0.0.2:8000\n",
		 a->ep, b->ep);
	write_file(confpath, conf);
	tu_pub_wait_subscribed(b);
	int pb = wait_pod("10.0.0.2:8000");
	uint64_t kb = pub_block(b, 32, 105000);
	TU_EVENTUALLY(holds(kb, pb), "pod B's block not indexed; log: %s", tu_ing.log);

	/* A removed from the file: gone with its entries. */
	snprintf(conf, sizeof(conf), "capacity = 16k\npod = %s,name=10.0.0.2:8000\n", b->ep);
	write_file(confpath, conf);
	TU_EVENTUALLY(pod_index("10.0.0.1:8000") < 0, "pod A not removed; log: %s", tu_ing.log);
	cr_assert(!holds(ka, pa));
	cr_assert(holds(kb, pb));
	cr_assert(log_has("config watch: unsubscribing"));
}

Test(discover, flags_are_checked)
{
	static const struct { const char *args, *msg; } bad[] = {
		{ "--discover-dns x.test", "--discover-ports" },
		{ "--discover-dns x.test --discover-ports 1,2", "EVENTS,REPLAY,HTTP" },
		{ "--discover-dns x.test --discover-ports 1,0,3 --discover-dns-server ::1",
		  "IPv4[:PORT]" },
		{ "--pod tcp://127.0.0.1:1 --config-watch 1s", "--config FILE" },
		{ "--discover-dns x.test --discover-ports 1,0,3 --discover-pod-attrs name=a:1",
		  "model=, topic= or dp-ranks= only" },
		{ "--discover-dns x.test --discover-ports 65535,0,3 --discover-pod-attrs dp-ranks=2",
		  "no room" },
		{ "--discover-http 127.0.0.1", "HOST:PORT[,HOST:PORT...]" },
		{ "--discover-http 127.0.0.1:0", "HOST:PORT[,HOST:PORT...]" },
		{ "--discover-http a:1,", "HOST:PORT[,HOST:PORT...]" },
		{ "--discover-http-port 8000 --pod tcp://127.0.0.1:1", "goes with --discover-dns" },
		{ "--discover-dns x.test --discover-ports 1,0,3 --discover-http-port 8000",
		  "instead of --discover-ports" },
		{ "--discover-http 'a b:1'", "HOST:PORT[,HOST:PORT...]" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		free(tu_expect_usage("kvidx-ingestd", bad[i].args, bad[i].msg));
}

/* ---- HTTP ----------------------------------------------------------------------------------- */

static const char *hostport(int n)
{
	static char b[10][32];

	snprintf(b[n], sizeof b[n], "127.0.0.1:%d", tu_port(n));
	return b[n];
}

/* POSTs a completion of tokens base.. (n of them) to the fake pod on port n_http. */
static void complete(int n_http, const char *model, uint32_t base, size_t n)
{
	char body[4096];
	size_t k = (size_t)snprintf(body, sizeof body, "{\"model\":\"%s\",\"max_tokens\":1,"
				    "\"prompt\":[", model);
	struct tu_http r;

	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(body + k, sizeof body - k, "%s%u", i ? "," : "", base + (uint32_t)i);
	snprintf(body + k, sizeof body - k, "]}");
	tu_http(tu_url(n_http, "/v1/completions"), body, NULL, 5000, &r);
	cr_assert_eq(r.status, 200, "completion: %ld %s", r.status, r.body ? r.body : "");
	tu_http_free(&r);
}

/* Waits until each of the pod's n ranks has had a batch (the fake pod's heartbeats): its
 * subscription has reached the publisher, so what the pod publishes next arrives. */
static void streams_live(int p, unsigned n)
{
	for (unsigned r = 0; r < n; r++)
		TU_EVENTUALLY(tu_ctr(p, (enum kv_pod_ctr)KV_PC_RANK(r, KV_RC_batches)) > 0,
			      "rank %u hears nothing; log: %s", r, tu_ing.log);
}

/* vLLM's GET /kv_event_sources (two ranks, wildcard hosts): the pod is subscribed with both
 * ranks and its replay, named HOST:PORT, its blocks indexed; when it stops answering, it is
 * removed after 3 failed polls with its entries. */
Test(discover, http_vllm_sources_add_and_drop)
{
	const char *pod = hostport(1);
	char metrics[64];
	uint64_t k[2];

	tu_spawn(&fpod, "kvidx-fakepod", (const char *const[]){ "--http", pod, "--pub",
		 tu_endpoint(2), "--replay", tu_endpoint(5), "--dp-ranks", "2", "--kv-sources",
		 "vllm", "--prefill-ms", "1", "--event-delay-ms", "0", "--heartbeat", "50ms", NULL },
		 NULL, true);
	snprintf(metrics, sizeof(metrics), "127.0.0.1:%d", tu_port(8));
	START("--capacity", "16k", "--discover-http", pod, "--discover-interval", "100ms",
	      "--metrics", metrics);
	int p = wait_pod(pod);
	TU_EVENTUALLY(log_has("rank 1: subscribed to tcp://127.0.0.1:") &&
		      log_has(tu_endpoint(3)) && log_has(tu_endpoint(6)),
		      "rank 1 (port + 1, replay + 1) not subscribed; log: %s", tu_ing.log);
	streams_live(p, 2);
	tu_keys_of("fake-model", 0, tu_toks(5000, 2 * BS), 2 * BS, k);
	complete(1, "fake-model", 5000, 2 * BS);
	TU_EVENTUALLY(holds(k[1], p), "the discovered pod's blocks not indexed; log: %s",
		      tu_ing.log);
	cr_assert(holds(k[0], p));
	TU_EVENTUALLY(metric(8, "kvidx_discovery_http_pods") == 1, "gauge not 1");

	tu_child_kill(&fpod);
	TU_EVENTUALLY(pod_index(pod) < 0, "pod not removed; log: %s", tu_ing.log);
	cr_assert(!holds(k[0], p), "the removed pod's entries are still visible");
	cr_assert(log_has("HTTP discovery: unsubscribing tcp://"));
	/* Counted once the reconciliation that removed it is over. */
	TU_EVENTUALLY(metric(8, "kvidx_discovery_http_pods") == 0, "gauge not back to 0");
	cr_assert_eq(metric(8, "kvidx_discovery_http_pods_added_total"), 1);
	cr_assert_eq(metric(8, "kvidx_discovery_http_pods_removed_total"), 1, "removed %lld; log: %s",
		     metric(8, "kvidx_discovery_http_pods_removed_total"), tu_ing.log);
	cr_assert_geq(metric(8, "kvidx_discovery_http_failures_total"), 3);
}

/* SGLang's GET /server_info (after /kv_event_sources answers 404): kv_events gives the
 * endpoint (host *: the address's own), served_model_name the model. */
Test(discover, http_sglang_server_info)
{
	const char *pod = hostport(1);
	uint64_t k[1];

	tu_spawn(&fpod, "kvidx-fakepod", (const char *const[]){ "--http", pod, "--pub",
		 tu_endpoint(2), "--kv-sources", "sglang", "--model", "sg-model", "--prefill-ms",
		 "1", "--event-delay-ms", "0", "--heartbeat", "50ms", NULL }, NULL, true);
	START("--capacity", "16k", "--discover-http", pod, "--discover-interval", "100ms");
	int p = wait_pod(pod);
	streams_live(p, 1);
	tu_keys_of("sg-model", 0, tu_toks(6000, BS), BS, k);
	complete(1, "sg-model", 6000, BS);
	TU_EVENTUALLY(holds(k[0], p), "the SGLang pod's block not indexed; log: %s", tu_ing.log);
	cr_assert(log_has("HTTP discovery: subscribing tcp://127.0.0.1:"), "log: %s", tu_ing.log);
	tu_child_kill(&fpod);
}

/* --discover-dns with --discover-http-port: each address in the answer is asked over HTTP
 * (a pod with ports of its own); one that leaves the answer is dropped. */
Test(discover, http_dns_addresses_asked_over_http)
{
	char server[64], pod[64], pub[64], hport[16];

	hosts_set("127.0.0.2 " DNS_NAME "\n");
	dnsmasq_start(tu_port(0));
	snprintf(server, sizeof(server), "127.0.0.1:%d", tu_port(0));
	snprintf(pod, sizeof(pod), "127.0.0.2:%d", tu_port(1));
	snprintf(pub, sizeof(pub), "tcp://127.0.0.2:%d", tu_port(4));
	snprintf(hport, sizeof(hport), "%d", tu_port(1));
	tu_spawn(&fpod, "kvidx-fakepod", (const char *const[]){ "--http", pod, "--pub", pub,
		 "--kv-sources", "vllm", "--prefill-ms", "1", "--event-delay-ms", "0",
		 "--heartbeat", "50ms", NULL }, NULL, true);
	START("--capacity", "16k", "--discover-dns", DNS_NAME, "--discover-dns-server", server,
	      "--discover-http-port", hport, "--discover-interval", "100ms");
	int p = wait_pod(pod);
	streams_live(p, 1);
	uint64_t k;
	tu_keys_of("fake-model", 0, tu_toks(7000, BS), BS, &k);
	char body[1024];
	size_t n = (size_t)snprintf(body, sizeof(body), "{\"model\":\"fake-model\",\"max_tokens\":1,"
				    "\"prompt\":[");
	for (int i = 0; i < BS; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s%d", i ? "," : "", 7000 + i);
	snprintf(body + n, sizeof(body) - n, "]}");
	struct tu_http r;
	char url[128];
	snprintf(url, sizeof(url), "http://%s/v1/completions", pod);
	tu_http(url, body, NULL, 5000, &r);
	cr_assert_eq(r.status, 200, "%ld", r.status);
	tu_http_free(&r);
	TU_EVENTUALLY(holds(k, p), "the pod's block not indexed; log: %s", tu_ing.log);
	cr_assert(log_has("HTTP discovery: subscribing tcp://127.0.0.2:"), "log: %s", tu_ing.log);

	hosts_set("");
	TU_EVENTUALLY(pod_index(pod) < 0, "pod not dropped with its address; log: %s", tu_ing.log);
	cr_assert(!holds(k, p));
	tu_child_kill(&fpod);
}

/* The parser of the answers, on good and hostile bodies. */
Test(discover, http_answers_checked)
{
	struct ing_pod_spec s;
	char err[200];
	static const char *const bad_sources[] = {
		"not json",
		"{\"sources\": 3}",
		"[{\"data_parallel_rank\": 40, \"endpoint\": \"tcp://h:1\"}]",
		"[{\"data_parallel_rank\": 0, \"endpoint\": \"ipc:///x\"}]",
		"[{\"data_parallel_rank\": 0, \"endpoint\": \"tcp://h:70000\"}]",
		"[{\"data_parallel_rank\": 1, \"endpoint\": \"tcp://h:1\"}]",
		"[{\"data_parallel_rank\": 0, \"endpoint\": \"tcp://h:1\"},"
		" {\"data_parallel_rank\": 0, \"endpoint\": \"tcp://h:2\"}]",
		"[{\"data_parallel_rank\": 0, \"endpoint\": \"tcp://h:1\", \"topic\": 5}]",
	};

	for (size_t i = 0; i < sizeof(bad_sources) / sizeof(bad_sources[0]); i++)
		cr_assert_eq(dischttp_parse("kv_event_sources", bad_sources[i],
					    strlen(bad_sources[i]), "10.1.1.1", 8000, &s, err,
					    sizeof(err)), -1, "accepted: %s", bad_sources[i]);
	/* The bare array of the first vLLM version; ranks 0 and 2 on non-consecutive ports. */
	const char *arr = "[{\"data_parallel_rank\": 0, \"endpoint\": \"tcp://*:5557\","
			  " \"replay_endpoint\": null, \"topic\": \"kv-events\"},"
			  " {\"data_parallel_rank\": 1, \"endpoint\": \"tcp://*:6000\"}]";
	cr_assert_eq(dischttp_parse("kv_event_sources", arr, strlen(arr), "10.1.1.1", 8000, &s, err,
				    sizeof(err)), 1, "%s", err);
	cr_assert_str_eq(s.endpoint, "tcp://10.1.1.1:5557");
	cr_assert_str_eq(s.replay, "");
	cr_assert_str_eq(s.name, "10.1.1.1:8000");
	cr_assert(s.topic_set && !strcmp(s.topic, "kv-events"));
	cr_assert_eq(s.dp_ranks, 1);
	cr_assert(strstr(err, "not on consecutive ports"), "%s", err);
	const char *none = "{\"sources\": []}";
	cr_assert_eq(dischttp_parse("kv_event_sources", none, strlen(none), "h", 1, &s, err,
				    sizeof(err)), 0);
	/* SGLang: kv_events null is no publisher; a wrong publisher or dp_size is refused. */
	static const char *const sg_bad[] = {
		"[]",
		"{\"kv_events\": {\"publisher\": \"nats\", \"endpoint_port_base\": 5}}",
		"{\"kv_events\": {\"endpoint_port_base\": 0}}",
		"{\"kv_events\": {\"endpoint_port_base\": 5, \"dp_size\": 99}}",
		"{\"kv_events\": {\"endpoint_port_base\": 65535, \"dp_size\": 2}}",
		"{\"kv_events\": {\"endpoint_port_base\": 5, \"endpoint_host\": \"a/b\"}}",
	};
	for (size_t i = 0; i < sizeof(sg_bad) / sizeof(sg_bad[0]); i++)
		cr_assert_eq(dischttp_parse("server_info", sg_bad[i], strlen(sg_bad[i]), "h", 1, &s,
					    err, sizeof(err)), -1, "accepted: %s", sg_bad[i]);
	const char *sgn = "{\"kv_events\": null}";
	cr_assert_eq(dischttp_parse("server_info", sgn, strlen(sgn), "h", 1, &s, err, sizeof(err)), 0);
	const char *sg = "{\"served_model_name\": \"m1\", \"kv_events\": {\"publisher\": \"zmq\","
			 " \"endpoint_host\": \"10.2.2.2\", \"endpoint_port_base\": 5557,"
			 " \"topic\": \"\", \"block_size\": 32, \"dp_size\": 4}}";
	cr_assert_eq(dischttp_parse("server_info", sg, strlen(sg), "h", 30000, &s, err,
				    sizeof(err)), 1, "%s", err);
	cr_assert_str_eq(s.endpoint, "tcp://10.2.2.2:5557");
	cr_assert_eq(s.dp_ranks, 4);
	cr_assert_str_eq(s.model, "m1");
	cr_assert(!s.topic_set);
	cr_assert(strstr(err, "block_size 32"), "%s", err);
}
