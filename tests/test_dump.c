/*
 * test_dump.c — the kvidx-dump tool: its JSON and text output against an index the test
 * builds with the writer API, --key and its exit status, and its errors (missing index,
 * version mismatch, bad flags) and --help.
 *
 * Each test creates its own index "t-dump-<pid>-<n>" and runs $KVIDX_BIN/kvidx-dump on it
 * while the writer is open; `make test` sets KVIDX_BIN. The JSON is checked twice: for
 * well-formedness by the strict parser of util_text.c (the dump escapes strings that come
 * from the segment, which is untrusted), and for content by exact substrings, which works
 * because the dump prints each entry, pod and reader on one line in a fixed member order.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "telemetry.h"
#include "util_index.h"
#include "util_run.h"
#include "util_text.h"

static char name[64];
static struct kvidx *w;

static void setup(void)
{
	tu_index_name(name, sizeof(name), "dump");
}

static void teardown(void)
{
	tu_index_remove(name, &w);
}

TestSuite(dump, .init = setup, .fini = teardown);

static struct kvidx *open_small(void)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 1000, .pods_per_key = 4 } };

	return tu_writer_open(name, &o);
}

/* ---- running the tool ---- */

/* Runs the dump on this test's index with extra arguments. */
static struct tu_run dump(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static struct tu_run dump(const char *fmt, ...)
{
	char args[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return tu_run_tool("kvidx-dump", "--name %s %s", name, args);
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0, len = strlen(needle);

	for (const char *p = strstr(hay, needle); p; p = strstr(p + len, needle))
		n++;
	return n;
}

/* The JSON checker must itself be able to fail. */
Test(dump, json_checker_rejects_bad_json)
{
	static const char *bad[] = { "{", "{\"a\": 1,}", "{\"a\": \"\x01\"}", "{\"a\": 01}",
				     "{\"a\": \"\\x\"}", "{\"a\": \"\xff\"}", "{} {}",
				     "{\"a\" 1}", "[1]" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert(!tu_json_object(bad[i], NULL), "accepted bad JSON %s", bad[i]);
	tu_assert_json("{\"a\": [1, -2.5e3, true, null, \"\\u00e9\xc3\xa9\"], \"b\": {}}");
}

/* ---- output ---- */

#define KEY_A 0x00000000000000a1ull
#define KEY_B 0x00000000000000b2ull
#define KEY_C 0xdeadbeefcafef00dull
#define KEY_D 0x8464eee8f2cf3412ull

/* Two pods, four keys: A on a (gpu and cpu), B on a and predicted for b, C on a, D
 * predicted for b only. */
static void populate(int *pa, int *pb)
{
	uint64_t now = kvidx_now_ns(), abc[3] = { KEY_A, KEY_B, KEY_C }, bd[2] = { KEY_B, KEY_D };
	int a, b;

	a = kvidx_pod_add(w, "10.0.0.1:8000", "llama-3-8b");
	b = kvidx_pod_add(w, "10.0.0.2:8000", NULL);
	cr_assert_eq(a, 0);
	cr_assert_eq(b, 1);
	cr_assert_eq(kvidx_store(w, a, abc, 3, KVIDX_TIER_GPU, now), 3);
	cr_assert_eq(kvidx_store(w, a, abc, 1, KVIDX_TIER_CPU, now), 1);
	cr_assert_eq(kvidx_speculate(w, b, bd, 2, now, 60000), 2);
	if (pa)
		*pa = a;
	if (pb)
		*pb = b;
}

Test(dump, entries_json)
{
	w = open_small();
	populate(NULL, NULL);

	struct tu_run r = dump("--json --entries=0");
	cr_assert_eq(r.status, 0, "exit %d:\n%s", r.status, r.out);
	tu_assert_json(r.out);
	/* Only the section asked for. */
	tu_assert_has(r.out, "\"entries\": [");
	tu_assert_lacks(r.out, "\"header\"");
	tu_assert_lacks(r.out, "\"stats\"");
	cr_assert_eq(count(r.out, "{\"key\": "), 4, "%s", r.out);
	cr_assert_eq(count(r.out, "\"pod\": \"10.0.0.1:8000\""), 3, "%s", r.out);
	cr_assert_eq(count(r.out, "\"pod\": \"10.0.0.2:8000\""), 2, "%s", r.out);
	cr_assert_eq(count(r.out, "\"state\": \"speculative\""), 2, "%s", r.out);
	cr_assert_eq(count(r.out, "\"state\": \"confirmed\""), 3, "%s", r.out);

	tu_assert_has(r.out, "{\"key\": \"0x00000000000000a1\", \"pods\": [{\"pod\": "
			     "\"10.0.0.1:8000\", \"pod_index\": 0, \"state\": \"confirmed\", "
			     "\"tiers\": [\"gpu\", \"cpu\"], \"age_ms\": ");
	tu_assert_has(r.out, "{\"key\": \"0xdeadbeefcafef00d\", \"pods\": [{\"pod\": "
			     "\"10.0.0.1:8000\", \"pod_index\": 0, \"state\": \"confirmed\", "
			     "\"tiers\": [\"gpu\"], \"age_ms\": ");
	/* B: confirmed on a and predicted for b, in one entry. */
	tu_assert_has(r.out, "{\"key\": \"0x00000000000000b2\", \"pods\": [{\"pod\": "
			     "\"10.0.0.1:8000\"");
	const char *b = strstr(r.out, "{\"key\": \"0x00000000000000b2\"");
	const char *eol = strchr(b, '\n');
	const char *bpred = "{\"pod\": \"10.0.0.2:8000\", \"pod_index\": 1, \"state\": "
			    "\"speculative\", \"tiers\": [\"gpu\"], \"age_ms\": ";
	cr_assert(memmem(b, (size_t)(eol - b), bpred, strlen(bpred)),
		  "B lacks b's prediction: %.*s", (int)(eol - b), b);
	/* D: a prediction, with its remaining lifetime (60 s TTL) and no confirmed record. */
	const char *d = strstr(r.out, "{\"key\": \"0x8464eee8f2cf3412\", \"pods\": [{\"pod\": "
				      "\"10.0.0.2:8000\", \"pod_index\": 1, \"state\": "
				      "\"speculative\", \"tiers\": [\"gpu\"], \"age_ms\": ");
	cr_assert_not_null(d, "%s", r.out);
	long long age = (long long)tu_number_after(d, "\"age_ms\": ");
	long long left = (long long)tu_number_after(d, "\"expires_in_ms\": ");
	cr_assert(age >= 0 && age < 30000, "age_ms %lld", age);
	cr_assert(left > 30000 && left <= 60000, "expires_in_ms %lld", left);
	cr_assert(left + age >= 59998 && left + age <= 60000, "age %lld + left %lld", age, left);
	/* Confirmed records carry no expiry. */
	cr_assert_eq(count(r.out, "\"expires_in_ms\": "), 2, "%s", r.out);
	free(r.out);
}

Test(dump, entries_text_and_limits)
{
	w = open_small();
	populate(NULL, NULL);

	struct tu_run r = dump("--entries");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "index ");
	tu_assert_has(r.out, "entries:\n");
	tu_assert_lacks(r.out, "header:");
	tu_assert_has(r.out, "  0x00000000000000a1  1 record\n");
	tu_assert_has(r.out, "  0x00000000000000b2  2 records\n");
	tu_assert_has(r.out, "confirmed    gpu,cpu");
	tu_assert_has(r.out, ", expires in ");
	tu_assert_has(r.out, "  4 keys shown; 0 keys without a live record skipped\n");
	free(r.out);

	r = dump("--json --entries=3");
	cr_assert_eq(r.status, 0);
	tu_assert_json(r.out);
	cr_assert_eq(count(r.out, "{\"key\": "), 3, "%s", r.out);
	free(r.out);
	r = dump("--entries=3");
	tu_assert_has(r.out, "3 keys shown (limit reached; --entries=0 lists all)");
	free(r.out);
	r = dump("--json --entries=1");
	cr_assert_eq(count(r.out, "{\"key\": "), 1, "%s", r.out);
	free(r.out);
}

/* A table of several walk steps (over 1024 slots each): every key once, limits exact. */
Test(dump, entries_across_walk_steps)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 4000, .pods_per_key = 2 } };
	static uint64_t keys[3000];
	char needle[64];

	w = tu_writer_open(name, &o);
	int a = kvidx_pod_add(w, "10.1.1.1:9000", NULL);
	for (int i = 0; i < 3000; i++)
		keys[i] = 0x1000000ull + (uint64_t)i * 7919;
	cr_assert_eq(kvidx_store(w, a, keys, 3000, KVIDX_TIER_DISK, kvidx_now_ns()),
		     3000);

	struct tu_run r = dump("--json --entries=0");
	cr_assert_eq(r.status, 0);
	tu_assert_json(r.out);
	cr_assert_eq(count(r.out, "{\"key\": "), 3000);
	cr_assert_eq(count(r.out, "\"tiers\": [\"disk\"]"), 3000);
	for (int i = 0; i < 3000; i += 499) {
		snprintf(needle, sizeof(needle), "{\"key\": \"0x%016llx\"",
			 (unsigned long long)keys[i]);
		cr_assert_eq(count(r.out, needle), 1, "key %d (%s)", i, needle);
	}
	free(r.out);
	r = dump("--json --entries=2500");
	cr_assert_eq(count(r.out, "{\"key\": "), 2500);
	free(r.out);
	r = dump("--json --entries");
	cr_assert_eq(count(r.out, "{\"key\": "), 100, "the default limit is 100");
	free(r.out);
}

