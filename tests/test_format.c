/*
 * test_format.c — Criterion suite "format": shm/layout.h and lib/telemetry.h against the
 * specification, shm/FORMAT.md. The document's machine-readable tables (after <!-- spec:... -->
 * markers) are parsed here: every struct table must tile its struct exactly and name each field
 * at the offset and size the compiler gives it, every constant must have the value layout.h,
 * telemetry.h (or kvidx.h) gives it, and the stats and per-pod counter lists must be
 * telemetry.h's X-macro lists in order. Both directions are checked: nothing in the document
 * that the headers lack, and nothing in the headers' lists below that the document leaves out.
 *
 * FORMAT.md is found at $KVIDX_SRC/shm/FORMAT.md (the Makefile sets KVIDX_SRC), else
 * relative to the working directory.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvidx.h"
#include "segment.h"
#include "telemetry.h"

/* ---- the header's side ------------------------------------------------------------------- */

struct fld {
	const char *tag, *name;
	size_t off, size;
};

#define FLD(tag, s, f) { tag, #f, offsetof(struct s, f), sizeof(((struct s *)0)->f) }
#define IH(f) FLD("kvidx_idx_hdr", kvidx_idx_hdr, f)
#define CTL(f) FLD("kvidx_ctl_hdr", kvidx_ctl_hdr, f)
#define RS(f) FLD("kvidx_reader_slot", kvidx_reader_slot, f)
#define RH(f) FLD("kv_ring_hdr", kv_ring_hdr, f)
#define DH(f) FLD("kvidx_data_hdr", kvidx_data_hdr, f)
#define PD(f) FLD("kvidx_pod", kvidx_pod, f)
#define MSG(v, f) FLD("kv_msg/" v, kv_msg, f)
#define MSG_HDR(v) MSG(v, m_type), MSG(v, m_n), MSG(v, m_pad), MSG(v, m_seq), MSG(v, m_corr)

static const struct fld fields[] = {
	IH(ih_magic), IH(ih_stamp), IH(ih_size), IH(ih_created_ns), IH(ih_max_readers),
	IH(ih_ring_entries), IH(ih_reg_size), IH(ih_pad0), IH(ih_generation), IH(ih_reg_gen),
	IH(ih_epoch), IH(ih_writer_pid), IH(ih_writer_idle), IH(ih_pad1),
	CTL(ch_magic), CTL(ch_stamp), CTL(ch_size), CTL(ch_max_readers), CTL(ch_slots_off),
	CTL(ch_created_ns), CTL(ch_ring_off), CTL(ch_ring_entries), CTL(ch_pad3), CTL(ch_reg_gen),
	CTL(ch_bell), CTL(ch_pad2),
	RS(rs_state), RS(rs_ctr), RS(rs_pid), RS(rs_pad), RS(rs_claimed_ns), RS(rs_lookups),
	RS(rs_expelled), RS(rs_commits), RS(rs_dropped),
	RH(rh_head), RH(rh_pad0), RH(rh_tail), RH(rh_pad1),
	MSG_HDR("commit"), MSG("commit", u.commit.t_ns), MSG("commit", u.commit.gen),
	MSG("commit", u.commit.pod), MSG("commit", u.commit.prefill_pod),
	MSG("commit", u.commit.nkeys), MSG("commit", u.commit.matched),
	MSG("commit", u.commit.matched_spec), MSG("commit", u.commit.prompt_tokens),
	MSG("commit", u.commit.pad),
	MSG_HDR("keys"), MSG("keys", u.keys),
	MSG_HDR("outcome"), MSG("outcome", u.outcome.t_ns), MSG("outcome", u.outcome.gen),
	MSG("outcome", u.outcome.pod), MSG("outcome", u.outcome.pad0),
	MSG("outcome", u.outcome.cached_tokens), MSG("outcome", u.outcome.prompt_tokens),
	MSG("outcome", u.outcome.pad),
	DH(dh_magic), DH(dh_stamp), DH(dh_size), DH(dh_generation), DH(dh_created_ns),
	DH(dh_algo), DH(dh_block_size), DH(dh_seed), DH(dh_capacity), DH(dh_records),
	DH(dh_nslots), DH(dh_arena_units), DH(dh_pods_per_key), DH(dh_max_pods),
	DH(dh_max_readers), DH(dh_max_probe), DH(dh_stats_off), DH(dh_pods_off),
	DH(dh_slots_off), DH(dh_arena_off), DH(dh_hist_off), DH(dh_routers_off), DH(dh_load_off),
	DH(dh_pad0),
	DH(dh_state),
	DH(dh_heartbeat_ns), DH(dh_writer_pid), DH(dh_pad1),
	PD(pd_word), PD(pd_seq), PD(pd_groups), PD(pd_name), PD(pd_model), PD(pd_ctr),
	FLD("kvidx_router", kvidx_router, rt_ctr), FLD("kvidx_router", kvidx_router, rt_hist),
	FLD("kvidx_load_row", kvidx_load_row, lr_seq),
	FLD("kvidx_load_row", kvidx_load_row, lr_inflight),
	FLD("kvidx_load_row", kvidx_load_row, lr_prefill_tokens),
	FLD("kvidx_load_row", kvidx_load_row, lr_updated_ns),
	FLD("kvidx_load_row", kvidx_load_row, lr_lost),
	FLD("kvidx_load_row", kvidx_load_row, lr_reserved),
	/* Arena units have no struct: reader.c reads entry words e[0], e[1] and record words
	 * e[2 + 2i], e[3 + 2i], one 16-byte unit each. */
	{ "entry", "key", 0, 8 }, { "entry", "meta", 8, 8 },
	{ "record", "w0", 0, 8 }, { "record", "w1", 8, 8 },
};

