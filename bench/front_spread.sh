#!/bin/sh
# front_spread.sh BUILD_BIN_DIR — how evenly WORKERS kvidx-route --listen processes on one
# port (SO_REUSEPORT) share the requests of a client that holds few keep-alive connections
# (the load generator with --front and CONC requests in flight: at most CONC connections).
# For each --keepalive-requests value in KEEPALIVE (0: connections are never closed, the
# kernel's choice at connect time stands), ROUNDS runs of COUNT requests; per run the
# requests each worker answered (its X-Kvidx-Worker) and max/mean over the workers (1: even;
# WORKERS: one took all). Two fake pods answer at once (--prefill-ms 0). Prints one
# greppable line per run (with its answers per second: the cost of reconnecting), then the
# median and the worst max/mean per setting.
#   WORKERS (default 2), CONC (default 2), COUNT (default 2000), ROUNDS (default 5),
#   KEEPALIVE (default "0 100 20"), PORT (default 27500).
set -u
BIN=${1:?usage: front_spread.sh BUILD_BIN_DIR}
WORKERS=${WORKERS:-2}
CONC=${CONC:-2}
COUNT=${COUNT:-2000}
ROUNDS=${ROUNDS:-5}
KEEPALIVE=${KEEPALIVE:-0 100 20}
PORT=${PORT:-27500}
NAME=kvidx-bench-spread
. "$(dirname "$0")/http_common.sh"
trap 'stop_all; rm -f /dev/shm/$NAME /dev/shm/$NAME.lock /dev/shm/$NAME.reg.* /dev/shm/$NAME.data.*; rm -rf "$LOGS"' EXIT

start_fakepods 2 --prefill-ms 0 --event-delay-ms 0
# shellcheck disable=SC2086
start ingestd "$BIN/kvidx-ingestd" --name "$NAME" --capacity 256k $ing
wait_index "$NAME"
front="http://127.0.0.1:$((PORT + 100))"

: >"$LOGS/ratios"
for ka in $KEEPALIVE; do
	fronts=""
	w=0
	while [ $w -lt "$WORKERS" ]; do
		# shellcheck disable=SC2086
		"$BIN/kvidx-route" --name "$NAME" $pods --listen "127.0.0.1:$((PORT + 100))" --quiet \
			--keepalive-requests "$ka" >"$LOGS/front$w.log" 2>&1 </dev/null &
		fronts="$fronts $!"
		w=$((w + 1))
	done
	wait_http "$front/health"
	r=1
	while [ "$r" -le "$ROUNDS" ]; do
		f="$LOGS/run.$ka.$r"
		"$BIN/kvidx-route" --front "$front" --synthetic --prefixes 4 --prefix-blocks 4 \
			--suffix-blocks 1 --rate 0 --max-tokens 1 --concurrency "$CONC" \
			--count "$COUNT" --seed "$r" --json --quiet >"$f"
		line=$(/usr/bin/python3 -c 'import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
n = [s["workers"].get(k, 0) for k in s["workers"]] + [0] * (int(sys.argv[2]) - len(s["workers"]))
mean = sum(n) / len(n)
print("per_worker=%s max_over_mean=%.2f ok=%d answers_per_s=%.0f" % (
      ",".join(map(str, sorted(n, reverse=True))), max(n) / mean if mean else 0, s["ok"],
      s["answers_per_s"]))' "$f" "$WORKERS")
		echo "front_spread: keepalive_requests=$ka workers=$WORKERS concurrency=$CONC" \
		     "requests=$COUNT round=$r $line"
		echo "$ka ${line#*max_over_mean=}" >>"$LOGS/ratios"
		r=$((r + 1))
	done
	for p in $fronts; do
		kill -TERM "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
done
/usr/bin/python3 -c 'import sys
rows = {}
for line in open(sys.argv[1]):
    ka, rest = line.split(None, 1)
    rows.setdefault(ka, []).append(float(rest.split()[0]))
for ka, v in rows.items():
    v.sort()
    print("front_spread: keepalive_requests=%s max_over_mean median %.2f worst %.2f "
          "(of %d runs; 1: even)" % (ka, v[len(v) // 2], v[-1], len(v)))' "$LOGS/ratios"