/* The epoch the dump (the active slot of another process) announces, 0 if none. */
static uint64_t dump_announced(const struct kvidx_reader_slot *slots, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t state = ld_relaxed(&slots[i].rs_state);
		if (KV_RS_STATE(state) == KV_RS_ACTIVE && ld_relaxed(&slots[i].rs_pid) != getpid())
			return ld_relaxed(&slots[i].rs_ctr);
	}
	return 0;
}

/*
 * The dump prints outside its read-side sections: each time its output pipe is full it
 * blocks quiescent, so the writer keeps reclaiming and never has to expel it, however slowly
 * the output is consumed. The output is read in slices with pauses; in each pause the dump
 * must not stay inside a section.
 */
Test(dump, slow_consumer_never_holds_up_writer)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 20000, .pods_per_key = 2,
						.max_readers = 8 },
				       .stall_ms = 10000 }; /* only a hung dump reaches it */
	static uint64_t keys[15000], churn[100];
	char cmd[4200];

	w = tu_writer_open(name, &o);
	int a = kvidx_pod_add(w, "10.2.2.2:8000", NULL);
	for (int i = 0; i < 15000; i++)
		keys[i] = 0x5000000ull + (uint64_t)i * 104729;
	for (int i = 0; i < 100; i++)
		churn[i] = 0x9000000000ull + (uint64_t)i;
	cr_assert_eq(kvidx_store(w, a, keys, 15000, KVIDX_TIER_GPU, kvidx_now_ns()),
		     15000);
	cr_assert_eq(kvidx_store(w, a, churn, 100, KVIDX_TIER_GPU, kvidx_now_ns()),
		     100);
	struct kvidx_reader *rd = kvidx_reader_open(name);
	cr_assert_not_null(rd);
	const struct kvidx_stats *st = kv_reader_view(rd)->st;
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(rd);
	const struct kvidx_reader_slot *slots = (const void *)((const char *)ctl + sizeof(*ctl));
	uint64_t reclaimed0 = ld_relaxed(&st->reclaimed);

	snprintf(cmd, sizeof(cmd), "'%s' --name %s --json --entries=0", tu_tool_path("kvidx-dump"),
		 name);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p);
	struct tu_run r = { .out = malloc(1 << 16) };
	size_t cap = 1 << 16;
	cr_assert_not_null(r.out);
	for (int round = 0;; round++) {
		if (cap - r.len < 16385) {
			cap *= 2;
			r.out = realloc(r.out, cap);
			cr_assert_not_null(r.out);
		}
		size_t got = fread(r.out + r.len, 1, 16384, p);
		if (!got)
			break;
		r.len += got;
		/* Churn (each change retires an entry) and let the writer reclaim. */
		if (round % 2)
			kvidx_remove(w, a, churn, 100, KVIDX_TIER_CPU);
		else
			kvidx_store(w, a, churn, 100, KVIDX_TIER_CPU, kvidx_now_ns());
		kvidx_writer_tick(w, kvidx_now_ns());
		/* The dump has refilled the pipe and blocked: not inside a section (one caught
		 * in a short section leaves it; the writer does not tick meanwhile, so a section
		 * the dump leaves and enters again between two looks announces the same epoch
		 * only if the pipe still had room, and it fills). */
		usleep(3000);
		uint64_t e = dump_announced(slots, 8);
		if (e)
			cr_assert(TU_WAIT_FOR(dump_announced(slots, 8) != e, 15000),
				  "the dump stays in a read-side section while its output is "
				  "blocked (round %d)",
				  round);
	}
	r.out[r.len] = '\0';
	int stat = pclose(p);
	cr_assert(WIFEXITED(stat) && WEXITSTATUS(stat) == 0, "dump status %d", stat);
	cr_assert_gt(r.len, 1 << 20, "too little output (%zu bytes) to fill a pipe", r.len);
	tu_assert_json(r.out);
	/* Every key exactly once (the churned ones are updated in place). */
	cr_assert_eq(count(r.out, "{\"key\": "), 15100);
	free(r.out);

	kvidx_writer_tick(w, kvidx_now_ns());
	cr_assert_eq(ld_relaxed(&st->readers_expelled), 0, "the dump was expelled");
	cr_assert_gt(ld_relaxed(&st->reclaimed), reclaimed0 + 1000, "reclamation stalled");
	cr_assert_eq(ld_relaxed(&st->limbo), 0, "retired entries left in limbo");
	kvidx_reader_close(rd);
}

