/*
 * kvidx-dump — prints what an index holds: its header and geometry, its pods, the reader
 * registry, the writer's counters and, on request, the entries themselves or one key's
 * (docs/DESIGN.md "Shared memory" to "Counters and metrics"). Text for people, or one JSON
 * object for scripts and tests, or (--prometheus) the Prometheus exposition of
 * tools/common/prom.c.
 *
 * It attaches as an ordinary reader (kvidx_reader_open(): the data segment mapped read-only,
 * one registry slot, which the reader section marks as its own), so it never changes the
 * table. Everything read from the segments is untrusted: strings are escaped, every count is
 * bounded by geometry the library validated. Entries are walked in read-side sections of at
 * most WALK_CHUNK slots, each section's keys buffered and printed only after it has ended, so
 * a slow consumer of the output (a pager) never holds up the writer's reclamation, and keys
 * from a section that raced an expulsion are discarded, never printed. The listing is not a
 * snapshot: a key the writer moves while the walk goes on may be missed or shown twice.
 *
 * Exit status: 0 on success, 1 if the index cannot be read or the --key is absent, 2 on bad
 * usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attach.h"
#include "cli.h"
#include "escape.h"
#include "inspect.h"
#include "jsonw.h"
#include "kvidx.h"
#include "podsnap.h"
#include "prom.h"
#include "parse.h"
#include "segment.h"

#define PROG "kvidx-dump"
#define NS_PER_MS 1000000ull
#define WALK_CHUNK 1024u /* slots per kv_reader_walk() call: at most one read-side section */
#define DEFAULT_ENTRIES 100

/* Names of the per-pod counters, from telemetry.h's X-macro (KV_POD_CTRS); a word of the
 * named area without a name here (a newer writer's) prints as ctr[i]. */
static const char *pod_ctr_names[KV_POD_NAMED] = {
#define POD_CTR_NAME(n) [KV_PC_##n] = #n,
	KV_POD_CTRS(POD_CTR_NAME)
#undef POD_CTR_NAME
};

/* Names of the per-rank words (telemetry.h KV_RANK_CTRS). */
static const char *const rank_ctr_names[KV_RANK_WORDS] = {
#define RANK_CTR_NAME(n) [KV_RC_##n] = #n,
	KV_RANK_CTRS(RANK_CTR_NAME)
#undef RANK_CTR_NAME
};

enum {
	SEC_HEADER = 1 << 0,
	SEC_PODS = 1 << 1,
	SEC_READERS = 1 << 2,
	SEC_STATS = 1 << 3,
	SEC_ENTRIES = 1 << 4,
	SEC_KEY = 1 << 5,
	SEC_SCORE = 1 << 6,
	SEC_DEFAULT = SEC_HEADER | SEC_PODS | SEC_READERS | SEC_STATS,
};

/* ---- output ------------------------------------------------------------------------------ */

/* A key as the entries print it: 0x and 16 hex digits. */
static void jw_key(struct tc_jw *j, const char *key, uint64_t k)
{
	tc_jw_item(j, key);
	fprintf(j->f, "\"0x%016" PRIx64 "\"", k);
}

/* ---- the dump ---------------------------------------------------------------------------- */

struct pod_cache {
	char name[KVIDX_POD_NAME_MAX];
	int8_t state; /* 0: not looked up yet, 1: name valid, -1: no such pod */
};

struct dump {
	const char *name;
	bool json;
	struct tc_jw j;
	struct kvidx_reader *r;
	struct kvidx_info info;
	uint64_t now;
	int lock_fd;              /* the registry opened again, to test liveness locks; or -1 */
	int wlock_fd;             /* the writer lock file (owner only), or -1 */
	uint32_t nreaders;        /* registry slots it is safe to look at */
	struct pod_cache *pods;   /* names by pod index, looked up on first use */
	uint32_t npods;
	uint64_t pods_gen;        /* the generation whose names are cached */
};

