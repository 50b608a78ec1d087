/*
 * script.c — the fake pod's script language, for tests that need exact events, sequence
 * gaps, restarts, delayed delivery and malformed payloads: one command per line (store,
 * remove, clear, flush, gap, lose, restart, delay, sleep, raw; --help lists them), read from
 * a file or standard input as it arrives, without blocking the poll loop.
 *
 * A bad line ends the run with exit status 2, after a message naming the line.
 */
#include "fakepod.h"

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
	tc_grow(&fp->hbuf, &fp->hbuf_cap, nblocks, sizeof(*fp->hbuf));
	engine_chain(parent, fp->toks, nblocks, bs, fp->hbuf);
	ev_add_stored(fp, &fp->pending, fp->hbuf, nblocks, has_parent, parent, fp->toks,
		      nblocks * bs);
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

static int script_remove(struct fp *fp, char **save)
{
	char *arg;
	size_t n = 0;

	while ((arg = strtok_r(NULL, SCRIPT_SEPS, save))) {
		if (n == KVW_MAX_HASHES)
			return script_error(fp, "remove: more than %u hashes", KVW_MAX_HASHES);
		tc_grow(&fp->hbuf, &fp->hbuf_cap, n + 1, sizeof(*fp->hbuf));
		if (!tc_parse_hex64(arg, &fp->hbuf[n++]))
			return script_error(fp, "remove: bad hash '%s': expected 1 to 16 hex digits, "
					    "optionally prefixed by 0x", arg);
	}
	if (!n)
		return script_error(fp, "remove: expected at least one hash");
	ev_add_removed(fp, &fp->pending, fp->hbuf, n);
	return 0;
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
	bool store, remove, clear;
	struct action a;
	uint64_t v;

	if (!cmd || cmd[0] == '#')
		return 0;
	store = !strcmp(cmd, "store");
	remove = !strcmp(cmd, "remove");
	clear = !strcmp(cmd, "clear");
	if ((clear || !strcmp(cmd, "flush") || !strcmp(cmd, "restart")) &&
	    strtok_r(NULL, SCRIPT_SEPS, &save))
		return script_error(fp, "%s: no argument expected", cmd);
	if (store || remove || clear) {
		if (store && script_store(fp, &save))
			return -1;
		if (remove && script_remove(fp, &save))
			return -1;
		if (clear) {
			ev_add(fp, &fp->pending, KVW_ALL_BLOCKS_CLEARED);
			cache_clear(&fp->cache);
		}
		if (fp->pending.n >= fp->o.batch)
			flush_pending(fp, fp->pending.n, now);
		return 0;
	}
	/* Every other command publishes the pending batch first. */
	flush_pending(fp, fp->pending.n, now);
	memset(&a, 0, sizeof a);
	a.due = now + fp->delay_ns;
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
		if (script_count(fp, cmd, &save, 0, MAX_MS, &v))
			return -1;
		if (cmd[0] == 'd')
			fp->delay_ns = v * NS_PER_MS;
		else
			fp->sleep_until = now + v * NS_PER_MS;
		return 0;
	}
	if (!strcmp(cmd, "raw"))
		return script_raw(fp, &save, now);
	return script_error(fp, "unknown command '%s' (expected store, remove, clear, flush, gap, "
			    "lose, restart, delay, sleep or raw)", cmd);
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
