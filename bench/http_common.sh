# http_common.sh — sourced by the HTTP benchmarks (front_latency.sh, front_spread.sh,
# gateway.sh, trace.sh): starting fake pods (start_fakepods), ingestd and fronts on loopback
# (start, wait_index, wait_http: tools/loopback.sh), and stopping exactly what was started.
# Needs BIN (the build's bin directory) and PORT (the first port) set by the caller.

PIDS=""
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/kvidx-bench.XXXXXX") || exit 1
. "$(dirname "$0")/../tools/loopback.sh"

stop_all() {
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null
	done
	PIDS=""
}

# json_field FILE KEY: a top-level member of the JSON summary, the last line of FILE.
json_field() {
	/usr/bin/python3 -c 'import json, sys
print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}

# start_fakepods N ARGS...: N kvidx-fakepod --http pods, pod i serving HTTP on PORT + 10i and
# publishing on PORT + 10i + 1, each with ARGS; sets pods (kvidx-route's --pod flags) and ing
# (kvidx-ingestd's).
start_fakepods() {
	sf_n=$1
	shift
	pods="" ing=""
	sf_i=0
	while [ $sf_i -lt "$sf_n" ]; do
		start "pod$sf_i" "$BIN/kvidx-fakepod" --http "127.0.0.1:$((PORT + 10 * sf_i))" \
			--pub "tcp://127.0.0.1:$((PORT + 10 * sf_i + 1))" "$@"
		pods="$pods --pod 127.0.0.1:$((PORT + 10 * sf_i))=http://127.0.0.1:$((PORT + 10 * sf_i))"
		ing="$ing --pod tcp://127.0.0.1:$((PORT + 10 * sf_i + 1)),name=127.0.0.1:$((PORT + 10 * sf_i))"
		sf_i=$((sf_i + 1))
	done
}