static void err_msg(const struct dump *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A message on stderr naming the program and the index. */
static void err_msg(const struct dump *d, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": index '%s': ", d->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	putc('\n', stderr);
}

/* Whether a process pid exists (a kill(pid, 0) probe; EPERM means it exists as another
 * user). Pids from the segment are untrusted: 0 and negative ones would name process groups,
 * so they are never passed to kill(). */
static bool pid_alive(int32_t pid)
{
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* Whether an OFD lock is held on byte of the registry: 1 yes, 0 no, -1 unknown. This is the
 * library's own liveness test, which pid reuse cannot fool. */
static int lock_held(const struct dump *d, off_t byte)
{
	int fd = byte == KV_LOCK_WRITER ? d->wlock_fd : d->lock_fd;

	if (fd < 0)
		return -1;
	int rc = kv_lock_held(fd, byte);
	return rc < 0 ? -1 : rc;
}

/* Milliseconds from t to now, negative if t is in the future. */
static int64_t ms_since(uint64_t now, uint64_t t)
{
	return (int64_t)(now - t) / (int64_t)NS_PER_MS;
}

/* Prints "WHAT N ms ago" (or "in the future"); what may be "". */
static void text_age(const char *what, int64_t ms)
{
	printf("%s%s%" PRId64 " ms %s", what, *what ? " " : "", ms >= 0 ? ms : -ms,
	       ms >= 0 ? "ago" : "in the future");
}

static int pod_cache_reset(struct dump *d);

/* The name of pod index pod, cached per generation, or NULL if it is not (or no longer) in
 * use. A torn read (the writer renaming the pod right then) is retried once. */
static const char *pod_name(struct dump *d, unsigned pod)
{
	if (kv_reader_view(d->r)->gen != d->pods_gen && pod_cache_reset(d) < 0)
		return NULL;
	if (pod >= d->npods)
		return NULL;
	struct pod_cache *c = &d->pods[pod];
	if (c->state == 0) {
		int rc = kvidx_reader_pod(d->r, (int)pod, c->name, NULL);
		if (rc == -KVIDX_ERETRY)
			rc = kvidx_reader_pod(d->r, (int)pod, c->name, NULL);
		c->state = rc == 0 ? 1 : -1;
	}
	return c->state > 0 ? c->name : NULL;
}

/* Forgets the cached pod names, for a new generation, which may number its pods otherwise.
 * Returns 0 or -ENOMEM. */
static int pod_cache_reset(struct dump *d)
{
	uint32_t n = kv_reader_view(d->r)->max_pods;

	if (n != d->npods) {
		struct pod_cache *pc = calloc(n, sizeof(*pc));
		if (!pc)
			return -ENOMEM;
		free(d->pods);
		d->pods = pc;
		d->npods = n;
	} else {
		memset(d->pods, 0, (size_t)n * sizeof(*d->pods));
	}
	d->pods_gen = kv_reader_view(d->r)->gen;
	return 0;
}

static const char *data_state_name(uint64_t st)
{
	switch (st) {
	case KV_DATA_BUILDING:
		return "building";
	case KV_DATA_LIVE:
		return "live";
	case KV_DATA_RETIRED:
		return "retired";
	}
	return "unknown";
}

/* ---- header ---- */

static void text_row_u64(const char *label, uint64_t v, const char *unit)
{
	printf("  %-20s %" PRIu64 "%s%s\n", label, v, unit ? " " : "", unit ? unit : "");
}

static void dump_header(struct dump *d)
{
	const struct kv_view *v = kv_reader_view(d->r);
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(d->r);
	const struct kvidx_info *in = &d->info;
	uint64_t data_bytes = v->hdr->dh_size, ctl_bytes = ld_relaxed(&ctl->ch_size);
	uint64_t state = ld_acquire(&v->hdr->dh_state);
	double per_key = in->geo.capacity ? (double)data_bytes / (double)in->geo.capacity : 0;
	bool alive = pid_alive(in->writer_pid);
	int locked = lock_held(d, KV_LOCK_WRITER);
	int64_t hb = ms_since(d->now, in->heartbeat_ns), created = ms_since(d->now, in->created_ns);
	int64_t ctl_created = ms_since(d->now, ld_relaxed(&ctl->ch_created_ns));

	if (d->json) {
		struct tc_jw *j = &d->j;
		tc_jw_open(j, "header", '{');
		tc_jw_u64(j, "layout_version", in->layout_version);
		tc_jw_u64(j, "generation", in->generation);
		tc_jw_str(j, "key_algo", kvidx_key_algo_name(in->algo));
		tc_jw_str(j, "seed", in->seed);
		tc_jw_u64(j, "block_size", in->block_size);
		tc_jw_open(j, "geometry", '{');
		tc_jw_u64(j, "capacity", in->geo.capacity);
		tc_jw_u64(j, "records", in->geo.records);
		tc_jw_u64(j, "pods_per_key", in->geo.pods_per_key);
		tc_jw_u64(j, "max_pods", in->geo.max_pods);
		tc_jw_u64(j, "max_readers", in->geo.max_readers);
		tc_jw_u64(j, "nslots", v->nslots);
		tc_jw_u64(j, "max_probe", v->max_probe);
		tc_jw_u64(j, "arena_units", v->units);
		tc_jw_close(j, '}');
		tc_jw_u64(j, "data_bytes", data_bytes);
		tc_jw_u64(j, "registry_bytes", ctl_bytes);
		tc_jw_item(j, "bytes_per_key");
		fprintf(j->f, "%.1f", per_key);
		tc_jw_i64(j, "writer_pid", in->writer_pid);
		tc_jw_bool(j, "writer_alive", alive);
		tc_jw_item(j, "writer_lock_held");
		fputs(locked < 0 ? "null" : locked ? "true" : "false", j->f);
		tc_jw_i64(j, "heartbeat_age_ms", hb);
		tc_jw_i64(j, "created_age_ms", created);
		tc_jw_i64(j, "registry_created_age_ms", ctl_created);
		tc_jw_str(j, "state", data_state_name(state));
		tc_jw_close(j, '}');
		return;
	}
	printf("header:\n");
	text_row_u64("layout version", in->layout_version, NULL);
	text_row_u64("generation", in->generation, NULL);
	printf("  %-20s %s\n", "key algorithm", kvidx_key_algo_name(in->algo));
	printf("  %-20s \"", "seed");
	tc_text_str(stdout, in->seed);
	printf("\"\n");
	text_row_u64("block size", in->block_size, "tokens");
	text_row_u64("capacity", in->geo.capacity, "keys");
	text_row_u64("records", in->geo.records, NULL);
	text_row_u64("pods per key", in->geo.pods_per_key, NULL);
	text_row_u64("max pods", in->geo.max_pods, NULL);
	text_row_u64("max readers", in->geo.max_readers, NULL);
	printf("  %-20s %" PRIu64 " (+%" PRIu32 " probe overflow)\n", "slots", v->nslots,
	       v->max_probe);
	text_row_u64("arena units", v->units, "(16 bytes each)");
	printf("  %-20s %" PRIu64 " bytes (%.1f MiB), state %s\n", "data segment", data_bytes,
	       (double)data_bytes / (1024.0 * 1024.0), data_state_name(state));
	text_row_u64("registry segment", ctl_bytes, "bytes");
	printf("  %-20s %.1f at capacity\n", "bytes per key", per_key);
	printf("  %-20s %" PRId32 " (%s%s)\n", "writer pid", in->writer_pid,
	       alive ? "alive" : "not running",
	       locked < 0 ? "" : locked ? ", holds the writer lock" : ", writer lock free");
	printf("  %-20s ", "heartbeat");
	text_age("", hb);
	printf("\n  %-20s ", "data created");
	text_age("", created);
	printf("\n  %-20s ", "registry created");
	text_age("", ctl_created);
	printf("\n");
}

/* ---- pods ---- */

static void dump_ranks(struct dump *d, const struct kv_view *v, uint32_t i);

static void dump_pods(struct dump *d)
{
	const struct kv_view *v = kv_reader_view(d->r);
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];
	uint32_t active = 0;

	if (d->json)
		tc_jw_open(&d->j, "pods", '[');
	else
		printf("pods:\n");
	for (uint32_t i = 0; i < v->max_pods; i++) {
		/* Acquire pairs with the release stores of pd_word in writer.c. */
		uint64_t pw = ld_acquire(&v->pods[i].pd_word);
		if (KV_POD_STATE(pw) != KV_POD_ACTIVE)
			continue;
		int rc = kvidx_reader_pod(d->r, (int)i, name, model);
		if (rc == -KVIDX_ERETRY)
			rc = kvidx_reader_pod(d->r, (int)i, name, model);
		if (rc < 0)
			continue; /* removed (or renamed twice) since the state was read */
		unsigned fl = KV_POD_FLAGS(pw);
		active++;
		if (d->json) {
			struct tc_jw *j = &d->j;
			tc_jw_open(j, NULL, '{');
			tc_jw_u64(j, "index", i);
			tc_jw_str(j, "name", name);
			tc_jw_str(j, "model", model);
			tc_jw_u64(j, "generation", KV_POD_GEN(pw));
			tc_jw_u64(j, "flags", fl);
			tc_jw_bool(j, "spec_paused", fl & KV_POD_SPEC_PAUSED);
			tc_jw_open(j, "counters", '{');
		} else {
			printf("  [%" PRIu32 "] ", i);
			tc_text_str(stdout, name);
			printf("  model \"");
			tc_text_str(stdout, model);
			printf("\"  generation %u  flags %s", KV_POD_GEN(pw),
			       fl & KV_POD_SPEC_PAUSED ? "spec-paused" : "-");
			if (fl & ~KV_POD_SPEC_PAUSED)
				printf(" (0x%x)", fl);
			printf("\n");
		}
		unsigned shown = 0;
		for (unsigned c = 0; c < KV_POD_NAMED; c++) {
			uint64_t val = kv_tm_view_pod(v, (int)i, (enum kv_pod_ctr)c);
			char label[32];
			if (!val)
				continue;
			if (pod_ctr_names[c])
				snprintf(label, sizeof(label), "%s", pod_ctr_names[c]);
			else
				snprintf(label, sizeof(label), "ctr[%u]", c);
			if (d->json) {
				tc_jw_u64(&d->j, label, val);
			} else {
				printf("%s%s %" PRIu64, shown % 6 ? "  " : "      ", label, val);
				if (shown % 6 == 5)
					printf("\n");
			}
			shown++;
		}
		if (d->json)
			tc_jw_close(&d->j, '}');
		else if (shown % 6)
			printf("\n");
		dump_ranks(d, v, i);
		if (d->json)
			tc_jw_close(&d->j, '}');
	}
	if (d->json)
		tc_jw_close(&d->j, ']');
	else
		printf("  %" PRIu32 " active of %" PRIu32 "\n", active, v->max_pods);
}

/*
 * Per-rank health of pod i (data-parallel pods, telemetry.h KV_RANK_CTRS): JSON always lists the
 * ranks in use; the text form only when there is more than one.
 */
static void dump_ranks(struct dump *d, const struct kv_view *v, uint32_t i)
{
	uint64_t now = kvidx_now_ns();
	unsigned inuse = 0;

	for (unsigned r = 0; r < KV_POD_RANKS; r++)
		inuse += (kv_tm_view_rank(v, (int)i, r, KV_RC_flags) & KV_RANK_IN_USE) != 0;
	if (d->json)
		tc_jw_open(&d->j, "ranks", '[');
	else if (inuse < 2)
		return;
	for (unsigned r = 0; r < KV_POD_RANKS; r++) {
		uint64_t fl = kv_tm_view_rank(v, (int)i, r, KV_RC_flags);
		uint64_t last = kv_tm_view_rank(v, (int)i, r, KV_RC_last_event_ns);

		if (!(fl & KV_RANK_IN_USE))
			continue;
		if (d->json) {
			tc_jw_open(&d->j, NULL, '{');
			tc_jw_u64(&d->j, "rank", r);
			tc_jw_bool(&d->j, "connected", fl & KV_RANK_CONNECTED);
			tc_jw_bool(&d->j, "replaying", fl & KV_RANK_REPLAYING);
		} else {
			printf("      rank %u: %s%s", r, fl & KV_RANK_CONNECTED ? "connected" : "down",
			       fl & KV_RANK_REPLAYING ? " replaying" : "");
		}
		for (unsigned w = KV_RC_flags + 1; w < KV_RC_COUNT; w++) {
			uint64_t val = kv_tm_view_rank(v, (int)i, r, (enum kv_rank_ctr)w);

			if (d->json)
				tc_jw_u64(&d->j, rank_ctr_names[w], val);
			else if (w != KV_RC_last_event_ns)
				printf("  %s %" PRIu64, rank_ctr_names[w], val);
		}
		if (d->json) {
			tc_jw_close(&d->j, '}');
		} else if (last && now >= last) {
			printf("  last event %" PRIu64 " ms ago\n", (uint64_t)((now - last) / NS_PER_MS));
		} else {
			printf("  no event yet\n");
		}
	}
	if (d->json)
		tc_jw_close(&d->j, ']');
}

/* ---- readers ---- */

static void dump_readers(struct dump *d)
{
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(d->r);
	/* The slots follow the header (kv_ctl_validate() checked ch_slots_off at attach; the
	 * field itself is in a segment every reader can write, so it is not read again). */
	const struct kvidx_reader_slot *slots = (const void *)((const char *)ctl + sizeof(*ctl));
	int self = kv_reader_slot_index(d->r);
	uint32_t used = 0;

	if (d->json)
		tc_jw_open(&d->j, "readers", '[');
	else
		printf("readers:\n");
	for (uint32_t i = 0; i < d->nreaders; i++) {
		const struct kvidx_reader_slot *s = &slots[i];
		uint64_t st = ld_acquire(&s->rs_state);
		unsigned kind = KV_RS_STATE(st);
		if (kind == KV_RS_FREE)
			continue;
		const char *state = kind == KV_RS_ACTIVE ? "active" :
				    kind == KV_RS_EXPELLED ? "expelled" : "unknown";
		int32_t pid = ld_relaxed(&s->rs_pid);
		uint64_t epoch = ld_relaxed(&s->rs_ctr), lookups = ld_relaxed(&s->rs_lookups);
		uint64_t expelled = ld_relaxed(&s->rs_expelled);
		int64_t claimed = ms_since(d->now, ld_relaxed(&s->rs_claimed_ns));
		bool alive = pid_alive(pid);
		int locked = lock_held(d, KV_LOCK_READER(i));
		used++;
		if (d->json) {
			struct tc_jw *j = &d->j;
			tc_jw_open(j, NULL, '{');
			tc_jw_u64(j, "slot", i);
			tc_jw_str(j, "state", state);
			tc_jw_u64(j, "claim_gen", KV_RS_GEN(st));
			tc_jw_i64(j, "pid", pid);
			tc_jw_bool(j, "alive", alive);
			tc_jw_item(j, "lock_held");
			fputs(locked < 0 ? "null" : locked ? "true" : "false", j->f);
			tc_jw_u64(j, "epoch", epoch);
			tc_jw_u64(j, "lookups", lookups);
			tc_jw_u64(j, "expelled", expelled);
			tc_jw_i64(j, "claimed_age_ms", claimed);
			tc_jw_bool(j, "self", (int)i == self);
			tc_jw_close(j, '}');
		} else {
			printf("  [%" PRIu32 "] %-8s pid %" PRId32 " (%s%s)  epoch %" PRIu64 "%s  "
			       "lookups %" PRIu64 "  expelled %" PRIu64 " time%s  ",
			       i, state, pid, alive ? "alive" : "not running",
			       locked < 0 ? "" : locked ? ", slot locked" : ", slot lock free",
			       epoch, epoch ? "" : " (quiescent)", lookups, expelled,
			       expelled == 1 ? "" : "s");
			text_age("claimed", claimed);
			printf("%s\n", (int)i == self ? "  <- this dump" : "");
		}
	}
	if (d->json)
		tc_jw_close(&d->j, ']');
	else
		printf("  %" PRIu32 " of %" PRIu32 " slots in use\n", used, d->nreaders);
}

/* ---- router workers ---- */

static const char *const router_ctr_names[KV_RT_COUNT] = {
#define RT_CTR_NAME(n) [KV_RT_##n] = #n,
	KV_ROUTER_CTRS(RT_CTR_NAME)
#undef RT_CTR_NAME
};

/* Per registry slot statistics the writer keeps in the data segment (struct kvidx_router),
 * for the slots that committed routes or reported outcomes; with the readers section. */
static void dump_routers(struct dump *d)
{
	const struct kv_view *v = kv_reader_view(d->r);
	uint32_t shown = 0;

	if (d->json)
		tc_jw_open(&d->j, "routers", '[');
	else
		printf("router workers (per registry slot, writer-kept):\n");
	for (uint32_t s = 0; s < v->max_readers; s++) {
		struct kv_tm_hist_ro rt = kv_tm_view_router_hist(v, (int)s);
		uint64_t c[KV_RT_COUNT], q[3] = { 0 };
		bool lat;
		if (!tc_router_snapshot(v, s, c))
			continue;
		lat = kv_tm_ro_quantile(rt, 0.5, &q[0]) == 0 &&
		      kv_tm_ro_quantile(rt, 0.95, &q[1]) == 0 &&
		      kv_tm_ro_quantile(rt, 0.99, &q[2]) == 0;
		shown++;
		if (d->json) {
			tc_jw_open(&d->j, NULL, '{');
			tc_jw_u64(&d->j, "slot", s);
			for (unsigned k = 0; k < KV_RT_COUNT; k++)
				tc_jw_u64(&d->j, router_ctr_names[k], c[k]);
			if (lat) {
				tc_jw_u64(&d->j, "latency_p50_us", q[0]);
				tc_jw_u64(&d->j, "latency_p95_us", q[1]);
				tc_jw_u64(&d->j, "latency_p99_us", q[2]);
			}
			tc_jw_close(&d->j, '}');
			continue;
		}
		printf("  [%" PRIu32 "]", s);
		for (unsigned k = 0; k < KV_RT_COUNT; k++)
			if (k != KV_RT_last_route_ns)
				printf(" %s %" PRIu64, router_ctr_names[k], c[k]);
		if (lat)
			printf(" latency_us p50 %" PRIu64 " p95 %" PRIu64 " p99 %" PRIu64, q[0], q[1],
			       q[2]);
		printf("\n");
	}
	if (d->json)
		tc_jw_close(&d->j, ']');
	else if (!shown)
		printf("  (none committed yet)\n");
}

/* ---- stats ---- */

static void dump_stats(struct dump *d)
{
	const struct kv_view *v = kv_reader_view(d->r);
	uint64_t epoch = ld_relaxed(&kv_reader_idx(d->r)->ih_epoch);

	if (d->json) {
		tc_jw_open(&d->j, "stats", '{');
#define STAT_JSON(n) tc_jw_u64(&d->j, #n, kv_tm_view_stat(v, KV_ST_##n));
		KV_STATS(STAT_JSON)
#undef STAT_JSON
		tc_jw_u64(&d->j, "registry_epoch", epoch);
		tc_jw_close(&d->j, '}');
		return;
	}
	printf("stats:\n");
#define STAT_TEXT(n) printf("  %-20s %" PRIu64 "\n", #n, kv_tm_view_stat(v, KV_ST_##n));
	KV_STATS(STAT_TEXT)
#undef STAT_TEXT
	printf("  %-20s %" PRIu64 "\n", "registry_epoch", epoch);
}

/* ---- entries and --key ---- */

/* One key's records, in the format the entries and --key share. */
static void print_entry(struct dump *d, uint64_t key, const struct kvidx_rec *recs, int n,
			uint64_t now)
{
	if (d->json) {
		struct tc_jw *j = &d->j;
		jw_key(j, "key", key);
		tc_jw_open(j, "pods", '[');
		for (int i = 0; i < n; i++) {
			const struct kvidx_rec *rc = &recs[i];
			tc_jw_open(j, NULL, '{');
			tc_jw_str(j, "pod", pod_name(d, rc->pod));
			tc_jw_u64(j, "pod_index", rc->pod);
			tc_jw_str(j, "state", rc->speculative ? "speculative" : "confirmed");
			tc_jw_open(j, "tiers", '[');
			for (unsigned b = 0; b < 8; b++) {
				char other[8];
				if (!(rc->tiers & (1u << b)))
					continue;
				if (b < KVIDX_NTIERS) {
					enum kvidx_tier t = (enum kvidx_tier)(1u << b);
					tc_jw_str(j, NULL, kvidx_tier_name(t));
				} else {
					snprintf(other, sizeof(other), "bit%u", b);
					tc_jw_str(j, NULL, other);
				}
			}
			tc_jw_close(j, ']');
			tc_jw_i64(j, "age_ms", ms_since(now, rc->t_ns));
			if (rc->speculative)
				tc_jw_i64(j, "expires_in_ms", -ms_since(now, rc->expires_ns));
			tc_jw_close(j, '}');
		}
		tc_jw_close(j, ']');
		return;
	}
	printf("  0x%016" PRIx64 "  %d record%s\n", key, n, n == 1 ? "" : "s");
	for (int i = 0; i < n; i++) {
		const struct kvidx_rec *rc = &recs[i];
		const char *pn = pod_name(d, rc->pod);
		size_t cols;
		printf("      ");
		if (pn)
			cols = tc_text_str(stdout, pn);
		else
			cols = (size_t)printf("#%u (gone)", rc->pod);
		printf("%*s  %-11s  ", cols < 21 ? (int)(21 - cols) : 0, "",
		       rc->speculative ? "speculative" : "confirmed");
		cols = 0;
		for (unsigned b = 0; b < 8; b++) {
			if (!(rc->tiers & (1u << b)))
				continue;
			if (b < KVIDX_NTIERS)
				cols += (size_t)printf("%s%s", cols ? "," : "",
						       kvidx_tier_name((enum kvidx_tier)(1u << b)));
			else
				cols += (size_t)printf("%sbit%u", cols ? "," : "", b);
		}
		if (!cols)
			cols = (size_t)printf("-");
		printf("%*s  ", cols < 14 ? (int)(14 - cols) : 0, "");
		if (rc->speculative) {
			text_age("created", ms_since(now, rc->t_ns));
			printf(", expires in %" PRId64 " ms\n", -ms_since(now, rc->expires_ns));
		} else {
			text_age("stored", ms_since(now, rc->t_ns));
			printf("\n");
		}
	}
}

/* The keys of one walk step, gathered inside its read-side section and printed after it. */
struct walk_buf {
	uint64_t keys[WALK_CHUNK];
	int nrec[WALK_CHUNK];
	struct kvidx_rec recs[WALK_CHUNK][KV_MAX_PPK];
	uint32_t n;
	uint64_t hidden;  /* keys with no visible record (expired, paused, cleared pods) */
	bool overflow;    /* more keys than one step can hold: the walk's contract broke */
};

static void walk_collect(void *arg, uint64_t key, const struct kvidx_rec *recs, int n)
{
	struct walk_buf *b = arg;

	if (n <= 0) {
		b->hidden++;
		return;
	}
	if (b->n == WALK_CHUNK) {
		b->overflow = true;
		return;
	}
	if (n > KV_MAX_PPK)
		n = KV_MAX_PPK;
	b->keys[b->n] = key;
	b->nrec[b->n] = n;
	memcpy(b->recs[b->n], recs, (size_t)n * sizeof(*recs));
	b->n++;
}

/* Lists up to limit keys (0: all). Returns 0, or a negative error after reporting it. */
static int dump_entries(struct dump *d, uint64_t limit)
{
	const struct kv_view *v = kv_reader_view(d->r);
	uint64_t gen0 = v->gen, shown = 0, hidden = 0, end = v->nslots + v->max_probe, pos;
	struct walk_buf *b = malloc(sizeof(*b));
	bool truncated = false;
	int64_t rc = 0;

	if (!b) {
		err_msg(d, "out of memory for the entry walk");
		return -ENOMEM;
	}
	if (d->json)
		tc_jw_open(&d->j, "entries", '[');
	else
		printf("entries:\n");
	for (pos = 0; pos < end && !truncated; pos += WALK_CHUNK) {
		uint64_t now = 0;
		/* A step that raced an expulsion reports -KVIDX_ERETRY and its keys may come from
		 * reused memory: they are dropped and the step is walked once more. */
		for (int tries = 0; tries < 2; tries++) {
			b->n = 0;
			b->hidden = 0;
			b->overflow = false;
			now = kvidx_now_ns();
			rc = kv_reader_walk(d->r, pos, WALK_CHUNK, now, walk_collect, b);
			if (rc != -KVIDX_ERETRY)
				break;
		}
		if (rc >= 0 && b->overflow)
			rc = -KVIDX_ECORRUPT;
		if (rc < 0)
			break;
		v = kv_reader_view(d->r);
		if (v->gen != gen0) {
			/* The writer published a new generation (restart or growth): positions now
			 * index a different table. Say so rather than mix the two silently. */
			fprintf(stderr,
				PROG ": index '%s': generation changed from %" PRIu64 " to %" PRIu64
				     " during the walk; the listing mixes both\n",
				d->name, gen0, v->gen);
			gen0 = v->gen;
			end = v->nslots + v->max_probe;
		}
		hidden += b->hidden;
		for (uint32_t i = 0; i < b->n; i++) {
			if (limit && shown == limit) {
				truncated = true;
				break;
			}
			if (d->json)
				tc_jw_open(&d->j, NULL, '{');
			print_entry(d, b->keys[i], b->recs[i], b->nrec[i], now);
			if (d->json)
				tc_jw_close(&d->j, '}');
			shown++;
		}
		if (limit && shown == limit && pos + WALK_CHUNK < end)
			truncated = true; /* more slots left unvisited: there may be more keys */
	}
	free(b);
	if (d->json)
		tc_jw_close(&d->j, ']');
	else
		printf("  %" PRIu64 " key%s shown%s; %" PRIu64 " key%s without a live record "
		       "skipped\n",
		       shown, shown == 1 ? "" : "s",
		       truncated ? " (limit reached; --entries=0 lists all)" : "", hidden,
		       hidden == 1 ? "" : "s");
	if (rc < 0) {
		err_msg(d, "walking the entries: %s", kvidx_strerror((int)rc));
		return (int)rc;
	}
	return 0;
}

/* Looks key up. Returns 1 if present, 0 if absent, or a negative error after reporting it. */
static int dump_key(struct dump *d, uint64_t key)
{
	struct kvidx_rec recs[KV_MAX_PPK];
	uint64_t now = kvidx_now_ns();
	int n = kvidx_lookup(d->r, key, recs, KV_MAX_PPK);

	if (n == -KVIDX_ERETRY) {
		now = kvidx_now_ns();
		n = kvidx_lookup(d->r, key, recs, KV_MAX_PPK);
	}
	if (n < 0) {
		err_msg(d, "looking up 0x%016" PRIx64 ": %s", key, kvidx_strerror(n));
		return n;
	}
	if (d->json) {
		tc_jw_open(&d->j, "lookup", '{');
		tc_jw_bool(&d->j, "found", n > 0);
		print_entry(d, key, recs, n, now);
		tc_jw_close(&d->j, '}');
	} else if (n == 0) {
		printf("key:\n  0x%016" PRIx64 "  absent\n", key);
	} else {
		printf("key:\n");
		print_entry(d, key, recs, n, now);
	}
	return n > 0;
}

/* ---- --score ---- */

#define MAX_SCORE_KEYS 65536

/* Parses "KEY,KEY,..." (hex, optional 0x) into a fresh array; exits 2 on a bad one. */
static uint64_t *parse_score_keys(const char *arg, size_t *n)
{
	size_t cap = 1;
	uint64_t *keys;
	char *copy = strdup(arg), *save = NULL, *tok;

	for (const char *c = arg; *c; c++)
		cap += *c == ',';
	keys = calloc(cap, sizeof(*keys));
	if (!copy || !keys)
		tc_usage_error("--score: out of memory");
	*n = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!tc_parse_hex64(tok, &keys[*n]))
			tc_usage_error("bad --score key '%s': expected a comma-separated list of 1 to "
				       "16 hex digits each, optionally prefixed by 0x", tok);
		(*n)++;
	}
	if (*n == 0 || *n > MAX_SCORE_KEYS)
		tc_usage_error("--score takes 1 to %d keys, %zu given", MAX_SCORE_KEYS, *n);
	free(copy);
	return keys;
}