struct tag_size {
	const char *tag;
	size_t size;
};

static const struct tag_size tags[] = {
	{ "kvidx_idx_hdr", sizeof(struct kvidx_idx_hdr) },
	{ "kvidx_ctl_hdr", sizeof(struct kvidx_ctl_hdr) },
	{ "kvidx_reader_slot", sizeof(struct kvidx_reader_slot) },
	{ "kv_ring_hdr", sizeof(struct kv_ring_hdr) },
	{ "kv_msg/commit", sizeof(struct kv_msg) },
	{ "kv_msg/keys", sizeof(struct kv_msg) },
	{ "kv_msg/outcome", sizeof(struct kv_msg) },
	{ "kvidx_data_hdr", sizeof(struct kvidx_data_hdr) },
	{ "kvidx_pod", sizeof(struct kvidx_pod) },
	{ "kvidx_router", sizeof(struct kvidx_router) },
	{ "kvidx_load_row", sizeof(struct kvidx_load_row) },
	{ "entry", 16 },
	{ "record", 16 },
};

struct cst {
	const char *name;
	uint64_t value;
};

static const struct cst consts[] = {
	{ "KV_LAYOUT_VERSION", KV_LAYOUT_VERSION },
	{ "KV_IDX_MAGIC", KV_IDX_MAGIC },
	{ "KV_CTL_MAGIC", KV_CTL_MAGIC },
	{ "KV_DATA_MAGIC", KV_DATA_MAGIC },
	{ "KV_STAMP", KV_STAMP },
	{ "KV_CACHELINE", KVIDX_CACHELINE },
	{ "KV_IDX_SIZE", KV_IDX_SIZE },
	{ "KV_IDX_HDR_BYTES", sizeof(struct kvidx_idx_hdr) },
	{ "KV_CTL_HDR_BYTES", sizeof(struct kvidx_ctl_hdr) },
	{ "KV_RSLOT_BYTES", KV_RSLOT_BYTES },
	{ "KV_RING_HDR_BYTES", sizeof(struct kv_ring_hdr) },
	{ "KV_MSG_BYTES", KV_MSG_BYTES },
	{ "KV_DATA_HDR_BYTES", sizeof(struct kvidx_data_hdr) },
	{ "KV_DATA_HDR_IMMUTABLE", offsetof(struct kvidx_data_hdr, dh_state) },
	{ "KV_POD_BYTES", KV_POD_BYTES },
	{ "KV_POD_COUNTERS", KV_POD_COUNTERS },
	{ "KV_POD_NAMED", KV_POD_NAMED },
	{ "KV_POD_RANKS", KV_POD_RANKS },
	{ "KV_RANK_WORDS", KV_RANK_WORDS },
	{ "KV_STATS_WORDS", sizeof(struct kvidx_stats) / sizeof(uint64_t) },
	{ "KV_HIST_BUCKETS", KV_HIST_BUCKETS },
	{ "KV_HIST_DECAY_S", KV_HIST_DECAY_S },
	{ "KV_HIST_PER_POD", KV_HIST_PER_POD },
	{ "KV_PROMPT_CLASSES", KV_PROMPT_CLASSES },
	{ "KV_ROUTER_BYTES", KV_ROUTER_BYTES },
	{ "KV_ROUTER_WORDS", KV_ROUTER_WORDS },
	{ "KV_LOAD_BYTES", KV_LOAD_BYTES },
	{ "KV_UNIT_BYTES", 2 * sizeof(uint64_t) },
	{ "KV_REGION_ALIGN", 4096 }, /* checked against kv_data_plan() below */
	{ "KV_SLOT_EMPTY", KV_SLOT_EMPTY },
	{ "KV_SLOT_TOMB", KV_SLOT_TOMB },
	{ "KV_UNIT_MAX", KV_UNIT_MAX },
	{ "KV_MAX_PROBE", KV_MAX_PROBE },
	{ "KV_MAX_PPK", KV_MAX_PPK },
	{ "KV_MAX_PODS", KV_MAX_PODS },
	{ "KV_MAX_READERS", KV_MAX_READERS },
	{ "KV_EPOCH_MAX", KV_EPOCH_MAX },
	{ "KV_GEN_MAX", KV_GEN_MAX },
	{ "KV_MAX_CAPACITY", 1ull << 31 }, /* checked against kv_data_plan() below */
	{ "KV_RING_MIN", KV_RING_MIN },
	{ "KV_RING_MAX", KV_RING_MAX },
	{ "KV_MSG_KEYS_PER", KV_MSG_KEYS_PER },
	{ "KV_MAX_COMMIT_KEYS", KVIDX_MAX_COMMIT_KEYS },
	{ "KV_MAX_TTL_MS", KVIDX_MAX_TTL_MS },
	{ "KV_LOCK_WRITER", KV_LOCK_WRITER },
	{ "KV_LOCK_READER0", KV_LOCK_READER(0) },
	{ "KV_RS_FREE", KV_RS_FREE },
	{ "KV_RS_ACTIVE", KV_RS_ACTIVE },
	{ "KV_RS_EXPELLED", KV_RS_EXPELLED },
	{ "KV_MSG_COMMIT", KV_MSG_COMMIT },
	{ "KV_MSG_KEYS", KV_MSG_KEYS },
	{ "KV_MSG_OUTCOME", KV_MSG_OUTCOME },
	{ "KV_DATA_BUILDING", KV_DATA_BUILDING },
	{ "KV_DATA_LIVE", KV_DATA_LIVE },
	{ "KV_DATA_RETIRED", KV_DATA_RETIRED },
	{ "KV_POD_FREE", KV_POD_FREE },
	{ "KV_POD_ACTIVE", KV_POD_ACTIVE },
	{ "KV_POD_SPEC_PAUSED", KV_POD_SPEC_PAUSED },
	{ "KV_RANK_IN_USE", KV_RANK_IN_USE },
	{ "KV_RANK_CONNECTED", KV_RANK_CONNECTED },
	{ "KV_RANK_REPLAYING", KV_RANK_REPLAYING },
	{ "KV_REC_SPEC", KV_REC_SPEC },
	{ "KV_REC_GROUPS", KV_REC_GROUPS },
	{ "KV_POD_GROUPS", KV_POD_GROUPS },
	{ "KV_GRP_FULL", KV_GRP_FULL },
	{ "KV_GRP_SLIDING", KV_GRP_SLIDING },
	{ "KV_GRP_MAMBA", KV_GRP_MAMBA },
	{ "KV_ALGO_CBOR_FNV", KVIDX_KEY_CBOR_FNV },
	{ "KV_ALGO_XXH64", KVIDX_KEY_XXH64 },
	{ "KV_TIER_GPU", KVIDX_TIER_GPU },
	{ "KV_TIER_CPU", KVIDX_TIER_CPU },
	{ "KV_TIER_DISK", KVIDX_TIER_DISK },
	{ "KV_TIER_OTHER", KVIDX_TIER_OTHER },
};

