/*
 * minrouter.c — the smallest router on kvidx, built outside the tree against an installed
 * library: cc minrouter.c $(pkg-config --cflags --libs kvidx). The install test builds it so.
 *
 *   minrouter INDEX MODEL TOKEN...
 *
 * Attaches to INDEX, computes the prompt's keys with the index's own key scheme (algorithm,
 * seed and block size from its header), scores every pod holding block 0 and prints one line
 * per pod, then "best NAME" (the pod with the highest score; "best -" when none holds block
 * 0). Exit status 0, or 1 with kvidx's message on a failed call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvidx.h>

#define MAX_TOKENS 65536
#define MAX_PODS 256

int main(int argc, char **argv)
{
	static uint32_t tokens[MAX_TOKENS];
	static uint64_t keys[MAX_TOKENS];
	static struct kvidx_score rows[MAX_PODS];
	struct kvidx_info info;
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];
	size_t nt = 0;
	int rc;

	if (argc < 3) {
		fputs("usage: minrouter INDEX MODEL TOKEN...\n", stderr);
		return 2;
	}
	for (int i = 3; i < argc && nt < MAX_TOKENS; i++)
		tokens[nt++] = (uint32_t)strtoul(argv[i], NULL, 10);

	struct kvidx_reader *r = kvidx_reader_open(argv[1]);
	if (!r) {
		fprintf(stderr, "minrouter: %s: %s\n", argv[1], kvidx_strerror(-errno));
		return 1;
	}
	rc = kvidx_reader_info(r, &info);
	if (rc < 0)
		goto fail;
	uint64_t root = kvidx_key_root(info.algo, info.seed, argv[2]);
	size_t nk = kvidx_key_chain(info.algo, root, tokens, nt, info.block_size, keys, MAX_TOKENS);

	/* -KVIDX_ERETRY: this reader was expelled while stalled and has re-registered. */
	rc = kvidx_score(r, keys, nk, NULL, 0, NULL, rows, MAX_PODS);
	if (rc == -KVIDX_ERETRY)
		rc = kvidx_score(r, keys, nk, NULL, 0, NULL, rows, MAX_PODS);
	if (rc < 0)
		goto fail;

	int best = -1;
	for (int i = 0; i < rc; i++) {
		const struct kvidx_score *s = &rows[i];
		if (kvidx_reader_pod(r, s->pod, name, model) < 0)
			continue;
		printf("%s blocks=%u spec=%u gpu=%u cpu=%u disk=%u spec_run=%u score=%.3f\n", name,
		       s->blocks, s->spec_blocks, s->run[0], s->run[1], s->run[2], s->spec_run,
		       s->score);
		if (best < 0 || s->score > rows[best].score)
			best = i;
	}
	if (best >= 0 && kvidx_reader_pod(r, rows[best].pod, name, model) == 0)
		printf("best %s\n", name);
	else
		printf("best -\n");
	kvidx_reader_close(r);
	return 0;
fail:
	fprintf(stderr, "minrouter: %s\n", kvidx_strerror(rc));
	kvidx_reader_close(r);
	return 1;
}