static void score_row(struct dump *d, const struct kvidx_score *s)
{
	const char *pn = pod_name(d, (unsigned)s->pod);
	struct kvidx_load l;
	bool load = kvidx_pod_load(d->r, s->pod, &l) == 0;
	uint32_t hit = s->flags & KVIDX_SCORE_HIT ? s->hit : s->blocks;

	if (d->json) {
		struct tc_jw *j = &d->j;
		tc_jw_open(j, NULL, '{');
		if (pn)
			tc_jw_str(j, "pod", pn);
		else
			tc_jw_null(j, "pod");
		tc_jw_i64(j, "index", s->pod);
		tc_jw_u64(j, "blocks", s->blocks);
		tc_jw_u64(j, "hit", hit);
		tc_jw_bool(j, "hybrid", s->flags & KVIDX_SCORE_HYBRID);
		tc_jw_u64(j, "spec_blocks", s->spec_blocks);
		tc_jw_num(j, "score", s->score);
		tc_jw_open(j, "runs", '{');
		for (unsigned t = 0; t < KVIDX_NTIERS; t++)
			tc_jw_u64(j, kvidx_tier_name((enum kvidx_tier)(1u << t)), s->run[t]);
		tc_jw_u64(j, "speculative", s->spec_run);
		tc_jw_close(j, '}');
		if (load) {
			tc_jw_open(j, "load", '{');
			tc_jw_u64(j, "inflight", l.inflight);
			tc_jw_u64(j, "prefill_tokens", l.prefill_tokens);
			tc_jw_u64(j, "lost", l.lost);
			tc_jw_close(j, '}');
		}
		tc_jw_close(j, '}');
		return;
	}
	printf("  %-21s blocks %-5u hit %-5u%s spec %-5u score %-8.3f runs gpu %u cpu %u disk %u "
	       "other %u spec %u", pn ? pn : "(removed)", s->blocks, hit,
	       s->flags & KVIDX_SCORE_HYBRID ? " (hybrid)" : "", s->spec_blocks, s->score,
	       s->run[0], s->run[1], s->run[2], s->run[3], s->spec_run);
	if (load)
		printf("  load inflight %u prefill_tokens %" PRIu64, l.inflight, l.prefill_tokens);
	printf("\n");
}