#define NAME_STR(n) #n,
static const char *const stat_names[] = { KV_STATS(NAME_STR) };
static const char *const pod_ctr_names[] = { KV_POD_CTRS(NAME_STR) };
static const char *const rank_ctr_names[] = { KV_RANK_CTRS(NAME_STR) };
static const char *const router_ctr_names[] = { KV_ROUTER_CTRS(NAME_STR) };
/* The histograms of a pod by index (telemetry.h enum kv_hist_id), as section 5.5 lists them. */
static const char *const hist_names[KV_HIST_PER_POD] = {
	[KV_HIST_CONFIRM] = "confirm", [KV_HIST_CONFIRM_RECENT] = "confirm_recent",
	[KV_HIST_LAG] = "lag", [KV_HIST_LAG_RECENT] = "lag_recent",
	[KV_HIST_CLASS(0)] = "class0", [KV_HIST_CLASS(1)] = "class1",
	[KV_HIST_CLASS(2)] = "class2", [KV_HIST_CLASS(3)] = "class3",
};
#undef NAME_STR

/* ---- the document's side ----------------------------------------------------------------- */

#define MAX_ROWS 96
#define CELLS 5

struct block {
	char kind[16]; /* "struct", "constants", "list" */
	char name[64];
	size_t size;
	bool heading; /* the table's heading row was seen */
	int nrows;
	char cell[MAX_ROWS][CELLS][96];
};

