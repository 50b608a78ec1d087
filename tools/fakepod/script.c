/*
 * script.c — the fake pod's script language, for tests that need exact events, sequence
 * gaps, restarts, delayed delivery and malformed payloads: one command per line (store,
 * remove, clear, flush, gap, lose, restart, delay, sleep, raw, offload, and the settings
 * rank, medium, group, locality, lora, salt, mm that shape the events after them; --help
 * lists them), read from a file or standard input as it arrives, without blocking the poll
 * loop.
 *
 * A bad line ends the run with exit status 2, after a message naming the line.
 */
#include "fakepod.h"
#include "duration.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kvidx.h"
#include "parse.h"

#define SCRIPT_LINE_MAX (64u << 20) /* bytes in one script line */
#define SCRIPT_SEPS     " \t\r\v\f"

__attribute__((format(printf, 2, 3)))
static int script_error(struct fp *fp, const char *fmt, ...)
{
	va_list ap;

	if (!strcmp(fp->o.script, "-"))
		fprintf(stderr, PROG ": standard input line %" PRIu64 ": ", fp->sline);
	else
		fprintf(stderr, PROG ": %s line %" PRIu64 ": ", fp->o.script, fp->sline);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fp->exit_code = 2;
	return -1;
}

/* Parses a count argument min..max for command cmd. */
static int script_count(struct fp *fp, const char *cmd, char **save, uint64_t min,
			uint64_t max, uint64_t *v)
{
	char *arg = strtok_r(NULL, SCRIPT_SEPS, save);

	if (!arg)
		return script_error(fp, "%s: missing argument", cmd);
	if (!tc_parse_dec(arg, max, v) || *v < min)
		return script_error(fp, "%s: bad argument '%s': expected a decimal integer "
				    "%" PRIu64 "..%" PRIu64, cmd, arg, min, max);
	if (strtok_r(NULL, SCRIPT_SEPS, save))
		return script_error(fp, "%s: too many arguments", cmd);
	return 0;
}

static int script_store(struct fp *fp, char **save)
{
	uint32_t bs = fp->o.block_size;
	char *arg = strtok_r(NULL, SCRIPT_SEPS, save), *tsave, *t;
	uint64_t parent = 0, v;
	bool has_parent = false;
	size_t n = 0, nblocks;
	struct prompt_x px;

	if (!arg)
		return script_error(fp, "store: missing parent (a hash, or - for none)");
	if (strcmp(arg, "-")) {
		if (!tc_parse_hex64(arg, &parent))
			return script_error(fp, "store: bad parent '%s': expected - or 1 to 16 hex "
					    "digits, optionally prefixed by 0x", arg);
		has_parent = true;
	}
	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		for (t = strtok_r(arg, ",", &tsave); t; t = strtok_r(NULL, ",", &tsave)) {
			if (!tc_parse_dec(t, UINT32_MAX, &v))
				return script_error(fp, "store: bad token '%s': expected a decimal "
						    "integer 0..%" PRIu32, t, UINT32_MAX);
			if (n == KVW_MAX_TOKENS)
				return script_error(fp, "store: more than %u tokens", KVW_MAX_TOKENS);
			tc_grow(&fp->toks, &fp->toks_cap, n + 1, sizeof(*fp->toks));
			fp->toks[n++] = (uint32_t)v;
		}
	}
	nblocks = n / bs;
	if (!nblocks)
		return script_error(fp, "store: %zu tokens make no full block of %" PRIu32, n, bs);
	px = (struct prompt_x){ .lora = fp->script_lora, .mm = fp->script_mm,
				.nmm = fp->script_nmm, .mm_bare = fp->script_mm_bare,
				.salt = has_parent ? NULL : fp->script_salt };
	tc_grow(&fp->hbuf, &fp->hbuf_cap, nblocks, sizeof(*fp->hbuf));
	engine_chain_x(parent, fp->toks, 0, nblocks, bs, &px, fp->hbuf);
	fp->px = &px;
	ev_add_stored(fp, &fp->pending, fp->hbuf, nblocks, has_parent, parent, fp->toks,
		      nblocks * bs, 0);
	fp->px = NULL;
	for (size_t i = 0; i < nblocks; i++)
		if (printf("0x%016llx\n", (unsigned long long)fp->hbuf[i]) < 0)
			break;
	if ((fflush(stdout) || ferror(stdout)) && !fp->stdout_failed) {
		fprintf(stderr, PROG ": writing the store hashes to standard output: %s\n",
			strerror(errno));
		fp->stdout_failed = true;
	}
	return 0;
}