/* Prints what kvidx_score() returns for keys (every pod holding block 0). 0, or -1. */
static int dump_score(struct dump *d, const uint64_t *keys, size_t n)
{
	uint32_t max = kv_reader_view(d->r)->max_pods;
	struct kvidx_score *rows = calloc(max ? max : 1, sizeof(*rows));
	int got;

	if (!rows) {
		err_msg(d, "out of memory");
		return -1;
	}
	got = kvidx_score(d->r, keys, n, NULL, 0, NULL, rows, max);
	if (got == -KVIDX_ERETRY)
		got = kvidx_score(d->r, keys, n, NULL, 0, NULL, rows, max);
	if (got < 0) {
		err_msg(d, "scoring: %s", kvidx_strerror(got));
		free(rows);
		return -1;
	}
	if (d->json)
		tc_jw_open(&d->j, "score", '[');
	else
		printf("score of %zu key%s: %d pod%s holding block 0\n", n, n == 1 ? "" : "s", got,
		       got == 1 ? "" : "s");
	for (int i = 0; i < got; i++)
		score_row(d, &rows[i]);
	if (d->json)
		tc_jw_close(&d->j, ']');
	free(rows);
	return 0;
}

/* ---- attaching ---- */

/* Attaches and reads the header. Returns 0, or 1 after reporting why not. */
static int attach(struct dump *d)
{
	char path[KV_SHM_PATH_MAX];

	d->r = tc_index_open(d->name);
	if (!d->r || tc_index_info(d->r, d->name, &d->info) < 0)
		return 1;
	d->now = kvidx_now_ns();

	const struct kv_view *v = kv_reader_view(d->r);
	const struct kvidx_ctl_hdr *ctl = kv_reader_ctl(d->r);
	/*
	 * The registry is writable by every reader, so its slot count is not trusted: at most
	 * what the data segment (writer-only, validated at attach) says the registry was made
	 * with, which is what this reader mapped.
	 */
	uint32_t n = ld_relaxed(&ctl->ch_max_readers);
	if (n != v->hdr->dh_max_readers) {
		err_msg(d, "registry says %" PRIu32 " reader slots, data segment %" PRIu32
			   "; showing the fewer",
			n, v->hdr->dh_max_readers);
		if (n > v->hdr->dh_max_readers)
			n = v->hdr->dh_max_readers;
	}
	d->nreaders = n;
	if (pod_cache_reset(d) < 0) {
		err_msg(d, "out of memory");
		return 1;
	}
	/* A second descriptor on the registry, only to test liveness locks; optional. */
	kv_reg_shm_name(path, d->name, kv_reader_reg_gen(d->r));
	d->lock_fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	/* The writer's lock is on a file only the index owner can open: unknown to others. */
	kv_lock_shm_name(path, d->name);
	d->wlock_fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	return 0;
}