/* Records routers would not use are not listed: expired and paused predictions, records of
 * a cleared pod. Keys left with none are skipped and counted. */
Test(dump, hidden_records_not_listed)
{
	uint64_t old = kvidx_now_ns() - 10 * 1000000000ull, k1 = 0x11, k2 = 0x22, k3 = 0x33;

	w = open_small();
	int a = kvidx_pod_add(w, "a:1", NULL), b = kvidx_pod_add(w, "b:1", NULL);
	int c = kvidx_pod_add(w, "c:1", NULL);
	cr_assert_eq(kvidx_speculate(w, a, &k1, 1, old, 1000), 1);
	cr_assert_eq(kvidx_speculate(w, b, &k2, 1, kvidx_now_ns(), 60000), 1);
	cr_assert_eq(kvidx_pod_set_spec_paused(w, b, true), 0);
	cr_assert_eq(kvidx_store(w, c, &k3, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);
	cr_assert_eq(kvidx_clear_pod(w, c), 0);

	struct tu_run r = dump("--json --entries=0 --pods");
	cr_assert_eq(r.status, 0);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"entries\": []");
	tu_assert_has(r.out, "\"name\": \"b:1\", \"model\": \"\", \"generation\": 1, \"flags\": 1, "
			     "\"spec_paused\": true");
	tu_assert_has(r.out, "\"name\": \"a:1\", \"model\": \"\", \"generation\": 1, \"flags\": 0, "
			     "\"spec_paused\": false");
	tu_assert_has(r.out, "\"name\": \"c:1\", \"model\": \"\", \"generation\": 2,");
	free(r.out);
	r = dump("--entries=0");
	tu_assert_has(r.out, "  0 keys shown; 3 keys without a live record skipped\n");
	free(r.out);
	r = dump("--key 0x22 2>&1");
	cr_assert_eq(r.status, 1, "a paused prediction is absent:\n%s", r.out);
	free(r.out);

	/* Unpaused, b's prediction is back. */
	cr_assert_eq(kvidx_pod_set_spec_paused(w, b, false), 0);
	r = dump("--json --entries=0");
	cr_assert_eq(count(r.out, "{\"key\": "), 1, "%s", r.out);
	tu_assert_has(r.out, "{\"key\": \"0x0000000000000022\", \"pods\": [{\"pod\": \"b:1\", "
			     "\"pod_index\": 1, \"state\": \"speculative\"");
	free(r.out);
}

