#!/bin/sh
# trace.sh BUILD_BIN_DIR — TTFT by routing policy on a production trace: PODS kvidx-fakepod
# pod models (vLLM V1's scheduler, model time at --time-scale SCALE), kvidx-ingestd and one
# kvidx-route load generator replaying the Mooncake conversation trace (bench/traces/) at
# two offered loads, LOADS (fractions of the fleet's prefill capacity, PODS x RATE tokens/s,
# from the trace's prompt tokens per second; the speedups are printed), and a hot-spot
# workload (one long shared system prompt, unique suffixes) at HOT_LOAD of the fleet with
# ideal caching; for each policy in POLICIES, fresh pods and index per run. Prints a table
# and writes $BUILD/bench/trace.json and trace-ttft.svg (bench/trace_report.py). Times are
# the pods' model time. Targets are printed, never asserted.
#   TRACE (default bench/traces/mooncake-conversation-2000.jsonl), PODS (8), QUICK=1 (the
#   first 300 requests, hot spot 300), LIMIT (requests of the trace; default 2000),
#   SCALE (default 5), HOT_SCALE (the hot spot's, default 1), PORT (default 28000), LOADS,
#   HOT_LOAD, HOT_COUNT, POLICIES,
#   ROUTE_ARGS (more kvidx-route flags for every run, e.g. ROUTE_ARGS='--spec-weight 0.5'),
#   POD_ARGS (more kvidx-fakepod flags for every pod), KV_BLOCKS (each pod's KV cache, default
#   25000: what the model's GPU holds), WORKLOADS (default "trace hotspot").
set -u
BIN=${1:?usage: trace.sh BUILD_BIN_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
TRACE=${TRACE:-$HERE/traces/mooncake-conversation-2000.jsonl}
PODS=${PODS:-8}
SCALE=${SCALE:-5}
# The hot spot runs in real time: at x5 its 562 requests/s of wall time outran the one load
# generator here (57 % of sends less than 0.5 ms apart, against 24 % for Poisson arrivals at
# that rate; TTFT p50 47.5 ms against 26.9 ms at x1, round-robin, 600 requests).
HOT_SCALE=${HOT_SCALE:-1}
PORT=${PORT:-28000}
RATE=24000      # kvidx-fakepod's model: prefill tokens/s (Llama-3.1-8B, one H100)
KV_BLOCKS=${KV_BLOCKS:-25000} # and its KV cache in blocks of 16 tokens
LOADS=${LOADS:-0.6 0.9}
HOT_LOAD=${HOT_LOAD:-0.3}
POLICIES=${POLICIES:-kvidx prefix round-robin least-loaded llm-d dynamo}
if [ "${QUICK:-0}" = 1 ]; then
	LIMIT=${LIMIT:-300}
	HOT_COUNT=${HOT_COUNT:-300}
else
	LIMIT=${LIMIT:-2000}
	HOT_COUNT=${HOT_COUNT:-1500}
fi
HOT_PREFIX=256 # blocks of the shared system prompt (4096 tokens)
HOT_SUFFIX=32  # unique blocks after it (512 tokens)
NAME=kvidx-bench-trace
OUT=$(dirname "$BIN")/bench
mkdir -p "$OUT" || exit 1
. "$HERE/http_common.sh"
trap 'stop_all; rm -f /dev/shm/$NAME /dev/shm/$NAME.lock /dev/shm/$NAME.reg.* /dev/shm/$NAME.data.*; rm -rf "$LOGS"' EXIT

# The trace's offered prompt tokens per second at speedup 1, and its ideal reuse.
set -- $(/usr/bin/python3 "$HERE/trace_report.py" stats "$TRACE" "$LIMIT")
TOKS_PER_S=$1
echo "trace: $(basename "$TRACE"), first $LIMIT requests: $TOKS_PER_S prompt tokens/s at speedup 1"
echo "fleet: $PODS pods x $RATE prefill tokens/s = $((PODS * RATE)) tokens/s; model time at x$SCALE"
echo "caches: $PODS x $KV_BLOCKS blocks of 16 tokens; of the trace's reuse they can hold a share of" \
     "$(/usr/bin/python3 "$HERE/trace_sim.py" ideal "$TRACE" "$LIMIT" "$PODS" "$KV_BLOCKS")" \
     "(perfect placement, one LRU of the fleet's KV)"

pods="" ing=""
i=0
while [ $i -lt "$PODS" ]; do
	pods="$pods --pod 127.0.0.1:$((PORT + 10 * i))=http://127.0.0.1:$((PORT + 10 * i))"
	ing="$ing --pod tcp://127.0.0.1:$((PORT + 10 * i + 1)),name=127.0.0.1:$((PORT + 10 * i))"
	i=$((i + 1))
done

# run_one WORKLOAD LOAD POLICY ARGS...: fresh pods and index, one kvidx-route run.
run_one() {
	rw=$1 rl=$2 rp=$3
	shift 3
	n=0
	while [ $n -lt "$PODS" ]; do
		# shellcheck disable=SC2086
		start "pod$n" "$BIN/kvidx-fakepod" --http "127.0.0.1:$((PORT + 10 * n))" \
			--pub "tcp://127.0.0.1:$((PORT + 10 * n + 1))" --time-scale "$scale" \
			--kv-blocks "$KV_BLOCKS" --prefill-tokens-per-s "$RATE" ${POD_ARGS:-}
		n=$((n + 1))
	done
	# shellcheck disable=SC2086
	start ingestd "$BIN/kvidx-ingestd" --name "$NAME" --capacity 2m $ing
	wait_index "$NAME"
	wait_http "http://127.0.0.1:$((PORT + 10 * (PODS - 1)))/health"
	rf="$OUT/trace-$rw-$rl-$rp.jsonl"
	# shellcheck disable=SC2086
	"$BIN/kvidx-route" --name "$NAME" $pods --policy "$rp" --json \
		--pod-prefill-rate "$RATE" --pod-time-scale "$scale" --pod-kv-blocks "$KV_BLOCKS" \
		${ROUTE_ARGS:-} "$@" >"$rf" 2>"$LOGS/route.err"
	rc=$?
	stop_all
	rm -f /dev/shm/$NAME /dev/shm/$NAME.lock /dev/shm/$NAME.reg.* /dev/shm/$NAME.data.*
	[ $rc = 0 ] || { echo "trace.sh: kvidx-route failed ($rc):" >&2; tail -5 "$LOGS/route.err" >&2; }
	echo "$rw $rl $rp $rf $scale" >>"$OUT/trace-runs.txt"
	/usr/bin/python3 "$HERE/trace_report.py" line "$rf" "$rw" "$rl" "$rp" "$scale"
}

: >"$OUT/trace-runs.txt"
case " ${WORKLOADS:-trace hotspot} " in *" trace "*) ;; *) LOADS="" ;; esac
scale=$SCALE
for load in $LOADS; do
	sp=$(/usr/bin/python3 -c "print(round($load * $PODS * $RATE / $TOKS_PER_S, 4))")
	wsp=$(/usr/bin/python3 -c "print($sp * $SCALE)")
	echo
	echo "== trace at load $load: the trace $sp times as fast in model time" \
	     "(--trace-speedup $wsp on the wall clock)"
	for pol in $POLICIES; do
		run_one trace "$load" "$pol" --trace "$TRACE" --trace-limit "$LIMIT" --trace-speedup "$wsp"
	done