/*
 * remove HASH[:N]... (counts on all or none) and offload MEDIUM HASH...: the hashes to
 * fp->hbuf, the counts to fp->toks; their number, or -1 after an error.
 */
static ssize_t script_hashes(struct fp *fp, const char *cmd, char **save, bool counts_ok,
			     bool *counts)
{
	char *arg;
	size_t n = 0;

	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		char *colon = counts_ok ? strchr(arg, ':') : NULL;
		uint64_t v = 0;

		if (n == KVW_MAX_HASHES)
			return script_error(fp, "%s: more than %u hashes", cmd, KVW_MAX_HASHES);
		if (n && *counts != (colon != NULL))
			return script_error(fp, "%s: a count after every hash or after none", cmd);
		*counts = colon != NULL;
		if (colon) {
			*colon = '\0';
			if (!tc_parse_dec(colon + 1, UINT32_MAX, &v))
				return script_error(fp, "%s: bad count '%s': expected a decimal "
						    "integer 0..%" PRIu32, cmd, colon + 1, UINT32_MAX);
		}
		tc_grow(&fp->hbuf, &fp->hbuf_cap, n + 1, sizeof(*fp->hbuf));
		tc_grow(&fp->toks, &fp->toks_cap, n + 1, sizeof(*fp->toks));
		fp->toks[n] = (uint32_t)v;
		if (!tc_parse_hex64(arg, &fp->hbuf[n++]))
			return script_error(fp, "%s: bad hash '%s': expected 1 to 16 hex digits, "
					    "optionally prefixed by 0x", cmd, arg);
	}
	if (!n)
		return script_error(fp, "%s: expected at least one hash", cmd);
	return (ssize_t)n;
}

static int script_remove(struct fp *fp, char **save)
{
	bool counts = false;
	ssize_t n = script_hashes(fp, "remove", save, true, &counts);

	if (n < 0)
		return -1;
	ev_add_removed(fp, &fp->pending, fp->hbuf, (size_t)n, counts ? fp->toks : NULL);
	return 0;
}

/* offload MEDIUM HASH...: an offload placeholder (vLLM's OffloadingConnector). */
static int script_offload(struct fp *fp, char **save)
{
	char *medium = strtok_r(NULL, SCRIPT_SEPS, save);
	bool counts = false;
	struct kvw_event *e;
	ssize_t n;

	if (!medium)
		return script_error(fp, "offload: missing medium");
	if (strlen(medium) >= KVW_MEDIUM_MAX)
		return script_error(fp, "offload: medium longer than %d bytes", KVW_MEDIUM_MAX - 1);
	if ((n = script_hashes(fp, "offload", save, false, &counts)) < 0)
		return -1;
	fp->attr.medium = medium;
	e = ev_add_stored(fp, &fp->pending, fp->hbuf, (size_t)n, false, 0, NULL, 0, 0);
	e->block_size = 0;
	return 0;
}

/* The argument of a setting: one word, or NULL for "-" (the default). -1 after an error. */
static int setting_word(struct fp *fp, const char *cmd, char **save, size_t cap,
			const char **word)
{
	char *arg = strtok_r(NULL, SCRIPT_SEPS, save);

	if (!arg)
		return script_error(fp, "%s: missing argument (- for the default)", cmd);
	if (strtok_r(NULL, SCRIPT_SEPS, save))
		return script_error(fp, "%s: too many arguments", cmd);
	if (strlen(arg) >= cap)
		return script_error(fp, "%s: '%s' is longer than %zu bytes", cmd, arg, cap - 1);
	*word = strcmp(arg, "-") ? arg : NULL;
	return 0;
}

/* Replaces *dst (malloc'd or NULL) by a copy of src (NULL: none). */
static void set_str(char **dst, const char *src)
{
	free(*dst);
	*dst = NULL;
	if (src) {
		size_t n = strlen(src) + 1;

		*dst = tc_xrealloc(NULL, n);
		memcpy(*dst, src, n);
	}
}

static void mm_clear(struct fp *fp)
{
	for (size_t i = 0; i < fp->script_nmm; i++)
		free((void *)fp->script_mm[i].id);
	fp->script_nmm = 0;
	fp->script_mm_bare = false;
}

