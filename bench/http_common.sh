# http_common.sh — sourced by the HTTP benchmarks (front_latency.sh, gateway.sh): starting
# fake pods, ingestd and fronts on loopback (start, wait_index, wait_http: tools/loopback.sh),
# and stopping exactly what was started.
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