static struct block blocks[24];
static int nblocks;

static void trim(char *s)
{
	size_t n = strlen(s), i = 0;

	while (n && (s[n - 1] == ' ' || s[n - 1] == '\n'))
		s[--n] = '\0';
	while (s[i] == ' ')
		i++;
	memmove(s, s + i, n - i + 1);
}

static void parse_format(void)
{
	char path[512], line[1024];
	const char *src = getenv("KVIDX_SRC");
	struct block *b = NULL;

	snprintf(path, sizeof(path), "%s/shm/FORMAT.md", src ? src : ".");
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "cannot open %s (set KVIDX_SRC to the source tree)", path);
	nblocks = 0;
	while (fgets(line, sizeof(line), f)) {
		char kind[16], name[64];
		size_t size = 0;
		if (sscanf(line, "<!-- spec:%15s %63s %zu -->", kind, name, &size) >= 1 &&
		    strncmp(line, "<!-- spec:", 10) == 0) {
			cr_assert_lt(nblocks, 24);
			b = &blocks[nblocks++];
			memset(b, 0, sizeof(*b));
			snprintf(b->kind, sizeof(b->kind), "%s", kind);
			if (strcmp(kind, "constants") != 0)
				snprintf(b->name, sizeof(b->name), "%s", name);
			b->size = size;
			continue;
		}
		if (!b)
			continue;
		if (line[0] != '|') {
			b = NULL; /* the table ended (tables follow their marker at once) */
			continue;
		}
		if (strncmp(line, "|---", 4) == 0)
			continue;
		/* Cells split at unescaped '|'; the first row is the table's heading. */
		char cells[CELLS][96] = { { 0 } };
		int c = -1;
		size_t k = 0;
		for (const char *p = line; *p; p++) {
			if (*p == '|' && (p == line || p[-1] != '\\')) {
				if (c >= 0 && c < CELLS)
					cells[c][k] = '\0';
				c++;
				k = 0;
				continue;
			}
			if (c >= 0 && c < CELLS && k + 1 < sizeof(cells[0]))
				cells[c][k++] = *p;
		}
		if (!b->heading) {
			b->heading = true;
			continue;
		}
		cr_assert_lt(b->nrows, MAX_ROWS, "table %s too long", b->name);
		for (int i = 0; i < CELLS; i++) {
			trim(cells[i]);
			memcpy(b->cell[b->nrows][i], cells[i], sizeof(cells[i]));
		}
		b->nrows++;
	}
	fclose(f);
	cr_assert_gt(nblocks, 0, "no spec tables in %s", path);
}

