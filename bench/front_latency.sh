#!/bin/sh
# front_latency.sh BUILD_BIN_DIR — what kvidx-route --listen adds to a request: the same
# closed-loop load (--concurrency clients, streamed completions of token-id prompts with
# shared prefixes) sent straight to fake pods that answer at once (--prefill-ms 0), and
# through one front, alternating in ROUNDS rounds within one run. Prints TTFT p50/p99 per
# mode and the answers per second, one greppable line per round and mode, then the medians.
#   COUNT (default 4000) requests per round and mode; CONC (default 8); ROUNDS (default 3);
#   PORT (default 27000).
set -u
BIN=${1:?usage: front_latency.sh BUILD_BIN_DIR}
COUNT=${COUNT:-4000}
CONC=${CONC:-8}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-27000}
NAME=kvidx-bench-front
. "$(dirname "$0")/http_common.sh"
trap 'stop_all; rm -f /dev/shm/$NAME /dev/shm/$NAME.lock /dev/shm/$NAME.reg.* /dev/shm/$NAME.data.*' EXIT

start_fakepods 2 --prefill-ms 0 --event-delay-ms 0 --cache-blocks 1000000
# shellcheck disable=SC2086
start ingestd "$BIN/kvidx-ingestd" --name "$NAME" --capacity 256k $ing
wait_index "$NAME"
# shellcheck disable=SC2086
start front "$BIN/kvidx-route" --name "$NAME" $pods --listen "127.0.0.1:$((PORT + 100))" --quiet
wait_http "http://127.0.0.1:$((PORT + 100))/health"

load="--synthetic --prefixes 16 --prefix-blocks 8 --suffix-blocks 2 --rate 0 --max-tokens 1
      --concurrency $CONC --count $COUNT --json --quiet"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for mode in direct front; do
		if [ $mode = direct ]; then
			# shellcheck disable=SC2086
			"$BIN/kvidx-route" --name "$NAME" $pods $load --seed $r >"$LOGS/$mode.$r"
		else
			# shellcheck disable=SC2086
			"$BIN/kvidx-route" --front "http://127.0.0.1:$((PORT + 100))" $load \
				--seed $r >"$LOGS/$mode.$r"
		fi
		f="$LOGS/$mode.$r"
		echo "front_latency: round=$r mode=$mode concurrency=$CONC requests=$COUNT" \
		     "ttft_p50_ms=$(json_field "$f" ttft_p50_ms) ttft_p99_ms=$(json_field "$f" ttft_p99_ms)" \
		     "answers_per_s=$(json_field "$f" answers_per_s) ok=$(json_field "$f" ok)"
	done
	r=$((r + 1))
done
