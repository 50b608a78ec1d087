/*
 * kvidx-hash — prints the request keys of a token sequence (DESIGN.md section 3).
 *
 * A debugging aid for routers and for ingestd: given prompt tokens, it prints the key of
 * every full block exactly as kvidx_key_root() and kvidx_key_chain() compute them, so keys
 * seen in an index, in a router log or in llm-d can be checked by hand. Uses nothing of the
 * library but lib/keys.c.
 *
 * Exit status: 0 on success, 2 on bad usage (unknown flag, bad value, bad token), 1 on an
 * I/O or memory error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvidx.h"
#include "parse.h"

#define PROG "kvidx-hash"
#define SEPARATORS " \t\n\r\v\f,"

static void usage(FILE *f)
{
	fputs("Usage: " PROG " [OPTION]... [TOKEN]...\n"
	      "Prints the request key of each full block of TOKENs, one per line as 0x and 16\n"
	      "hex digits. A trailing partial block is dropped. Without TOKEN arguments, tokens\n"
	      "are read from standard input. Tokens are decimal unsigned 32-bit integers,\n"
	      "separated by whitespace or commas (in arguments too).\n"
	      "\n"
	      "  --algo ALGO        key algorithm: cbor-fnv (default, llm-d compatible) or xxh64\n"
	      "  --seed S           hash seed string (default \"\"; llm-d's hashSeed, vLLM's\n"
	      "                     PYTHONHASHSEED)\n"
	      "  --model M          model (or LoRA) name the root key is derived from (default \"\")\n"
	      "  --block-size N     tokens per block, 1..4294967295 (default 16)\n"
	      "  --parent HEX       chain from this key (e.g. 0x8464eee8f2cf3412) instead of the\n"
	      "                     model's root key; --seed and --model are then unused\n"
	      "  -h, --help         print this help and exit\n"
	      "\n"
	      "Exit status: 0 on success, 1 on an I/O or memory error, 2 on bad usage or a bad token.\n"
	      "Example: " PROG " --model test-model $(seq 1 16)   prints 0x8464eee8f2cf3412\n",
	      f);
}

struct tokens {
	uint32_t *v;
	size_t n, cap;
};

static void tokens_push(struct tokens *t, uint32_t tok)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 1024;
		uint32_t *v = realloc(t->v, cap * sizeof(*v));

		if (!v) {
			fprintf(stderr, PROG ": out of memory after %zu tokens\n", t->n);
			exit(1);
		}
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n++] = tok;
}

/* Splits s (modified in place) at whitespace and commas and appends each token. */
static void tokens_add_text(struct tokens *t, char *s, const char *where)
{
	char *save = NULL, *tok;

	for (tok = strtok_r(s, SEPARATORS, &save); tok; tok = strtok_r(NULL, SEPARATORS, &save)) {
		uint64_t v;

		if (!tc_parse_dec(tok, UINT32_MAX, &v)) {
			fprintf(stderr,
				PROG ": bad token '%s' %s: expected a decimal integer 0..%" PRIu32 "\n",
				tok, where, UINT32_MAX);
			exit(2);
		}
		tokens_push(t, (uint32_t)v);
	}
}

/* Reads all of stdin into one NUL-terminated buffer. */
static char *read_stdin(void)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);

	if (!buf)
		goto nomem;
	for (;;) {
		size_t r;

		if (cap - len < 2) {
			char *nbuf = realloc(buf, 2 * cap);

			if (!nbuf)
				goto nomem;
			buf = nbuf;
			cap *= 2;
		}
		r = fread(buf + len, 1, cap - len - 1, stdin);
		len += r;
		if (r == 0) {
			if (ferror(stdin)) {
				fprintf(stderr, PROG ": reading standard input: %s\n", strerror(errno));
				exit(1);
			}
			break;
		}
	}
	if (memchr(buf, '\0', len)) {
		fputs(PROG ": bad token on standard input: NUL byte\n", stderr);
		exit(2);
	}
	buf[len] = '\0';
	return buf;
nomem:
	fputs(PROG ": out of memory reading standard input\n", stderr);
	exit(1);
}

int main(int argc, char **argv)
{
	enum { OPT_ALGO = 256, OPT_SEED, OPT_MODEL, OPT_BLOCK_SIZE, OPT_PARENT };
	static const struct option longopts[] = {
		{ "algo", required_argument, NULL, OPT_ALGO },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "model", required_argument, NULL, OPT_MODEL },
		{ "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
		{ "parent", required_argument, NULL, OPT_PARENT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	enum kvidx_key_algo algo = KVIDX_KEY_CBOR_FNV;
	const char *seed = "", *model = "";
	uint32_t block_size = 16;
	bool have_parent = false;
	uint64_t parent = 0, v, *keys;
	struct tokens toks = { 0 };
	size_t nkeys, i;
	int c, optidx;

	tc_prog = PROG;
	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, &optidx)) != -1) {
		switch (c) {
		case OPT_ALGO:
			if (kvidx_key_algo_parse(optarg, &algo))
				tc_usage_error("bad --algo '%s': expected cbor-fnv or xxh64",
					       optarg);
			break;
		case OPT_SEED:
			seed = optarg;
			break;
		case OPT_MODEL:
			model = optarg;
			break;
		case OPT_BLOCK_SIZE:
			if (!tc_parse_dec(optarg, UINT32_MAX, &v) || v == 0)
				tc_usage_error("bad --block-size '%s': expected a decimal integer "
					       "1..%" PRIu32, optarg, UINT32_MAX);
			block_size = (uint32_t)v;
			break;
		case OPT_PARENT:
			if (!tc_parse_hex64(optarg, &parent))
				tc_usage_error("bad --parent '%s': expected 1 to 16 hex digits, "
					       "optionally prefixed by 0x", optarg);
			have_parent = true;
			break;
		case 'h':
			usage(stdout);
			return tc_flush_stdout();
		default: /* ':' or '?' */
			tc_getopt_error(c, argv);
		}
	}

	if (optind < argc) {
		for (i = (size_t)optind; i < (size_t)argc; i++)
			tokens_add_text(&toks, argv[i], "in arguments");
	} else {
		char *text = read_stdin();

		tokens_add_text(&toks, text, "on standard input");
		free(text);
	}

	if (!have_parent)
		parent = kvidx_key_root(algo, seed, model);
	nkeys = toks.n / block_size;
	keys = malloc((nkeys ? nkeys : 1) * sizeof(*keys));
	if (!keys) {
		fprintf(stderr, PROG ": out of memory for %zu keys\n", nkeys);
		return 1;
	}
	nkeys = kvidx_key_chain(algo, parent, toks.v, toks.n, block_size, keys, nkeys);
	for (i = 0; i < nkeys; i++)
		printf("0x%016llx\n", (unsigned long long)keys[i]);
	free(keys);
	free(toks.v);
	return tc_flush_stdout();
}