static const struct block *find_block(const char *kind, const char *name)
{
	for (int i = 0; i < nblocks; i++)
		if (!strcmp(blocks[i].kind, kind) && (!name || !strcmp(blocks[i].name, name)))
			return &blocks[i];
	return NULL;
}

static uint64_t num(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	cr_assert(*s && *end == '\0', "not a number: '%s'", s);
	return v;
}

/* Bytes a type cell implies, 0 for "bytes" (any size). */
static size_t type_size(const char *t)
{
	size_t n;

	if (!strcmp(t, "u8"))
		return 1;
	if (!strcmp(t, "u16"))
		return 2;
	if (!strcmp(t, "u32") || !strcmp(t, "i32"))
		return 4;
	if (!strcmp(t, "u64"))
		return 8;
	if (sscanf(t, "char[%zu]", &n) == 1)
		return n;
	if (sscanf(t, "u64[%zu]", &n) == 1)
		return 8 * n;
	if (sscanf(t, "u32[%zu]", &n) == 1)
		return 4 * n;
	cr_assert_str_eq(t, "bytes", "unknown type '%s'", t);
	return 0;
}

TestSuite(format, .init = parse_format);

Test(format, struct_tables_match_layout_h)
{
	for (size_t t = 0; t < sizeof(tags) / sizeof(tags[0]); t++) {
		const struct block *b = find_block("struct", tags[t].tag);
		cr_assert_not_null(b, "FORMAT.md has no table for %s", tags[t].tag);
		cr_expect_eq(b->size, tags[t].size, "%s: document says %zu bytes, sizeof %zu",
			     tags[t].tag, b->size, tags[t].size);
		size_t at = 0;
		for (int r = 0; r < b->nrows; r++) {
			size_t off = num(b->cell[r][0]), size = num(b->cell[r][1]);
			const char *type = b->cell[r][2], *name = b->cell[r][3];
			size_t ts = type_size(type);
			cr_expect_eq(off, at, "%s.%s: at %zu, previous row ends at %zu", tags[t].tag,
				     name, off, at);
			cr_expect(ts == 0 || ts == size, "%s.%s: type %s but %zu bytes", tags[t].tag,
				  name, type, size);
			at = off + size;
			if (!strcmp(name, "-"))
				continue; /* padding the compiler adds, unnamed */
			const struct fld *f = NULL;
			for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
				if (!strcmp(fields[i].tag, tags[t].tag) && !strcmp(fields[i].name, name))
					f = &fields[i];
			cr_expect_not_null(f, "%s.%s: no such field in layout.h", tags[t].tag, name);
			if (f)
				cr_expect(f->off == off && f->size == size,
					  "%s.%s: document %zu+%zu, layout.h %zu+%zu", tags[t].tag,
					  name, off, size, f->off, f->size);
		}
		cr_expect_eq(at, tags[t].size, "%s: rows cover %zu of %zu bytes", tags[t].tag, at,
			     tags[t].size);
	}
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		const struct block *b = find_block("struct", fields[i].tag);
		bool found = false;
		for (int r = 0; b && r < b->nrows; r++)
			found |= !strcmp(b->cell[r][3], fields[i].name);
		cr_expect(found, "%s.%s is not in FORMAT.md", fields[i].tag, fields[i].name);
	}
	/* No table for a struct this test does not know. */
	for (int i = 0; i < nblocks; i++) {
		if (strcmp(blocks[i].kind, "struct"))
			continue;
		bool known = false;
		for (size_t t = 0; t < sizeof(tags) / sizeof(tags[0]); t++)
			known |= !strcmp(tags[t].tag, blocks[i].name);
		cr_expect(known, "FORMAT.md table %s is unknown to this test", blocks[i].name);
	}
}