done
# Hot spot: the rate at which the unique suffixes alone are HOT_LOAD of the fleet, in model
# time; the load generator's --rate is wall time.
hot_rate=$(/usr/bin/python3 -c "print(round($HOT_LOAD * $PODS * $RATE / ($HOT_SUFFIX * 16), 3))")
case " ${WORKLOADS:-trace hotspot} " in *" hotspot "*)
echo
echo "== hot spot: $((HOT_PREFIX * 16))-token shared prompt + $((HOT_SUFFIX * 16)) unique tokens," \
     "$hot_rate requests/s (unique tokens $HOT_LOAD of the fleet), $HOT_COUNT requests," \
     "model time at x$HOT_SCALE"
scale=$HOT_SCALE
for pol in $POLICIES; do
	run_one hotspot "$HOT_LOAD" "$pol" --synthetic --prefixes 1 --prefix-blocks $HOT_PREFIX \
		--suffix-blocks $HOT_SUFFIX --max-tokens 64 --poisson \
		--rate "$(/usr/bin/python3 -c "print($hot_rate * $scale)")" --count "$HOT_COUNT"
done
;; esac
echo
/usr/bin/python3 "$HERE/trace_report.py" report "$OUT/trace-runs.txt" "$TRACE" "$LIMIT" \
	"$HOT_PREFIX" "$HOT_SUFFIX" "$SCALE" "$OUT/trace.json" "$OUT/trace-ttft.svg" "$PODS" \
	"$KV_BLOCKS"
