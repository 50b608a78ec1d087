/*
 * host.c — the benchmarks' view of the machine (see host.h): sleeping, shared memory, /proc
 * readings, /dev/shm's free space, the cache flush, pinning and a free port.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "benchlib.h"
#include "host.h"

volatile uint64_t bench_sink;

void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull),
			       .tv_nsec = (long)(t % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void sleep_ns(uint64_t ns)
{
	sleep_until_ns(now_ns() + ns);
}

void *shared_alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		bdie("mmap %zu shared bytes: %s", len, strerror(errno));
	return p;
}

uint64_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, stt = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &stt) != 2)
		return -1;
	return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

double loadavg1(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

uint64_t fit_shm_keys(uint64_t keys, double bytes_per_key, unsigned copies)
{
	struct statvfs sv;
	uint64_t k = keys;

	if (statvfs("/dev/shm", &sv) != 0)
		return keys;
	double avail = (double)sv.f_bavail * (double)sv.f_frsize;
	while (k > 65536 && (double)k * bytes_per_key * copies * 1.1 > avail)
		k /= 2;
	if (k != keys)
		fprintf(stderr, "%s: /dev/shm has %.0f MiB free: %" PRIu64 " keys instead of %"
			PRIu64 "\n", bl_prog, avail / 1048576.0, k, keys);
	return k;
}

void flush_llc(void)
{
	static uint64_t *buf;
	static const size_t words = (96ul << 20) / 8;
	uint64_t sum = 0;

	if (!buf) {
		buf = xcalloc(words, 8);
		for (size_t i = 0; i < words; i += 512)
			buf[i] = i;
	}
	for (size_t i = 0; i < words; i += 8)
		sum += buf[i];
	bench_sink += sum;
}

void touch_pages(const void *base, size_t size)
{
	uint64_t sum = 0;

	for (size_t off = 0; off < size; off += 4096)
		sum += ((const volatile uint8_t *)base)[off];
	bench_sink += sum;
}

void pin_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}