Test(format, constants_match_headers)
{
	const struct block *b = find_block("constants", NULL);

	cr_assert_not_null(b, "FORMAT.md has no constants table");
	for (int r = 0; r < b->nrows; r++) {
		const struct cst *c = NULL;
		for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
			if (!strcmp(consts[i].name, b->cell[r][0]))
				c = &consts[i];
		cr_expect_not_null(c, "FORMAT.md constant %s unknown to the headers", b->cell[r][0]);
		if (c)
			cr_expect_eq(num(b->cell[r][1]), c->value, "%s: document %s, headers 0x%llx",
				     c->name, b->cell[r][1], (unsigned long long)c->value);
	}
	for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++) {
		bool found = false;
		for (int r = 0; r < b->nrows; r++)
			found |= !strcmp(consts[i].name, b->cell[r][0]);
		cr_expect(found, "%s is not in FORMAT.md", consts[i].name);
	}
}

static void check_list(const char *name, const char *const *want, size_t n, size_t room)
{
	const struct block *b = find_block("list", name);

	cr_assert_not_null(b, "FORMAT.md has no list %s", name);
	cr_expect_eq((size_t)b->nrows, n, "%s: document lists %d, telemetry.h %zu", name, b->nrows, n);
	cr_expect_leq(n, room);
	for (int r = 0; r < b->nrows && (size_t)r < n; r++) {
		cr_expect_eq(num(b->cell[r][0]), (uint64_t)r, "%s row %d: index %s", name, r,
			     b->cell[r][0]);
		cr_expect_str_eq(b->cell[r][1], want[r], "%s[%d]: document %s, telemetry.h %s", name,
				 r, b->cell[r][1], want[r]);
	}
}

Test(format, counter_lists_match_layout_h)
{
	check_list("stats", stat_names, sizeof(stat_names) / sizeof(stat_names[0]),
		   4096 / sizeof(uint64_t));
	check_list("pod_counters", pod_ctr_names, sizeof(pod_ctr_names) / sizeof(pod_ctr_names[0]),
		   KV_POD_NAMED);
	check_list("rank_counters", rank_ctr_names,
		   sizeof(rank_ctr_names) / sizeof(rank_ctr_names[0]), KV_RANK_WORDS);
	check_list("router_counters", router_ctr_names,
		   sizeof(router_ctr_names) / sizeof(router_ctr_names[0]), KV_ROUTER_WORDS);
	check_list("histograms", hist_names, KV_HIST_PER_POD, KV_HIST_PER_POD);
	/* The rank areas tile pd_ctr after the named counters, as section 5.4 says. */
	cr_expect_eq(KV_PC_RANK(0, 0), KV_POD_NAMED);
	cr_expect_eq(KV_PC_RANK(KV_POD_RANKS - 1, KV_RANK_WORDS - 1) + 1, KV_POD_COUNTERS);
	cr_expect_eq(sizeof(((struct kvidx_pod *)0)->pd_ctr), KV_POD_COUNTERS * sizeof(uint64_t));
}

/* The constants this test could only state (KV_MAX_CAPACITY, KV_REGION_ALIGN) against what
 * kv_data_plan() does with them, and the stamp formula of section 4. */
Test(format, plan_bounds_and_stamp)
{
	struct kvidx_data_hdr h;

	memset(&h, 0, sizeof(h));
	cr_expect_eq(kv_data_plan(&h, 1ull << 31, 1, 1, 1, 1), 0);
	cr_expect_lt(kv_data_plan(&h, (1ull << 31) + 1, 1, 1, 1, 1), 0);
	cr_expect_eq(kv_data_plan(&h, 1000, 2000, 10, 256, 64), 0);
	uint64_t offs[] = { h.dh_stats_off, h.dh_pods_off, h.dh_hist_off, h.dh_routers_off,
			    h.dh_load_off, h.dh_slots_off, h.dh_arena_off, h.dh_size };
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
		cr_expect_eq(offs[i] % 4096, 0, "offset %zu not 4096-aligned", i);
	cr_expect_eq(h.dh_stats_off, 4096);
	cr_expect_eq(KV_STAMP, (8ull << 48) | (192ull << 32) | (2752ull << 16) | (64ull << 8) | 64);
	/* Section 5.2's order: histograms, router statistics, the load view, then the slots. */
	cr_expect_eq(h.dh_routers_off, (h.dh_hist_off + 256ull * KV_HIST_PER_POD * 192 * 8 + 4095) &
					       ~4095ull);
	cr_expect_eq(h.dh_load_off, (h.dh_routers_off + 64ull * KV_ROUTER_BYTES + 4095) & ~4095ull);
	cr_expect_eq(h.dh_slots_off, (h.dh_load_off + 256ull * KV_LOAD_BYTES + 4095) & ~4095ull);
}

