# http_common.sh — sourced by the HTTP benchmarks (front_latency.sh, gateway.sh): starting
# fake pods, ingestd and fronts on loopback, and stopping exactly what was started.
# Needs BIN (the build's bin directory) and PORT (the first port) set by the caller.

PIDS=""
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/kvidx-bench.XXXXXX") || exit 1

bg() { # bg LOGNAME PROGRAM ARGS...
	log=$1
	shift
	"$@" >"$LOGS/$log.log" 2>&1 </dev/null &
	PIDS="$PIDS $!"
}

stop_all() {
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null
	done
	PIDS=""
}

# wait_index NAME: until the index exists.
wait_index() {
	i=0
	while [ ! -e "/dev/shm/$1" ] && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	sleep 0.3
}

# wait_http URL: until it answers.
wait_http() {
	i=0
	while ! curl -sf "$1" >/dev/null 2>&1 && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
}

# json_field FILE KEY: a top-level member of the JSON summary, the last line of FILE.
json_field() {
	/usr/bin/python3 -c 'import json, sys
print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"
}
