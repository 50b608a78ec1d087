/*
 * kvidx-hash — prints the request keys of a token sequence (docs/keys.md).
 *
 * A debugging aid for routers and for ingestd: given prompt tokens, it prints the key of
 * every full block exactly as kvidx_key_root() and kvidx_key_chain_ex() compute them (a
 * LoRA adapter's root, the cache salt, multimodal items), so keys seen in an index, in a
 * router log or in llm-d can be checked by hand. Uses nothing of the library but lib/keys.c.
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
#include "kvidx_writer.h" /* KVIDX_MAX_BLOCK_SIZE: what an index can be built with */
#include "parse.h"

#define PROG "kvidx-hash"
#define SEPARATORS " \t\n\r\v\f,"
#define KVIDX_STR_(x) #x
#define KVIDX_STR(x) KVIDX_STR_(x)

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
	      "  --model M          model name the root key is derived from (default \"\")\n"
	      "  --lora NAME        LoRA adapter: the root key is derived from NAME instead of\n"
	      "                     --model's M (vLLM's lora_name; the base model is not keyed)\n"
	      "  --salt S           vLLM cache_salt, keyed on block 0 after its multimodal items\n"
	      "                     (an empty S is no salt, as in vLLM)\n"
	      "  --mm START:LEN:ID  a multimodal item on tokens [START, START+LEN) with identifier\n"
	      "                     ID (vLLM's mm hash; not empty, may contain ':'); START and LEN\n"
	      "                     0..4294967295. Repeatable, up to "
	      KVIDX_STR(KVIDX_KEY_MAX_MM) " items, in any order; a\n"
	      "                     block keys the ID of every item overlapping it, in START order\n"
	      "  --block-size N     tokens per block, 1..65536 (default 16)\n"
	      "  --parent HEX       chain from this key (e.g. 0x8464eee8f2cf3412) instead of the\n"
	      "                     model's root key; --seed, --model and --lora are then unused,\n"
	      "                     and the first block given counts as block 0 for --salt and\n"
	      "                     --mm positions\n"
	      "  -h, --help         print this help and exit\n"
	      "\n"
	      "Exit status: 0 on success, 1 on an I/O or memory error, 2 on bad usage or a bad token.\n"
	      "Example: " PROG " --model test-model $(seq 1 16)   prints 0x8464eee8f2cf3412\n"
	      "         " PROG " --lora sql-adapter --salt s3cret --mm 20:20:img0 $(seq 1 48)\n",
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

/*
 * Parses --mm's START:LEN:ID into it (ID points into arg). START and LEN are decimal
 * 0..UINT32_MAX; ID is everything after the second ':' and must not be empty.
 */
