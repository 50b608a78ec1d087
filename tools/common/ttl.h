/*
 * ttl.h — internal to the tools: the one TTL core, the arithmetic of docs/ttl.md ("The
 * arithmetic", "The price of a failed prediction") as plain functions, used by kvidx-ingestd's
 * adaptive policy (tools/ingestd/spec.c) and by kvidx-ttl alike (the duration grammar of every
 * tool's flags is duration.h's). Never installed.
 *
 *   T = Lq + J          Lq a high percentile of route-to-confirmation latency, J explicit
 *                       slack (subscriber backlog + timing slack)
 *   recommended = clamp(T, floor, cap)
 *   exposure = lambda x p x TTL   live failed predictions, in requests' worth (lambda routed
 *                       requests per second, p the failed-prediction probability)
 *
 * Everything is computed in double-precision seconds and rounded only when printed ("round
 * only after the arithmetic"). The formatters write into caller buffers and never fail: a
 * too-small buffer truncates (snprintf semantics). No state; thread-safe.
 */
#ifndef KVIDX_TOOLS_TTL_H
#define KVIDX_TOOLS_TTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The documented llm-d default TTL, compared against when nothing else is (seed). */
#define TTL_DEFAULT_S 2.0
/* Parses a plain non-negative decimal number ("120", "0.5"). 0 or -EINVAL. */
int ttl_parse_number(const char *s, double *v);

/* Parses a probability in [0, 1], either plain ("0.004") or as a percentage ("0.4%").
 * 0, -EINVAL (not a number) or -ERANGE (above 1, or 100%). */
int ttl_parse_probability(const char *s, double *p);

/* One TTL computation. Fill the inputs, call ttl_plan_compute(), read the results. */
struct ttl_plan {
	/* Inputs, seconds. floor 0: none. cap must be > 0 and >= floor. */
	double lq, backlog, slack, floor, cap;
	/* Results. */
	double j;   /* backlog + slack */
	double t;   /* lq + j */
	double rec; /* clamp(t, floor, cap) */
	int bound;  /* 0: rec == t; 1: capped (t > cap); -1: raised to the floor (t < floor) */
};
void ttl_plan_compute(struct ttl_plan *p);

/*
 * The adaptive policy's next TTL, in whole milliseconds: the target is the plan's
 * recommendation, clamp(Lq + J, floor, cap), rounded up to the millisecond (ttl_ms_ceil());
 * the TTL in force, cur_ms, moves toward it by at most max_step x cur_ms (at least 1 ms), so
 * that it changes slowly (docs/ttl.md: change the TTL slowly), and stays within [floor, cap].
 * floor and cap of p are whole milliseconds here.
 */
uint32_t ttl_step(uint32_t cur_ms, const struct ttl_plan *p, double max_step);

/* lambda x p x ttl: the steady-state count of live failed predictions (seed). */
double ttl_exposure(double lambda, double p, double ttl);

/* sec as whole milliseconds, rounded up (a TTL must cover its interval), after rounding to
 * the microsecond so that 1.5000000000000002 s is 1500 ms, not 1501. Saturates at UINT32_MAX. */
uint32_t ttl_ms_ceil(double sec);

/* "1.500 s": seconds with three decimals, for the arithmetic lines. Returns buf. */
char *ttl_fmt_fixed(char *buf, size_t n, double sec);
/* A duration in the largest fitting unit, up to three decimals, trailing zeros dropped:
 * "2 s", "1.5 s", "500 ms", "12.5 ms", "250 us". Negative values get a minus sign. */
char *ttl_fmt_dur(char *buf, size_t n, double sec);
/* A plain number to three significant digits, never in exponent form: "0.72", "2.4", "120",
 * "0.004", "12346". */
char *ttl_fmt_num(char *buf, size_t n, double v);
/* A percentile q in (0, 1] as a name: 0.99 -> "p99", 0.999 -> "p99.9", 1 -> "p100". */
char *ttl_fmt_pct_name(char *buf, size_t n, double q);

/* "T = Lq + J = 1.150 s + (0.250 s backlog + 0.100 s slack) = 1.500 s" */
char *ttl_fmt_arith(char *buf, size_t n, const struct ttl_plan *p);
/*
 * The recommendation against the floor and cap, e.g.
 *   "recommended TTL 1.500 s (ttl_ms 1500): T is under the 5 s cap, 3.5 s to spare"
 *   "recommended TTL 5.000 s (ttl_ms 5000): capped, T = 6.200 s exceeds the 5 s cap by 1.2 s;
 *    confirmations slower than the cap will expire early"
 */
char *ttl_fmt_recommend(char *buf, size_t n, const struct ttl_plan *p);
/*
 * A setting compared with T:
 *   "a 2 s setting would leave 500 ms of additional room"
 *   "a 1 s setting would fall 500 ms short of T: expect early expiries"
 *   "a 1.5 s setting would leave no additional room"  (within half a microsecond)
 */
char *ttl_fmt_room(char *buf, size_t n, double setting, double t);
/* "120 /s x 0.004 x 1.500 s = 0.72 requests' worth of live failed predictions" */
char *ttl_fmt_exposure(char *buf, size_t n, double lambda, double p, double ttl);

#endif /* KVIDX_TOOLS_TTL_H */
