/*
 * report.h — the benchmarks' result rows: one fixed-width table line on stdout per row and,
 * with --json FILE, one JSON object per line appended to FILE, which bench/run.sh joins into
 * results.json (its header comment lists the fields).
 */
#ifndef KVIDX_BENCH_REPORT_H
#define KVIDX_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>

/* A row's parameters, as "k=v k=v" for the table and as a JSON object's members. */
struct params {
	char txt[400];
	char json[800];
};

/* Adds parameter k: an unsigned count (shown as 8Mi, 100k...), a number, a string (no quotes
 * or backslashes: the values are the benchmarks' own). */
void par_u(struct params *p, const char *k, uint64_t v);
void par_f(struct params *p, const char *k, double v);
void par_s(struct params *p, const char *k, const char *v);

/* Target states of a row. */
enum { T_NONE = -2, T_NA = -1, T_MISSED = 0, T_MET = 1 };

struct row {
	const char *workload;  /* "1 lookups", "2 readers", ... */
	char name[48];         /* what was measured: "kvidx_score", "redis HKEYS", ... */
	struct params par;
	double median, p99;    /* p99 NAN: not a distribution (throughput, size) */
	const char *unit;
	bool higher_better;    /* throughputs; else times and sizes (lower is better) */
	double ratio;          /* median / median of the kvidx row of the same workload; NAN: none */
	char target[48];       /* "" or the target's text, e.g. "<= 50 ns/key" */
	int target_state;      /* T_NONE, T_NA (not applicable in this run), T_MISSED, T_MET */
	char note[200];        /* free text for the table and the JSON "note" */
	const char *vs_text;   /* replaces the "vs kvidx" cell (floors: not a competitor) */
	char extra[240];       /* more numeric JSON members, see row_extra() */
};

/* Adds a numeric member to the row's JSON object (machine-readable twins of the notes). */
void row_extra(struct row *r, const char *name, double v);

/* Appends the rows to path from now on (bench_start() calls it for --json); dies if it cannot. */
void json_open(const char *path);

/* Writes the row to the table on stdout (the header line before the first) and to the JSON
 * file. */
void row_emit(const struct row *r);

#endif /* KVIDX_BENCH_REPORT_H */