void script_free(struct fp *fp)
{
	mm_clear(fp);
	set_str(&fp->script_lora, NULL);
	set_str(&fp->script_salt, NULL);
}

/* mm [bare] START:LEN:ID...|- */
static int script_mm(struct fp *fp, char **save)
{
	char *arg = strtok_r(NULL, SCRIPT_SEPS, save);

	mm_clear(fp);
	if (arg && !strcmp(arg, "-") && !strtok_r(NULL, SCRIPT_SEPS, save))
		return 0;
	if (arg && !strcmp(arg, "bare")) {
		fp->script_mm_bare = true;
		arg = strtok_r(NULL, SCRIPT_SEPS, save);
	}
	if (!arg)
		return script_error(fp, "mm: expected START:LEN:ID... or -");
	for (; arg; arg = strtok_r(NULL, SCRIPT_SEPS, save)) {
		char *c1 = strchr(arg, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		uint64_t start, len;
		struct mm_item m;
		size_t k;

		if (c1)
			*c1 = '\0';
		if (c2)
			*c2 = '\0';
		if (!c2 || !c2[1] || !tc_parse_dec(arg, KVW_MAX_TOKENS, &start) ||
		    !tc_parse_dec(c1 + 1, KVW_MAX_TOKENS, &len) || len == 0)
			return script_error(fp, "mm: bad item: expected START:LEN:ID, START and "
					    "LEN 0..%u (LEN > 0), ID not empty", KVW_MAX_TOKENS);
		if (strlen(c2 + 1) >= KVW_LORA_NAME_MAX)
			return script_error(fp, "mm: identifier longer than %d bytes",
					    KVW_LORA_NAME_MAX - 1);
		if (fp->script_nmm == FP_MAX_MM)
			return script_error(fp, "mm: more than %d items", FP_MAX_MM);
		m = (struct mm_item){ .start = (uint32_t)start, .len = (uint32_t)len };
		set_str((char **)&m.id, c2 + 1);
		/* Kept in start order, as vLLM lists a block's items. */
		for (k = fp->script_nmm; k > 0 && fp->script_mm[k - 1].start > m.start; k--)
			fp->script_mm[k] = fp->script_mm[k - 1];
		fp->script_mm[k] = m;
		fp->script_nmm++;
	}
	return 0;
}

/*
 * The settings (rank, medium, group, locality, lora, salt, mm): 1 if cmd is one (applied,
 * or -1 after an error), 0 if not.
 */
static int script_setting(struct fp *fp, const char *cmd, char **save)
{
	struct ev_attr *at = &fp->script_attr;
	const char *w;
	uint64_t v;

	if (!strcmp(cmd, "rank")) {
		if (script_count(fp, cmd, save, 0, fp->nranks - 1, &v))
			return -1;
		fp->script_rank = (uint32_t)v;
	} else if (!strcmp(cmd, "medium")) {
		if (setting_word(fp, cmd, save, KVW_MEDIUM_MAX, &w))
			return -1;
		snprintf(fp->script_medium, sizeof fp->script_medium, "%s", w ? w : "");
		at->medium = w ? fp->script_medium : fp->o.medium;
	} else if (!strcmp(cmd, "locality")) {
		if (setting_word(fp, cmd, save, KVW_LOCALITY_MAX, &w))
			return -1;
		snprintf(fp->script_locality, sizeof fp->script_locality, "%s", w ? w : "");
		at->locality = w ? fp->script_locality : NULL;
	} else if (!strcmp(cmd, "lora")) {
		if (setting_word(fp, cmd, save, KVW_LORA_NAME_MAX, &w))
			return -1;
		set_str(&fp->script_lora, w);
	} else if (!strcmp(cmd, "salt")) {
		if (setting_word(fp, cmd, save, 1u << 16, &w))
			return -1;
		set_str(&fp->script_salt, w);
	} else if (!strcmp(cmd, "mm")) {
		return script_mm(fp, save) ? -1 : 1;
	} else if (!strcmp(cmd, "group")) {
		char *idx = strtok_r(NULL, SCRIPT_SEPS, save), *kind;

		if (idx && !strcmp(idx, "-") && !strtok_r(NULL, SCRIPT_SEPS, save)) {
			at->has_group = false;
			at->kind = NULL;
			at->sliding_window = 0;
			return 1;
		}
		char *win;
		uint64_t wv = 0;

		kind = idx ? strtok_r(NULL, SCRIPT_SEPS, save) : NULL;
		win = kind ? strtok_r(NULL, SCRIPT_SEPS, save) : NULL;
		if (!kind || (win && (strtok_r(NULL, SCRIPT_SEPS, save) ||
				      !tc_parse_dec(win, UINT32_MAX, &wv) || !wv)) ||
		    !tc_parse_dec(idx, UINT32_MAX, &v))
			return script_error(fp, "group: expected IDX KIND [WINDOW] (KIND - for nil) "
					    "or -");
		if (strlen(kind) >= KVW_SPEC_KIND_MAX)
			return script_error(fp, "group: kind longer than %d bytes",
					    KVW_SPEC_KIND_MAX - 1);
		snprintf(fp->script_kind, sizeof fp->script_kind, "%s", kind);
		at->has_group = true;
		at->group = (uint32_t)v;
		at->kind = strcmp(kind, "-") ? fp->script_kind : NULL;
		at->sliding_window = (uint32_t)wv; /* kv_cache_spec_sliding_window, 0: nil */
	} else {
		return 0;
	}
	return 1;
}

static int script_raw(struct fp *fp, char **save, uint64_t now)
{
	unsigned char *p = NULL;
	size_t n = 0, cap = 0;
	struct action a;
	char *arg;

	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		size_t len = strlen(arg);

		if (len % 2) {
			free(p);
			return script_error(fp, "raw: '%s' has an odd number of hex digits", arg);
		}
		tc_grow(&p, &cap, n + len / 2, 1);
		for (size_t i = 0; i < len; i += 2) {
			int hi = tc_hex_digit(arg[i]), lo = tc_hex_digit(arg[i + 1]);

			if (hi < 0 || lo < 0) {
				free(p);
				return script_error(fp, "raw: bad hex digit in '%s'", arg);
			}
			p[n++] = (unsigned char)(hi << 4 | lo);
		}
	}
	memset(&a, 0, sizeof a);
	a.kind = ACT_PUBLISH;
	a.rank = fp->script_rank;
	a.raw = true;
	a.data = p ? p : tc_xrealloc(NULL, 1);
	a.len = n;
	a.due = now + fp->delay_ns;
	schedule(fp, &a, now);
	return 0;
}