Test(dump, key_present_and_absent)
{
	w = open_small();
	populate(NULL, NULL);

	struct tu_run r = dump("--json --key 0x8464eee8f2cf3412");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"lookup\": {");
	tu_assert_has(r.out, "\"found\": true");
	tu_assert_has(r.out, "\"key\": \"0x8464eee8f2cf3412\"");
	tu_assert_has(r.out, "\"pods\": [{\"pod\": \"10.0.0.2:8000\", \"pod_index\": 1, \"state\": "
			     "\"speculative\", \"tiers\": [\"gpu\"], \"age_ms\": ");
	tu_assert_lacks(r.out, "\"header\"");
	free(r.out);

	/* Without 0x, in capitals. */
	r = dump("--key A1");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "  0x00000000000000a1  1 record\n");
	tu_assert_has(r.out, "10.0.0.1:8000");
	free(r.out);

	r = dump("--key 0xa2");
	cr_assert_eq(r.status, 1, "an absent key exits 1");
	tu_assert_has(r.out, "0x00000000000000a2  absent");
	free(r.out);
	r = dump("--json --key 0xa2");
	cr_assert_eq(r.status, 1);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"found\": false");
	tu_assert_has(r.out, "\"pods\": []");
	free(r.out);

	/* Together with other sections. */
	r = dump("--json --stats --key 0xdeadbeefcafef00d");
	cr_assert_eq(r.status, 0);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"stats\": {");
	tu_assert_has(r.out, "\"found\": true");
	free(r.out);
}

