/*
 * test_hostile.c — issue 10: what a failed start leaves behind, the writer's limits, and what
 * a reader (or a member of the index's group with write access to the registry) can do to the
 * writer. Each test here failed on the code before its fix.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "layout.h"
#include "segment.h"
#include "util_index.h"
#include "util_run.h"

static char name[64];
static struct kvidx *w;

static void init(void)
{
	tu_index_name(name, sizeof(name), "hostile");
}

static void fini(void)
{
	tu_index_remove(name, &w);
}

TestSuite(hostile, .init = init, .fini = fini);

/* How many entries of /dev/shm belong to index name ("NAME" or "NAME.*"). */
static int shm_entries(const char *n)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t len = strlen(n);
	int count = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, n, len) && (e->d_name[len] == 0 || e->d_name[len] == '.'))
			count++;
	closedir(d);
	return count;
}

/* ---- item 2: limits checked before anything is created ---- */

Test(hostile, check_names_the_limit)
{
	struct kvidx_writer_opts o = { .name = name, .geo = { .capacity = 1ull << 32 } };
	struct kvidx_limit lim;

	cr_assert_eq(kvidx_writer_check(&o, &lim), -EINVAL);
	cr_assert_str_eq(lim.field, "capacity");
	cr_assert_eq(lim.max, KVIDX_MAX_CAPACITY);
	cr_assert_eq(lim.value, 1ull << 32);
	cr_assert_null(lim.depends);
	cr_assert(strstr(lim.reason, "capacity 4294967296"), "%s", lim.reason);

	/* The default records (2 x capacity) do not fit the arena at the largest capacity. */
	o.geo.capacity = KVIDX_MAX_CAPACITY;
	cr_assert_eq(kvidx_writer_check(&o, &lim), -EINVAL);
	cr_assert_str_eq(lim.field, "records");
	cr_assert_str_eq(lim.depends, "capacity");
	cr_assert_eq(lim.dep_value, KVIDX_MAX_CAPACITY);
	cr_assert_lt(lim.max, lim.value);
	o.geo.records = lim.max;
	cr_assert_eq(kvidx_writer_check(&o, NULL), 0, "the limit it names is allowed");

	struct { struct kvidx_writer_opts o; const char *field; } bad[] = {
		{ { .geo = { .pods_per_key = 65 } }, "pods_per_key" },
		{ { .geo = { .max_pods = 5000 } }, "max_pods" },
		{ { .geo = { .max_readers = 4097 } }, "max_readers" },
		{ { .geo = { .ring_entries = 100 } }, "ring_entries" },
		{ { .block_size = 1u << 31 }, "block_size" },
		{ { .stall_ms = KVIDX_MAX_STALL_MS + 1 }, "stall_ms" },
		{ { .seed = "0123456789012345678901234567890123456789012345678901234567890123" },
		  "seed" },
		{ { .name = "../etc" }, "name" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (!bad[i].o.name)
			bad[i].o.name = name;
		cr_assert_eq(kvidx_writer_check(&bad[i].o, &lim), -EINVAL, "%s", bad[i].field);
		cr_assert_str_eq(lim.field, bad[i].field);
		cr_assert_eq(kvidx_writer_open(&bad[i].o), NULL);
		cr_assert_eq(errno, EINVAL);
	}
	cr_assert_eq(shm_entries(name), 0);
}

Test(hostile, failed_start_leaves_nothing)
{
	struct kvidx_writer_opts o = { .name = name,
				       .geo = { .capacity = 1ull << 32, .max_readers = 4 } };

	/* The old writer created the registry, then failed on the data segment's geometry,
	 * leaving /dev/shm/NAME with 4 reader slots for every later start. */
	cr_assert_null(kvidx_writer_open(&o));
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(shm_entries(name), 0, "a failed start left segments in /dev/shm");
	o.geo = (struct kvidx_geometry){ .capacity = KVIDX_MAX_CAPACITY };
	cr_assert_null(kvidx_writer_open(&o));
	cr_assert_eq(shm_entries(name), 0);
	o.geo = (struct kvidx_geometry){ .capacity = 1000, .max_readers = 128 };
	w = tu_writer_open(name, &o);
	struct kvidx_reader *r = kvidx_reader_open(name);
	struct kvidx_info in;
	cr_assert_not_null(r);
	cr_assert_eq(kvidx_reader_info(r, &in), 0);
	cr_assert_eq(in.geo.max_readers, 128);
	kvidx_reader_close(r);
}

/* kvidx-ingestd: loose numbers and geometry refused up front, naming the flag and the range;
 * nothing left in /dev/shm. */
Test(hostile, ingestd_refuses_limits)
{
	static const struct { const char *args, *want; } cases[] = {
		{ "--block-size 2147483648", "block-size: 2147483648 is out of range (1..65536)" },
		{ "--capacity 0", "capacity: 0 is out of range (1..2147483648)" },
		{ "--capacity 4294967296 --max-readers 4",
		  "capacity: 4294967296 is out of range (1..2147483648)" },
		{ "--capacity 2147483648", "--capacity 2147483648 needs --records at most" },
		{ "--capacity 1g --records 3g", "--records 3221225472 with --capacity 1073741824: "
						"at most" },
		{ "--records 0", "records: 0 is out of range" },
		{ "--max-readers 0", "max-readers: 0 is out of range (1..4096)" },
		{ "--max-readers 5000", "max-readers: 5000 is out of range (1..4096)" },
		{ "--pods-per-key 65", "pods-per-key: 65 is out of range (1..64)" },
		{ "--max-pods 5000", "max-pods: 5000 is out of range (1..4096)" },
		{ "--stall-ms 0", "stall-ms: 0 is out of range" },
		{ "--engine-map 0", "engine-map: 0 is out of range" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tu_run r = tu_run_tool("kvidx-ingestd", "--name %s %s --pod tcp://127.0.0.1:1 "
					      "2>&1", name, cases[i].args);
		cr_assert_eq(r.status, 2, "%s: exit %d: %s", cases[i].args, r.status, r.out);
		cr_assert(strstr(r.out, cases[i].want), "%s: got '%s', want '%s'", cases[i].args,
			  r.out, cases[i].want);
		free(r.out);
		cr_assert_eq(shm_entries(name), 0, "%s left segments behind", cases[i].args);
	}
}