/* ---- command line ---- */

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [OPTION]...\n"
	      "Prints the state of a kvidx index: header, pods, reader registry, counters and, on\n"
	      "request, its entries. Attaches as an ordinary reader (data mapped read-only, one\n"
	      "registry slot) and never changes the index.\n"
	      "\n"
	      "  --name NAME       index to read (default \"" KVIDX_DEFAULT_NAME "\", i.e. "
	      "/dev/shm/" KVIDX_DEFAULT_NAME ")\n"
	      "  --json            print one JSON object with a member per section shown\n"
	      "  --prometheus      print every metric in the Prometheus text format instead of\n"
	      "                    the sections (what kvidx-ingestd --metrics serves); not with\n"
	      "                    --json or a section option\n"
	      "  --header          layout version, generation, key algorithm, seed, block size,\n"
	      "                    geometry, sizes, writer pid and liveness, heartbeat age\n"
	      "  --pods            active pods: name, model, generation, flags, nonzero counters\n"
	      "  --readers         registry slots in use: state, pid, liveness, announced epoch\n"
	      "                    (0: quiescent), lookups, expulsions; this dump's own is marked\n"
	      "  --stats           every writer counter, and the registry's RCU epoch\n"
	      "  --entries[=N]     up to N keys (default 100; 0: all) with their live records:\n"
	      "                    pod, confirmed or speculative, tiers, ages. Keys whose records\n"
	      "                    are all expired or hidden are skipped. Not a snapshot: a key\n"
	      "                    moved while the walk goes on may be missed or shown twice.\n"
	      "                    N must be attached: --entries=N\n"
	      "  --key HEX         look up one key (1 to 16 hex digits, optional 0x) as a router\n"
	      "                    would; exit status 1 if it is absent\n"
	      "  --score KEY,KEY,...  score a prompt's block keys (in order, from block 0) as a\n"
	      "                    router would (kvidx_score, every pod holding block 0): per pod\n"
	      "                    blocks held from block 0, the hybrid hit (vLLM's rule over the\n"
	      "                    pod's KV-cache groups; equal to blocks on a one-group model),\n"
	      "                    speculative blocks, score, per-tier runs and its load view\n"
	      "  -h, --help        print this help and exit\n"
	      "\n"
	      "Without a section option, prints --header --pods --readers --stats. With any\n"
	      "(--key and --score count as one), prints only those, in the order above. JSON\n"
	      "members are named header, pods, readers, stats, entries, lookup (for --key) and\n"
	      "score (an array of {pod, index, blocks, hit, hybrid, spec_blocks, score, runs,\n"
	      "load}). Ages are milliseconds of CLOCK_MONOTONIC before now; negative ones lie in\n"
	      "the future.\n"
	      "\n"
	      "Exit status: 0 on success, 1 if the index cannot be read or the --key is absent,\n"
	      "2 on bad usage.\n",
	      f);
}

