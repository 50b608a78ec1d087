/*
 * log.h — internal to the tools (ingestd, fakepod, the metrics server): its one job is
 * logging to stderr, one line per message with a UTC timestamp and a level, plus a rate
 * limiter for messages that input can trigger at will (malformed payloads, pods that
 * misbehave), so that no pod can flood the log.
 */
#ifndef KVIDX_INGEST_LOG_H
#define KVIDX_INGEST_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum ilog_level {
	ILOG_ERROR = 0,
	ILOG_WARN,
	ILOG_INFO,
	ILOG_DEBUG,
};

/* Messages above this level are dropped (default ILOG_INFO). Not thread-safe to change. */
void ilog_set_level(enum ilog_level level);

/* "error", "warn", "info", "debug" -> level. 0 or -EINVAL. */
int ilog_level_parse(const char *s, enum ilog_level *out);

/*
 * Writes "2025-06-01T12:00:00.123Z WARN  message\n" to stderr with one write(2), so lines of
 * concurrent writers never interleave. Never blocks beyond that write; messages longer than
 * 1 KiB are truncated.
 */
void ilog(enum ilog_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A rate limiter: ilog_limited() lets at most one message through per second per limiter and
 * counts the rest; the next message let through says how many were suppressed. Zero-initialise.
 */
struct ilog_limit {
	uint64_t next_ns;
	uint64_t suppressed;
};

void ilog_limited(struct ilog_limit *lim, enum ilog_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * The limiter of ilog_limited() alone, for a tool that prints its messages in its own format
 * (kvidx-fakepod): true when a message may go out now, *suppressed then being the number held
 * back since the last one let through; false when this one is to be counted and dropped.
 */
bool ilog_limit_pass(struct ilog_limit *lim, uint64_t *suppressed);

#endif /* KVIDX_INGEST_LOG_H */