/* The text form of header_pods_readers_stats' index shows what its JSON form does. */
static void assert_text_form(void)
{
	struct tu_run r = dump("2>/dev/null");
	cr_assert_eq(r.status, 0);
	tu_assert_has(r.out, "header:\n");
	tu_assert_has(r.out, "  key algorithm        xxh64\n");
	tu_assert_has(r.out, "  capacity             1000 keys\n");
	tu_assert_has(r.out, "(alive, holds the writer lock)");
	tu_assert_has(r.out, "  [0] 10.0.0.1:8000  model \"llama-3-8b\"  generation 1  flags -\n"
			     "      events 7  remote_speculations 123456789012\n");
	tu_assert_has(r.out, "  [1] 10.0.0.2:8000  model \"\"  generation 1  flags spec-paused\n");
	tu_assert_has(r.out, "  2 active of 16\n");
	tu_assert_has(r.out, "  <- this dump\n");
	tu_assert_has(r.out, "  2 of 8 slots in use\n");
	tu_assert_has(r.out, "  keys                 4\n");
	tu_assert_has(r.out, "  registry_epoch       1\n");
	tu_assert_lacks(r.out, "entries:");
	free(r.out);
}

Test(dump, header_pods_readers_stats)
{
	struct kvidx_writer_opts o = { .geo = { .capacity = 1000, .pods_per_key = 4,
						.max_pods = 16, .max_readers = 8 },
				       .algo = KVIDX_KEY_XXH64, .seed = "s1", .block_size = 32 };
	char needle[256];
	int a, b;

	w = tu_writer_open(name, &o);
	populate(&a, &b);
	cr_assert_eq(kvidx_pod_set_spec_paused(w, b, true), 0);
	tu_set_pod_ctr(w, a, 3, 7);
	/* The last named word (remote_speculations: every index below KV_POD_NAMED has a name
	 * since it was named, so none is shown as ctr[N] by this build). */
	tu_set_pod_ctr(w, a, KV_POD_NAMED - 1, 123456789012ull);
	/* A reader of this process, as a router would hold, beside the dump's own. */
	struct kvidx_reader *rd = kvidx_reader_open(name);
	cr_assert_not_null(rd);
	struct kvidx_rec rec[4];
	cr_assert_eq(kvidx_lookup(rd, KEY_A, rec, 4), 1);
	cr_assert_eq(kvidx_lookup(rd, KEY_C, rec, 4), 1);

	struct tu_run r = dump("--json");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	tu_assert_lacks(r.out, "\"entries\"");

	/* Header. */
	tu_assert_has(r.out, "\"header\": {");
	char lv[64];
	snprintf(lv, sizeof(lv), "\"layout_version\": %u,", KV_LAYOUT_VERSION);
	tu_assert_has(r.out, lv);
	tu_assert_has(r.out, "\"generation\": 1,");
	tu_assert_has(r.out, "\"key_algo\": \"xxh64\",");
	tu_assert_has(r.out, "\"seed\": \"s1\",");
	tu_assert_has(r.out, "\"block_size\": 32,");
	tu_assert_has(r.out, "\"geometry\": {\"capacity\": 1000, \"records\": 2000, "
			     "\"pods_per_key\": 4, \"max_pods\": 16, \"max_readers\": 8, "
			     "\"nslots\": 1334, ");
	snprintf(needle, sizeof(needle), "\"writer_pid\": %d,\n", (int)getpid());
	tu_assert_has(r.out, needle);
	tu_assert_has(r.out, "\"writer_alive\": true,");
	tu_assert_has(r.out, "\"writer_lock_held\": true,");
	tu_assert_has(r.out, "\"state\": \"live\"");
	const struct kv_view *v = kv_reader_view(rd);
	snprintf(needle, sizeof(needle), "\"data_bytes\": %llu,",
		 (unsigned long long)v->hdr->dh_size);
	tu_assert_has(r.out, needle);
	cr_assert_geq(tu_number_after(r.out, "\"heartbeat_age_ms\": "), 0);

	/* Pods: both, with flags, and only the nonzero counters. */
	tu_assert_has(r.out, "{\"index\": 0, \"name\": \"10.0.0.1:8000\", \"model\": "
			     "\"llama-3-8b\", \"generation\": 1, \"flags\": 0, \"spec_paused\": "
			     "false, \"counters\": {\"events\": 7, \"remote_speculations\": "
			     "123456789012}, \"ranks\": []}");
	tu_assert_has(r.out, "{\"index\": 1, \"name\": \"10.0.0.2:8000\", \"model\": \"\", "
			     "\"generation\": 1, \"flags\": 1, \"spec_paused\": true, "
			     "\"counters\": {}, \"ranks\": []}");
	cr_assert_eq(count(r.out, "{\"index\": "), 2);

	/* Readers: this process's and the dump's own. */
	cr_assert_eq(count(r.out, "{\"slot\": "), 2, "%s", r.out);
	snprintf(needle, sizeof(needle), "\"pid\": %d, \"alive\": true, \"lock_held\": true, "
		 "\"epoch\": 0, \"lookups\": 2, \"expelled\": 0, ", (int)getpid());
	tu_assert_has(r.out, needle);
	cr_assert_eq(count(r.out, "\"self\": true}"), 1);
	cr_assert_eq(count(r.out, "\"self\": false}"), 1);
	const char *self = strstr(r.out, "\"self\": true}");
	const char *line = self;
	while (line > r.out && line[-1] != '\n')
		line--;
	snprintf(needle, sizeof(needle), "\"pid\": %d,", (int)getpid());
	cr_assert(!memmem(line, (size_t)(self - line), needle, strlen(needle)),
		  "the dump's own slot names the test's pid: %.*s", (int)(self - line), line);

	/* Stats: every counter by name, then the registry epoch. */
	tu_assert_has(r.out, "\"stats\": {");
	tu_assert_has(r.out, "\"keys\": 4,\n");
	tu_assert_has(r.out, "\"records\": 5,\n");
	tu_assert_has(r.out, "\"spec_records\": 2,\n");
	tu_assert_has(r.out, "\"speculations\": 2,\n");
	tu_assert_has(r.out, "\"store_failed\": 0,\n");
#define STAT_NAME(n) tu_assert_has(r.out, "\"" #n "\": ");
	KV_STATS(STAT_NAME)
#undef STAT_NAME
	tu_assert_has(r.out, "\"registry_epoch\": 1\n");
	free(r.out);

	assert_text_form();
	kvidx_reader_close(rd);

	/* Writer restart: a new generation, which the dump attaches to. */
	kvidx_writer_close(w, false);
	w = tu_writer_open(name, &o);
	r = dump("--json --header --entries=0");
	cr_assert_eq(r.status, 0);
	tu_assert_has(r.out, "\"generation\": 2,");
	tu_assert_has(r.out, "\"entries\": []");
	free(r.out);
}