/* What the command line asks for. */
struct args {
	uint64_t limit, key, *score_keys;
	size_t nscore;
	unsigned sections;
	bool prometheus;
};

/* The options into *d (name, json) and *a; a usage error exits. */
static void parse_args(int argc, char **argv, struct dump *d, struct args *a)
{
	enum { OPT_NAME = 256, OPT_JSON, OPT_HEADER, OPT_PODS, OPT_READERS, OPT_STATS,
	       OPT_ENTRIES, OPT_KEY, OPT_PROMETHEUS, OPT_SCORE };
	static const struct option longopts[] = {
		{ "name", required_argument, NULL, OPT_NAME },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "header", no_argument, NULL, OPT_HEADER },
		{ "pods", no_argument, NULL, OPT_PODS },
		{ "readers", no_argument, NULL, OPT_READERS },
		{ "stats", no_argument, NULL, OPT_STATS },
		{ "entries", optional_argument, NULL, OPT_ENTRIES },
		{ "key", required_argument, NULL, OPT_KEY },
		{ "score", required_argument, NULL, OPT_SCORE },
		{ "prometheus", no_argument, NULL, OPT_PROMETHEUS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_NAME:
			d->name = tc_index_name_arg(optarg);
			break;
		case OPT_JSON:
			d->json = true;
			break;
		case OPT_PROMETHEUS:
			a->prometheus = true;
			break;
		case OPT_HEADER:
			a->sections |= SEC_HEADER;
			break;
		case OPT_PODS:
			a->sections |= SEC_PODS;
			break;
		case OPT_READERS:
			a->sections |= SEC_READERS;
			break;
		case OPT_STATS:
			a->sections |= SEC_STATS;
			break;
		case OPT_ENTRIES:
			if (optarg && !tc_parse_dec(optarg, UINT64_MAX, &a->limit))
				tc_usage_error("bad --entries '%s': expected a decimal count "
					       "(0: all)", optarg);
			a->sections |= SEC_ENTRIES;
			break;
		case OPT_KEY:
			if (!tc_parse_hex64(optarg, &a->key))
				tc_usage_error("bad --key '%s': expected 1 to 16 hex digits, "
					       "optionally prefixed by 0x", optarg);
			a->sections |= SEC_KEY;
			break;
		case OPT_SCORE:
			free(a->score_keys);
			a->score_keys = parse_score_keys(optarg, &a->nscore);
			a->sections |= SEC_SCORE;
			break;
		default: /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
		}
	}
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'%s", argv[optind],
			       strcmp(argv[optind - 1], "--entries") == 0 ?
				       " (a count goes with an equals sign: --entries=N)" : "");
	if (a->prometheus && (d->json || a->sections))
		tc_usage_error("--prometheus prints every metric on its own; it takes neither "
			       "--json nor a section option");
	if (!a->sections)
		a->sections = SEC_DEFAULT;
}

