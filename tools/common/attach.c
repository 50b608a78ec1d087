/*
 * attach.c — attaching a tool to an index as a reader, with the tools' error messages (see
 * attach.h).
 */
#include "attach.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "segment.h"

const char *tc_index_name_arg(const char *arg)
{
	if (kv_name_check(arg) < 0)
		tc_usage_error("bad --name '%s': expected 1 to %d of [A-Za-z0-9_.-], not starting "
			       "with '.'", arg, KVIDX_NAME_MAX - 1);
	return arg;
}

struct kvidx_reader *tc_index_open(const char *name)
{
	struct kvidx_reader *r = kvidx_reader_open(name);
	int rc;

	if (r)
		return r;
	rc = -errno;
	if (rc == -ENOENT) {
		char dev[KV_SHM_PATH_MAX + 16];

		snprintf(dev, sizeof(dev), "/dev/shm/%s", name);
		if (access(dev, F_OK) == 0)
			fprintf(stderr,
				"%s: index '%s' has no live data segment (its writer is "
				"creating it, or died while building it)\n",
				tc_prog, name);
		else
			fprintf(stderr,
				"%s: index '%s' not found (no /dev/shm/%s; is kvidx-ingestd "
				"running?)\n",
				tc_prog, name, name);
	} else if (rc == -EACCES) {
		fprintf(stderr,
			"%s: index '%s': %s (segments are readable by their owner, or by the group "
			"given to the writer)\n",
			tc_prog, name, kvidx_strerror(rc));
	} else {
		fprintf(stderr, "%s: index '%s': %s\n", tc_prog, name, kvidx_strerror(rc));
	}
	return NULL;
}

int tc_index_info(struct kvidx_reader *r, const char *name, struct kvidx_info *info)
{
	int rc = kvidx_reader_info(r, info);

	if (rc == -KVIDX_ERETRY)
		rc = kvidx_reader_info(r, info);
	if (rc < 0)
		fprintf(stderr, "%s: index '%s': reading the header: %s\n", tc_prog, name,
			kvidx_strerror(rc));
	return rc;
}