/* Section 2 and 6: object names, the registry formulas, and what the validators accept. */
Test(format, names_registry_formula_and_validation)
{
	char path[KV_SHM_PATH_MAX];

	kv_ctl_shm_name(path, "ix");
	cr_expect_str_eq(path, "/ix");
	kv_lock_shm_name(path, "ix");
	cr_expect_str_eq(path, "/ix.lock");
	kv_reg_shm_name(path, "ix", 12);
	cr_expect_str_eq(path, "/ix.reg.12");
	kv_data_shm_name(path, "ix", 7);
	cr_expect_str_eq(path, "/ix.data.7");
	for (uint32_t n = 1; n <= KV_MAX_READERS; n *= 4) {
		uint64_t rb = 128 + 64ull * KV_RING_MIN;
		cr_expect_eq(kv_ctl_ring_off(n), 128 + 64ull * n);
		cr_expect_eq(kv_ctl_ring_bytes(KV_RING_MIN), rb);
		cr_expect_eq(kv_ctl_size(n, KV_RING_MIN), 128 + 64ull * n + n * rb);
	}
	cr_expect_eq(KV_LOCK_READER(5), 6);

	/* An index header as section 6.1 describes it validates; each rule is enforced. */
	static struct kvidx_idx_hdr ok, h;
	memset(&ok, 0, sizeof(ok));
	ok.ih_magic = KV_IDX_MAGIC;
	ok.ih_stamp = KV_STAMP;
	ok.ih_size = KV_IDX_SIZE;
	ok.ih_max_readers = 8;
	ok.ih_ring_entries = KV_RING_MIN;
	ok.ih_reg_size = kv_ctl_size(8, KV_RING_MIN);
	ok.ih_epoch = 1;
	ok.ih_reg_gen = 1;
	cr_expect_eq(kv_idx_validate(&ok, KV_IDX_SIZE), 0);
	cr_expect_eq(kv_idx_validate(&ok, KV_IDX_SIZE - 1), -KVIDX_ECORRUPT);
	h = ok; h.ih_magic = KV_CTL_MAGIC; /* a layout-4 registry at /NAME */
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_EVERSION);
	h = ok; h.ih_stamp ^= 1ull << 48;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_EVERSION);
	h = ok; h.ih_epoch = 0;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_ECORRUPT);
	h = ok; h.ih_epoch = KV_EPOCH_MAX + 1;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_ECORRUPT);
	h = ok; h.ih_reg_gen = 0;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_ECORRUPT);
	h = ok; h.ih_generation = KV_GEN_MAX + 1;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_ECORRUPT);
	h = ok; h.ih_reg_size += 64;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_ECORRUPT);
	h = ok; h.ih_ring_entries = KV_RING_MIN + 1;
	cr_expect_eq(kv_idx_validate(&h, KV_IDX_SIZE), -KVIDX_ECORRUPT);

	/* A registry header matches the index header only with its geometry and K. */
	struct kvidx_ctl_hdr c;
	memset(&c, 0, sizeof(c));
	c.ch_magic = KV_CTL_MAGIC;
	c.ch_stamp = KV_STAMP;
	c.ch_size = ok.ih_reg_size;
	c.ch_max_readers = 8;
	c.ch_slots_off = 128;
	c.ch_ring_off = kv_ctl_ring_off(8);
	c.ch_ring_entries = KV_RING_MIN;
	c.ch_reg_gen = 1;
	cr_expect_eq(kv_ctl_validate(&c, c.ch_size), 0);
	cr_expect_eq(kv_ctl_validate(&c, c.ch_size - 1), -KVIDX_ECORRUPT);
	cr_expect(kv_ctl_matches(&c, &ok, 1));
	cr_expect(!kv_ctl_matches(&c, &ok, 2));
	c.ch_reg_gen = 2;
	cr_expect(!kv_ctl_matches(&c, &ok, 1));
}
