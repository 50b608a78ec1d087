/*
 * error.c — kvidx_strerror() for the project's error codes, and the monotonic clock every
 * module timestamps with.
 */
#include <string.h>
#include <time.h>

#include "kvidx.h"

const char *kvidx_strerror(int err)
{
	switch (-err) {
	case KVIDX_EVERSION:
		return "segment layout version differs from this build (rebuild or recreate the index)";
	case KVIDX_ECORRUPT:
		return "segment is corrupt, truncated or not a kvidx segment";
	case KVIDX_EWRITER:
		return "another writer holds this index";
	case KVIDX_ERETRY:
		return "lookup raced a reader expulsion or generation switch; retry";
	case KVIDX_EFULL:
		return "table full and nothing could be evicted";
	case KVIDX_ENOSLOT:
		return "reader registry full (raise max_readers)";
	case KVIDX_ENOPOD:
		return "unknown pod or pod table full";
	}
	return err < 0 ? strerror(-err) : "success";
}

uint64_t kvidx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