static void parse_mm(const char *arg, struct kvidx_mm_item *it)
{
	char num[2][16];
	const char *p = arg, *colon;
	uint64_t v[2];
	int f;

	for (f = 0; f < 2; f++) {
		colon = strchr(p, ':');
		if (!colon || (size_t)(colon - p) >= sizeof(num[f]))
			goto bad;
		memcpy(num[f], p, (size_t)(colon - p));
		num[f][colon - p] = '\0';
		if (!tc_parse_dec(num[f], UINT32_MAX, &v[f]))
			goto bad;
		p = colon + 1;
	}
	if (!*p)
		goto bad;
	it->start = (uint32_t)v[0];
	it->len = (uint32_t)v[1];
	it->id = p;
	return;
bad:
	tc_usage_error("bad --mm '%s': expected START:LEN:ID, START and LEN decimal integers "
		       "0..%" PRIu32 " and ID not empty", arg, UINT32_MAX);
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

/* What the flags ask for: the key scheme, the chain's root or parent, the extras. */
struct hash_opts {
	enum kvidx_key_algo algo;
	const char *seed, *model, *lora;
	struct kvidx_mm_item mm[KVIDX_KEY_MAX_MM];
	struct kvidx_key_extras ex;
	uint32_t block_size;
	bool have_parent;
	uint64_t parent;
};

enum { OPT_ALGO = 256, OPT_SEED, OPT_MODEL, OPT_LORA, OPT_SALT, OPT_MM, OPT_BLOCK_SIZE,
       OPT_PARENT };

static const struct option longopts[] = {
	{ "algo", required_argument, NULL, OPT_ALGO },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "lora", required_argument, NULL, OPT_LORA },
	{ "salt", required_argument, NULL, OPT_SALT },
	{ "mm", required_argument, NULL, OPT_MM },
	{ "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
	{ "parent", required_argument, NULL, OPT_PARENT },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* The flags into o (exits 2 with a message on bad usage); returns optind. */
static int parse_args(int argc, char **argv, struct hash_opts *o)
{
	uint64_t v;
	int c, optidx;

	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, &optidx)) != -1) {
		switch (c) {
		case OPT_ALGO:
			if (kvidx_key_algo_parse(optarg, &o->algo))
				tc_usage_error("bad --algo '%s': expected cbor-fnv or xxh64",
					       optarg);
			break;
		case OPT_SEED:
			/* No longer than an index can record, or no index would match. */
			if (strlen(optarg) >= sizeof(((struct kvidx_info *)0)->seed))
				tc_usage_error("bad --seed: %zu bytes; an index holds at most %zu",
					       strlen(optarg),
					       sizeof(((struct kvidx_info *)0)->seed) - 1);
			o->seed = optarg;
			break;
		case OPT_MODEL:
			o->model = optarg;
			break;
		case OPT_LORA:
			if (!*optarg)
				tc_usage_error("bad --lora '': expected a LoRA adapter name");
			o->lora = optarg;
			break;
		case OPT_SALT:
			o->ex.salt = optarg;
			break;
		case OPT_MM:
			if (o->ex.nmm == KVIDX_KEY_MAX_MM)
				tc_usage_error("too many --mm items: at most %d", KVIDX_KEY_MAX_MM);
			parse_mm(optarg, &o->mm[o->ex.nmm++]);
			break;
		case OPT_BLOCK_SIZE:
			if (!tc_parse_dec(optarg, KVIDX_MAX_BLOCK_SIZE, &v) || v == 0)
				tc_usage_error("bad --block-size '%s': expected a decimal integer "
					       "1..%u (what an index can be built with)", optarg,
					       (unsigned)KVIDX_MAX_BLOCK_SIZE);
			o->block_size = (uint32_t)v;
			break;
		case OPT_PARENT:
			if (!tc_parse_hex64(optarg, &o->parent))
				tc_usage_error("bad --parent '%s': expected 1 to 16 hex digits, "
					       "optionally prefixed by 0x", optarg);
			o->have_parent = true;
			break;
		default: /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
		}
	}
	return optind;
}

int main(int argc, char **argv)
{
	static struct hash_opts o = { .algo = KVIDX_KEY_CBOR_FNV, .seed = "", .model = "",
				      .block_size = 16 };
	struct tokens toks = { 0 };
	uint64_t *keys;
	size_t nkeys, i;

	tc_prog = PROG;
	o.ex.mm = o.mm;
	int first = parse_args(argc, argv, &o);
	if (first < argc) {
		for (i = (size_t)first; i < (size_t)argc; i++)
			tokens_add_text(&toks, argv[i], "in arguments");
	} else {
		char *text = read_stdin();

		tokens_add_text(&toks, text, "on standard input");
		free(text);
	}

	if (!o.have_parent)
		o.parent = kvidx_key_root(o.algo, o.seed, o.lora ? o.lora : o.model);
	nkeys = toks.n / o.block_size;
	keys = malloc((nkeys ? nkeys : 1) * sizeof(*keys));
	if (!keys) {
		fprintf(stderr, PROG ": out of memory for %zu keys\n", nkeys);
		return 1;
	}
	nkeys = kvidx_key_chain_ex(o.algo, o.parent, toks.v, toks.n, o.block_size, &o.ex, keys,
				   nkeys);
	for (i = 0; i < nkeys; i++)
		printf("0x%016llx\n", (unsigned long long)keys[i]);
	free(keys);
	free(toks.v);
	return tc_flush_stdout();
}