/* Pod names come from the segment: whatever bytes they hold, the JSON stays valid and the
 * text prints no control character. */
Test(dump, untrusted_strings_escaped)
{
	uint64_t k = 0x77;

	w = open_small();
	int a = kvidx_pod_add(w, "evil\x1b[2J\"\\\n\x7f\xff\xc3\xa9:1", "m\x01\xe2\x80");
	cr_assert_geq(a, 0);
	cr_assert_eq(kvidx_store(w, a, &k, 1, KVIDX_TIER_GPU, kvidx_now_ns()), 1);

	struct tu_run r = dump("--json --pods --entries=0");
	cr_assert_eq(r.status, 0);
	tu_assert_json(r.out);
	tu_assert_has(r.out, "\"pod\": \"evil\\u001b[2J\\\"\\\\\\u000a\\u007f\\ufffd\xc3\xa9:1\"");
	tu_assert_has(r.out, "\"name\": \"evil\\u001b[2J\\\"\\\\\\u000a\\u007f\\ufffd\xc3\xa9:1\"");
	tu_assert_has(r.out, "\"model\": \"m\\u0001\\ufffd\\ufffd\"");
	free(r.out);

	r = dump("--pods --entries=0");
	cr_assert_eq(r.status, 0);
	for (size_t i = 0; i < r.len; i++)
		cr_assert(((unsigned char)r.out[i] >= 0x20 && r.out[i] != 0x7f) || r.out[i] == '\n',
			  "control byte 0x%02x at %zu in:\n%s", (unsigned char)r.out[i], i, r.out);
	tu_assert_has(r.out, "evil\\x1b[2J\\\"\\\\\\x0a\\x7f\\xff\xc3\xa9:1");
	free(r.out);
}