/* Runs one script line (modified in place). Returns 0, or -1 after printing an error. */
static int script_line(struct fp *fp, char *line, uint64_t now)
{
	char *save = NULL, *cmd = strtok_r(line, SCRIPT_SEPS, &save);
	bool store, remove, clear, offload;
	struct action a;
	uint64_t v;
	int set;

	if (!cmd || cmd[0] == '#')
		return 0;
	/* Settings shape the events after them, and publish nothing. */
	if ((set = script_setting(fp, cmd, &save)))
		return set < 0 ? -1 : 0;
	store = !strcmp(cmd, "store");
	remove = !strcmp(cmd, "remove");
	clear = !strcmp(cmd, "clear");
	offload = !strcmp(cmd, "offload");
	if ((clear || !strcmp(cmd, "flush") || !strcmp(cmd, "restart")) &&
	    strtok_r(NULL, SCRIPT_SEPS, &save))
		return script_error(fp, "%s: no argument expected", cmd);
	fp->attr = fp->script_attr;
	fp->ev_rank = fp->script_rank;
	if (store || remove || clear || offload) {
		if (store && script_store(fp, &save))
			return -1;
		if (remove && script_remove(fp, &save))
			return -1;
		if (offload && script_offload(fp, &save))
			return -1;
		if (clear) {
			ev_add(fp, &fp->pending, KVW_ALL_BLOCKS_CLEARED);
			/* Blocks requests of the pod model hold stay theirs. */
			cache_forget(&fp->cache, fp->script_rank);
		}
		if (fp->pending.n >= fp->o.batch)
			flush_pending(fp, fp->pending.n, now);
		return 0;
	}
	/* Every other command publishes the pending batch first. */
	flush_pending(fp, fp->pending.n, now);
	memset(&a, 0, sizeof a);
	a.due = now + fp->delay_ns;
	a.rank = fp->script_rank;
	if (!strcmp(cmd, "flush"))
		return 0;
	if (!strcmp(cmd, "restart")) {
		a.kind = ACT_RESTART;
		schedule(fp, &a, now);
		return 0;
	}
	if (!strcmp(cmd, "gap") || !strcmp(cmd, "lose")) {
		if (script_count(fp, cmd, &save, 1, UINT32_MAX, &v))
			return -1;
		a.kind = cmd[0] == 'g' ? ACT_GAP : ACT_LOSE;
		a.n = v;
		schedule(fp, &a, now);
		return 0;
	}
	if (!strcmp(cmd, "delay") || !strcmp(cmd, "sleep")) {
		char *arg = strtok_r(NULL, SCRIPT_SEPS, &save);
		double sec;
		int rc;

		if (!arg)
			return script_error(fp, "%s: missing argument", cmd);
		if ((rc = tc_parse_duration(arg, &sec)) < 0)
			return script_error(fp, "%s: bad argument '%s': %s", cmd, arg,
					    tc_duration_error(rc));
		if (strtok_r(NULL, SCRIPT_SEPS, &save))
			return script_error(fp, "%s: too many arguments", cmd);
		v = (uint64_t)(sec * 1e9 + 0.5);
		if (cmd[0] == 'd')
			fp->delay_ns = v;
		else
			fp->sleep_until = now + v;
		return 0;
	}
	if (!strcmp(cmd, "raw"))
		return script_raw(fp, &save, now);
	return script_error(fp, "unknown command '%s' (expected store, remove, offload, clear, "
			    "flush, gap, lose, restart, delay, sleep, raw, or a setting: rank, "
			    "medium, group, locality, lora, salt, mm)", cmd);
}

