/*
 * test_hostile.c — issue 10: what a failed start leaves behind, the writer's limits, and what
 * a reader (or a member of the index's group with write access to the registry) can do to the
 * writer. Each test here failed on the code before its fix.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inspect.h"
#include "kvidx_writer.h"
#include "segment.h"
#include "telemetry.h"
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

/* ---- item 6: the doorbell ---- */

/*
 * The old doorbell was an abstract socket named after the index: whoever bound the name first
 * had it. Now a squatter on that name changes nothing, and a commit from a reader in another
 * network namespace (root only) still makes the writer's descriptor readable.
 */
Test(hostile, doorbell_cannot_be_squatted)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "kvidx-doorbell-%s", name);
	int sq = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(sq, 0);
	cr_assert_eq(bind(sq, (struct sockaddr *)&a,
			  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)), 0);
	struct kvidx_writer_opts o = { .geo = { .capacity = 100, .max_readers = 4 } };
	w = tu_writer_open(name, &o);
	int fd = kvidx_writer_doorbell(w);
	cr_assert_geq(fd, 0, "doorbell: %s", strerror(-fd));
	cr_assert_eq(kvidx_writer_doorbell(w), fd, "one descriptor");

	for (int netns = 0; netns < 2; netns++) {
		if (netns && geteuid() != 0)
			break;
		cr_assert_eq(kvidx_writer_idle(w, true), false, "nothing waiting yet");
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			if (netns && unshare(CLONE_NEWNET) < 0)
				_exit(3);
			struct kvidx_reader *r = kvidx_reader_open(name);
			uint64_t key = 7;
			struct kvidx_route rt = { .corr_id = 1, .pod = 0, .prefill_pod = -1,
						  .keys = &key, .nkeys = 1 };
			_exit(!r || kvidx_commit(r, &rt) != 0);
		}
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "committer status %d", st);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		cr_assert_eq(poll(&p, 1, 10000), 1, "the commit did not ring (netns %d)", netns);
		kvidx_writer_idle(w, false);
		cr_assert_eq(poll(&p, 1, 0), 0, "idle(false) empties the doorbell");
		cr_assert_gt(kvidx_drain(w, 100, &(struct kvidx_drain_ops){ 0 }), 0);
	}
	char b[8];
	cr_assert_lt(recv(sq, b, sizeof(b), MSG_DONTWAIT), 0, "the squatter heard a wake-up");
	close(sq);
}
