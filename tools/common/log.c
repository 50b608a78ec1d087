/*
 * log.c — the tools' logging: timestamped, levelled lines on stderr, and a per-source rate
 * limiter (see log.h).
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvidx.h"

static enum ilog_level cur_level = ILOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const char *const level_tags[] = { "ERROR", "WARN ", "INFO ", "DEBUG" };

void ilog_set_level(enum ilog_level level)
{
	cur_level = level;
}

int ilog_level_parse(const char *s, enum ilog_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (!strcmp(s, level_names[i])) {
			*out = (enum ilog_level)i;
			return 0;
		}
	}
	if (!strcmp(s, "warning")) {
		*out = ILOG_WARN;
		return 0;
	}
	return -EINVAL;
}

static void vlog(enum ilog_level level, const char *suffix, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
static void vlog(enum ilog_level level, const char *suffix, const char *fmt, va_list ap)
{
	char line[1024 + 64];
	struct timespec ts;
	struct tm tm;
	size_t n;
	int k;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	k = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
		     level_tags[level]);
	n += k > 0 ? (size_t)k : 0;
	k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	if (k > 0)
		n = n + (size_t)k < sizeof(line) - 1 ? n + (size_t)k : sizeof(line) - 2;
	if (suffix && n < sizeof(line) - 1) {
		k = snprintf(line + n, sizeof(line) - n - 1, "%s", suffix);
		if (k > 0)
			n = n + (size_t)k < sizeof(line) - 1 ? n + (size_t)k : sizeof(line) - 2;
	}
	line[n++] = '\n';
	/* One write: lines never interleave. A short or failed write to stderr is not worth
	 * more than this attempt. */
	ssize_t wr = write(STDERR_FILENO, line, n);
	(void)wr;
}

void ilog(enum ilog_level level, const char *fmt, ...)
{
	va_list ap;

	if (level > cur_level)
		return;
	va_start(ap, fmt);
	vlog(level, NULL, fmt, ap);
	va_end(ap);
}

bool ilog_limit_pass(struct ilog_limit *lim, uint64_t *suppressed)
{
	uint64_t now = kvidx_now_ns();

	if (now < lim->next_ns) {
		lim->suppressed++;
		return false;
	}
	*suppressed = lim->suppressed;
	lim->suppressed = 0;
	lim->next_ns = now + 1000000000ull;
	return true;
}

void ilog_limited(struct ilog_limit *lim, enum ilog_level level, const char *fmt, ...)
{
	char suffix[64] = "";
	uint64_t suppressed;
	va_list ap;

	if (level > cur_level || !ilog_limit_pass(lim, &suppressed))
		return;
	if (suppressed)
		snprintf(suffix, sizeof(suffix), " (%llu similar suppressed)",
			 (unsigned long long)suppressed);
	va_start(ap, fmt);
	vlog(level, suffix, fmt, ap);
	va_end(ap);
}