void script_open(struct fp *fp)
{
	const char *path = fp->o.script;

	fp->script_on = path != NULL;
	fp->script_fd = -1;
	if (!path)
		return;
	if (!strcmp(path, "-")) {
		fp->script_fd = STDIN_FILENO;
	} else {
		FILE *f = fopen(path, "r");

		if (!f) {
			fprintf(stderr, PROG ": cannot open --script %s: %s\n", path,
				strerror(errno));
			exit(1);
		}
		fp->script_fd = dup(fileno(f));
		fclose(f);
	}
	tc_grow(&fp->sbuf, &fp->scap, 65536 + 1, 1);
}

void script_step(struct fp *fp, uint64_t now)
{
	while (!fp->script_done && now >= fp->sleep_until && fp->exit_code == 0) {
		char *line = fp->sbuf + fp->sdone;
		char *nl = memchr(line, '\n', fp->slen - fp->sdone);
		size_t len = nl ? (size_t)(nl - line) : fp->slen - fp->sdone;

		if (!nl && !fp->script_eof)
			break;
		if (!nl && len == 0) {
			flush_pending(fp, fp->pending.n, now);
			fp->script_done = true;
			break;
		}
		fp->sline++;
		fp->sdone += len + (nl != NULL);
		if (memchr(line, '\0', len)) {
			script_error(fp, "NUL byte");
			break;
		}
		line[len] = '\0'; /* the newline, or the spare byte after a last unterminated line */
		if (script_line(fp, line, now))
			break;
		now = kvidx_now_ns(); /* a long line takes time; keep delays honest */
	}
	if (fp->sdone == fp->slen)
		fp->sdone = fp->slen = 0;
}

void script_read(struct fp *fp)
{
	ssize_t r;

	if (fp->sdone) {
		memmove(fp->sbuf, fp->sbuf + fp->sdone, fp->slen - fp->sdone);
		fp->slen -= fp->sdone;
		fp->sdone = 0;
	}
	if (fp->slen >= SCRIPT_LINE_MAX) {
		fp->sline++;
		script_error(fp, "longer than %u bytes", SCRIPT_LINE_MAX);
		return;
	}
	tc_grow(&fp->sbuf, &fp->scap, fp->slen + 65536 + 1, 1);
	r = read(fp->script_fd, fp->sbuf + fp->slen, fp->scap - fp->slen - 1);
	if (r < 0) {
		if (errno == EINTR || errno == EAGAIN)
			return;
		fprintf(stderr, PROG ": reading the script: %s\n", strerror(errno));
		fp->exit_code = 1;
		return;
	}
	if (r == 0)
		fp->script_eof = true;
	fp->slen += (size_t)r;
}

bool script_wants_input(const struct fp *fp)
{
	return fp->script_on && !fp->script_eof && !fp->script_done &&
	       !memchr(fp->sbuf + fp->sdone, '\n', fp->slen - fp->sdone);
}