/* ---- errors and usage ---- */

Test(dump, missing_index)
{
	char want[256];

	struct tu_run r = dump("--json 2>&1");
	cr_assert_eq(r.status, 1);
	snprintf(want, sizeof(want),
		 "kvidx-dump: index '%s' not found (no /dev/shm/%s; is kvidx-ingestd running?)\n",
		 name, name);
	cr_assert_str_eq(r.out, want);
	free(r.out);
	r = dump("--key 1 2>/dev/null");
	cr_assert_eq(r.status, 1);
	cr_assert_str_eq(r.out, "", "nothing on stdout");
	free(r.out);
}

Test(dump, version_mismatch_and_corrupt)
{
	char path[128], want[256];
	struct stat sb;

	w = open_small();
	snprintf(path, sizeof(path), "/%s", name);
	int fd = shm_open(path, O_RDWR, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &sb), 0);
	struct kvidx_ctl_hdr *h = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE,
				       MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(h, MAP_FAILED);

	h->ch_stamp ^= 1ull << 48;
	struct tu_run r = dump("2>&1");
	cr_assert_eq(r.status, 1);
	snprintf(want, sizeof(want), "kvidx-dump: index '%s': %s\n", name,
		 kvidx_strerror(-KVIDX_EVERSION));
	cr_assert_str_eq(r.out, want);
	free(r.out);
	h->ch_stamp ^= 1ull << 48;

	uint64_t magic = h->ch_magic;
	h->ch_magic = 0x1234;
	r = dump("--json 2>&1");
	cr_assert_eq(r.status, 1);
	snprintf(want, sizeof(want), "kvidx-dump: index '%s': %s\n", name,
		 kvidx_strerror(-KVIDX_ECORRUPT));
	cr_assert_str_eq(r.out, want);
	free(r.out);
	h->ch_magic = magic;

	r = dump("--header");
	cr_assert_eq(r.status, 0, "restored header refused");
	free(r.out);
	munmap(h, (size_t)sb.st_size);
}

Test(dump, bad_usage)
{
	static const char *bad[] = { "--bogus",      "--entries=x", "--entries=-1", "--key",
				     "--key zz",     "--key 0x",    "--key 0x11112222333344445",
				     "extra",        "--entries 5", "--name ../x",
				     "--name ''",    "-q" };
	char args[128];

	w = open_small(); /* so that a flag wrongly accepted would exit 0, not 1 */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), "--name %s %s 2>/dev/null", name, bad[i]);
		struct tu_run r = tu_run_tool("kvidx-dump", "%s", args);
		cr_assert_eq(r.status, 2, "%s: exit %d", bad[i], r.status);
		cr_assert_str_eq(r.out, "", "%s: printed on stdout:\n%s", bad[i], r.out);
		free(r.out);
		snprintf(args, sizeof(args), "--name %s %s 2>&1", name, bad[i]);
		r = tu_run_tool("kvidx-dump", "%s", args);
		tu_assert_has(r.out, "Try 'kvidx-dump --help' for more information.\n");
		free(r.out);
	}
}

