/*
 * files.c — kvidx-ttl's files: the saved latency histograms (--save-histogram writes one,
 * --histogram reads one back) and the SVG drawing of the TTL curve (--svg).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "escape.h"
#include "segment.h"

/*
 * A saved histogram (--save-histogram writes one): lines "LOWER_US COUNT", each count added
 * to the bucket of LOWER_US; '#' starts a comment. 0, or -1 after a message.
 */
int load_hist(const char *path, uint64_t *c)
{
	FILE *f = fopen(path, "r");
	char line[256];
	unsigned ln = 0;

	memset(c, 0, KV_HIST_BUCKETS * sizeof(*c));
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, n;
		char extra;
		ln++;
		char *h = strchr(line, '#');
		if (h)
			*h = '\0';
		if (strspn(line, " \t\r\n") == strlen(line))
			continue;
		if (sscanf(line, "%llu %llu %c", &lo, &n, &extra) != 2) {
			fprintf(stderr, PROG ": %s:%u: expected LOWER_US COUNT\n", path, ln);
			fclose(f);
			return -1;
		}
		c[kv_hist_bucket(lo)] += n;
	}
	fclose(f);
	return 0;
}

/* Writes the histogram h (a snapshot) in load_hist()'s format. */
int save_hist(const char *path, const char *pod, const uint64_t h[KV_HIST_BUCKETS])
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "# kvidx recent route-to-confirmation latency histogram of pod ");
	tc_text_str(f, pod);
	fprintf(f, "\n# LOWER_US COUNT (bucket lower bound in microseconds; kvidx-ttl --histogram)\n");
	for (unsigned b = 0; b < KV_HIST_BUCKETS; b++) {
		uint64_t n = h[b];
		if (n)
			fprintf(f, "%" PRIu64 " %" PRIu64 "\n", kv_hist_lower(b), n);
	}
	if (fclose(f) != 0) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Writes n curves as an SVG file. */
int write_svg(const char *path, const struct sweep *sw, int n)
{
	FILE *f = fopen(path, "w");

	if (!f || sweep_svg(f, sw, n) < 0) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno ? errno : EIO));
		if (f)
			fclose(f);
		return -1;
	}
	if (fclose(f) != 0) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}
