/*
 * host.h — what the benchmarks read from and ask of the machine they run on: the monotonic
 * clock and sleeping, memory shared with forked children, resident size and CPU time from
 * /proc, the load average, /dev/shm's free space, a cold cache, CPU pinning and a free
 * loopback port. now_ns() is inline: it brackets every measured operation.
 */
#ifndef KVIDX_BENCH_HOST_H
#define KVIDX_BENCH_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* Where measured loads are summed, so that the compiler keeps them. */
extern volatile uint64_t bench_sink;

/* CLOCK_MONOTONIC in nanoseconds (system-wide: comparable across processes). */
static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps until now_ns() reaches t (signals do not cut it short). */
void sleep_until_ns(uint64_t t);
void sleep_ns(uint64_t ns);

/* Anonymous memory shared with forked children; dies if it cannot be mapped. */
void *shared_alloc(size_t len);

/* Resident set size of this process in bytes (from /proc/self/statm; 0 if unknown). */
uint64_t rss_bytes(void);

/* CPU time (user + system) of process pid in seconds, from /proc/PID/stat; -1 if unknown. */
double proc_cpu_s(pid_t pid);

/* The 1-minute load average (-1 if unknown). */
double loadavg1(void);

/* Halves keys until segments of bytes_per_key x keys (x copies) fit in /dev/shm's free space,
 * saying so: a small /dev/shm (containers often give 64 MiB) would otherwise end the run with
 * SIGBUS. */
uint64_t fit_shm_keys(uint64_t keys, double bytes_per_key, unsigned copies);

/* Reads 2 x LLC-sized memory so that the next measurement starts with a cold cache. */
void flush_llc(void);

/* Reads one byte of every 4 KiB page of [base, base + size), as a long-running process has. */
void touch_pages(const void *base, size_t size);

/* Pins the calling process to CPU cpu. */
void pin_cpu(int cpu);

/* A TCP port on 127.0.0.1 that nobody listened on a moment ago; -1 if none was found. */
int free_port(void);

#endif /* KVIDX_BENCH_HOST_H */
