#!/bin/sh
# bench/run.sh [--quick] [BUILD_DIR] — runs the kvidx benchmark suite (built by `make bench`).
#
# Runs every $BUILD_DIR/bin/bench_* (workloads 1+5+6, 2, 3, 4 first, in that order), each with
# --json so that its rows land in $BUILD_DIR/bench/rows.jsonl; each program's output is also
# kept in $BUILD_DIR/bench/<name>.log. Then prints the whole table, the target verdicts and
# the programs' one-line summaries (also kept in $BUILD_DIR/bench/table.txt), and writes
# $BUILD_DIR/bench/results.json:
#   { "suite", "quick", "started", "seconds", "host": {...}, "load_start", "load_end",
#     "rows": [ {bench, workload, name, params, median, p99, unit, higher_is_better,
#                ratio_to_kvidx, target, target_met, note}, ... ] }
# ratio_to_kvidx is the row's median over the median of the kvidx row of the same workload
# and parameters (so > 1 means slower for times and sizes, faster for throughputs).
# Exit status: 0 if every program ran to its end (missed targets are reported, not fatal).
set -u

quick=
if [ "${1:-}" = "--quick" ]; then
	quick=--quick
	shift
fi
build=${1:-build}
bin=$build/bin
out=$build/bench
mkdir -p "$out" || exit 1
rows=$out/rows.jsonl
: > "$rows"

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t_start=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr -d '\042\134')
mem_kib=$(sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/meminfo)

benches="bench_score bench_readers bench_writer bench_spec"
for b in "$bin"/bench_*; do
	[ -x "$b" ] || continue
	n=$(basename "$b")
	# bench_cluster needs hosts set up: bench/cluster_latency.sh and cluster_topology.sh run it
	[ "$n" = bench_cluster ] && continue
	case " $benches " in
	*" $n "*) ;;
	*) benches="$benches $n" ;;
	esac
done

echo "kvidx benchmark suite${quick:+ (quick)}: $cores cores, $model; load $load_start"
status=0
failed=
for n in $benches; do
	b=$bin/$n
	if [ ! -x "$b" ]; then
		echo "run.sh: $b is missing (make bench builds it)" >&2
		status=1
		failed="$failed $n"
		continue
	fi
	echo
	echo "== $n $quick (load $(cut -d' ' -f1 /proc/loadavg))"
	t0=$(date +%s)
	rm -f "$out/$n.rc"
	{ "$b" $quick --json "$rows" 2>&1; echo $? > "$out/$n.rc"; } | tee "$out/$n.log"
	rc=$(cat "$out/$n.rc" 2>/dev/null || echo 1)
	echo "== $n: exit $rc after $(( $(date +%s) - t0 )) s"
	if [ "$rc" != 0 ]; then
		status=1
		failed="$failed $n"
	fi
done

t_end=$(date +%s)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

report() {
	echo
	echo "================================================================================"
	echo "kvidx benchmark results${quick:+ (quick)}: $(( t_end - t_start )) s, $cores cores," \
	     "load at start $load_start, at end $load_end"
	echo "\"kvidx is\": how many times better kvidx's reference row of the same workload is" \
	     "(lower time/size or higher throughput); BEHIND where it is not."
	echo
	first=1
	for n in $benches; do
		[ -f "$out/$n.log" ] || continue
		if [ $first = 1 ]; then
			grep -m 1 '^| workload ' "$out/$n.log"
			first=0
		fi
		grep '^| ' "$out/$n.log" | grep -v '^| workload '
	done
	echo
	met=$(grep -h '^| ' "$out"/*.log 2>/dev/null | grep -c '| met (')
	missed=$(grep -h '^| ' "$out"/*.log 2>/dev/null | grep -c '| MISSED (')
	na=$(grep -h '^| ' "$out"/*.log 2>/dev/null | grep -c '| n/a (')
	echo "targets: $met met, $missed missed, $na not applicable in this run"
	grep -h '^| ' "$out"/*.log 2>/dev/null | grep '| MISSED (' |
		awk -F' [|] ' '{ p = $9; if (length(p) > 90) p = substr(p, 1, 87) "..."; sub(/^[|] /, "", $1)
			printf "  missed: %s %s: median %s p99 %s %s, %s; %s\n", $1, $2, $3, $4, $5, $7, p }' |
		sed 's/  */ /g; s/^ missed/  missed/'
	echo
	echo "summaries:"
	for n in $benches; do
		[ -f "$out/$n.log" ] && grep "^$n " "$out/$n.log"
	done
}
report | tee "$out/table.txt"

{
	printf '{\n  "suite": "kvidx",\n  "quick": %s,\n' "$([ -n "$quick" ] && echo true || echo false)"
	printf '  "started": "%s",\n  "seconds": %d,\n' "$started" "$(( t_end - t_start ))"
	printf '  "host": {"cores": %s, "cpu": "%s", "mem_kib": %s},\n' "$cores" "$model" "${mem_kib:-0}"
	printf '  "load_start": "%s",\n  "load_end": "%s",\n' "$load_start" "$load_end"
	printf '  "failed": "%s",\n' "${failed# }"
	printf '  "rows": [\n'
	awk 'NR > 1 { printf ",\n" } { printf "    %s", $0 } END { if (NR) printf "\n" }' "$rows"
	printf '  ]\n}\n'
} > "$out/results.json"
echo
echo "results: $out/results.json ($(wc -l < "$rows") rows)"
[ -z "$failed" ] || echo "FAILED:$failed" >&2
exit $status