/* The sections a asks for, in order; 1 if one of them failed, else 0. */
static int dump_sections(struct dump *d, const struct args *a)
{
	int status = 0;

	if (a->sections & SEC_HEADER)
		dump_header(d);
	if (a->sections & SEC_PODS)
		dump_pods(d);
	if (a->sections & SEC_READERS) {
		dump_readers(d);
		dump_routers(d);
	}
	if (a->sections & SEC_STATS)
		dump_stats(d);
	if ((a->sections & SEC_ENTRIES) && dump_entries(d, a->limit) < 0) {
		status = 1;
		if (d->json)
			tc_jw_str(&d->j, "error", "walking the entries failed; see standard error");
	}
	if (a->sections & SEC_KEY) {
		int rc = dump_key(d, a->key);
		if (rc <= 0) {
			status = 1;
			if (rc < 0 && d->json)
				tc_jw_str(&d->j, "error", "the lookup failed; see standard error");
		}
	}
	if ((a->sections & SEC_SCORE) && dump_score(d, a->score_keys, a->nscore) < 0) {
		status = 1;
		if (d->json)
			tc_jw_str(&d->j, "error", "scoring failed; see standard error");
	}
	return status;
}

int main(int argc, char **argv)
{
	struct dump d = { .name = KVIDX_DEFAULT_NAME, .lock_fd = -1, .wlock_fd = -1, .j = { .f = stdout } };
	struct args a = { .limit = DEFAULT_ENTRIES };
	int status = 0;

	tc_prog = PROG;
	parse_args(argc, argv, &d, &a);
	if (attach(&d) != 0) {
		kvidx_reader_close(d.r);
		free(d.pods);
		free(a.score_keys);
		return 1;
	}
	if (a.prometheus) {
		int rc = prom_render(d.r, stdout);
		if (rc < 0) {
			err_msg(&d, "rendering the metrics: %s", kvidx_strerror(rc));
			status = 1;
		}
		a.sections = 0;
	} else if (d.json) {
		tc_jw_open(&d.j, NULL, '{');
	} else {
		printf("index %s\n", d.name);
	}
	status |= dump_sections(&d, &a);
	free(a.score_keys);
	if (d.json)
		tc_jw_close(&d.j, '}');

	if (d.lock_fd >= 0)
		close(d.lock_fd);
	if (d.wlock_fd >= 0)
		close(d.wlock_fd);
	kvidx_reader_close(d.r);
	free(d.pods);
	return tc_flush_stdout() ? 1 : status;
}
