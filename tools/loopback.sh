# loopback.sh — sourced by the scripts that start kvidx's programs on loopback (tools/run.sh,
# the demo of `make run`; bench/http_common.sh, the HTTP benchmarks): starting one in the
# background with its output in a log, and waiting for an index or an HTTP server to be up.
# Needs LOGS (the log folder) set by the caller; PIDS collects what was started.

PIDS=${PIDS:-}

start() { # start LOGNAME PROGRAM ARGS...: background, output to LOGS/LOGNAME.log
	log=$1
	shift
	"$@" >"$LOGS/$log.log" 2>&1 </dev/null &
	PIDS="$PIDS $!"
}

# wait_index NAME: until the index exists in /dev/shm (5 s at most), and a moment more.
wait_index() {
	i=0
	while [ ! -e "/dev/shm/$1" ] && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	sleep 0.3
}

# wait_http URL: until it answers (5 s at most).
wait_http() {
	i=0
	while ! curl -sf "$1" >/dev/null 2>&1 && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
}