Test(dump, help)
{
	struct tu_run r = tu_run_tool("kvidx-dump", "--help 2>/dev/null");

	cr_assert_eq(r.status, 0);
	tu_assert_has(r.out, "Usage: kvidx-dump [OPTION]...\n");
	static const char *opts[] = { "--name NAME", "--json", "--header", "--pods",
				      "--readers", "--stats", "--entries[=N]", "--key HEX",
				      "--help", "Exit status" };
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		tu_assert_has(r.out, opts[i]);
	free(r.out);
	r = tu_run_tool("kvidx-dump", "-h");
	cr_assert_eq(r.status, 0);
	tu_assert_has(r.out, "Usage: kvidx-dump");
	free(r.out);
}

/* --score: what kvidx_score returns per pod, with the hybrid hit of a pod with KV-cache groups
 * (full attention, a sliding window of 2 blocks: its blocks 1-2 lost) and a one-group pod. */
Test(dump, score_rows_with_the_hybrid_hit)
{
	uint64_t k[4] = { 0xa1, 0xa2, 0xa3, 0xa4 }, now = kvidx_now_ns();
	struct kvidx_group fa = { KVIDX_GROUP_FULL, 16, 0 }, sw = { KVIDX_GROUP_SLIDING, 16, 17 };

	w = open_small();
	int hy = kvidx_pod_add(w, "10.0.0.1:8000", "m"), one = kvidx_pod_add(w, "10.0.0.2:8000", "m");
	cr_assert_eq(kvidx_pod_set_group(w, hy, 0, &fa), 0);
	cr_assert_eq(kvidx_pod_set_group(w, hy, 1, &sw), 0);
	cr_assert_eq(kvidx_store_groups(w, hy, k, 4, KVIDX_TIER_GPU, 1, now), 4);
	cr_assert_eq(kvidx_store_groups(w, hy, k, 1, KVIDX_TIER_GPU, 2, now), 1);
	cr_assert_eq(kvidx_store_groups(w, hy, k + 3, 1, KVIDX_TIER_GPU, 2, now), 1);
	cr_assert_eq(kvidx_store(w, one, k, 3, KVIDX_TIER_CPU, now), 3);
	struct kvidx_load l = { .inflight = 2, .prefill_tokens = 96 };
	cr_assert_eq(kvidx_pod_set_load(w, one, &l), 0);

	struct tu_run r = dump("--json --score 0xa1,a2,0xA3,0xa4,0xa5");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_json(r.out);
	/* Window 17 tokens: 1 block must be held back from the end; block 3 is: a hit of 4. */
	tu_assert_has(r.out, "\"score\": [");
	tu_assert_has(r.out, "{\"pod\": \"10.0.0.1:8000\", \"index\": 0, \"blocks\": 4, \"hit\": 4, "
			     "\"hybrid\": true, ");
	tu_assert_has(r.out, "{\"pod\": \"10.0.0.2:8000\", \"index\": 1, \"blocks\": 3, \"hit\": 3, "
			     "\"hybrid\": false, \"spec_blocks\": 0, \"score\": 2.4");
	tu_assert_has(r.out, "\"load\": {\"inflight\": 2, \"prefill_tokens\": 96, \"lost\": 0}");
	tu_assert_lacks(r.out, "\"header\"");
	free(r.out);

	/* The sliding window loses block 3 too: searching back from 4, no block held, and block
	 * 0's run is one block: the hit is 1 although full attention holds 4. */
	cr_assert_eq(kvidx_remove_groups(w, hy, k + 3, 1, 0, 2), 1);
	r = dump("--score 0xa1,0xa2,0xa3,0xa4");
	cr_assert_eq(r.status, 0, "%s", r.out);
	tu_assert_has(r.out, "score of 4 keys: 2 pods holding block 0\n");
	tu_assert_has(r.out, "  10.0.0.1:8000         blocks 4     hit 1     (hybrid) spec 0 ");
	tu_assert_has(r.out, "  10.0.0.2:8000         blocks 3     hit 3     spec 0 ");
	tu_assert_has(r.out, "load inflight 2 prefill_tokens 96\n");
	free(r.out);

	free(tu_expect_usage("kvidx-dump", "--score 0xa1,zz", "bad --score key 'zz'"));
}
