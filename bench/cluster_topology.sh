#!/bin/sh
# cluster_topology.sh BUILD_BIN_DIR — the event-topology decision measured (issue 20,
# docs/cluster.md "Topology"): every router host subscribing to every pod (ZeroMQ, each host
# decodes every batch) against relaying each pod's batches once into NATS / JetStream that
# every host consumes. For H = 1, 2, 4, 8 hosts:
#   direct: one kvidx-fakepod publishing EVENTS events in batches of BATCH at RATE events/s
#           to H ingestds (--wait-subscribers H); the pod's CPU per batch (its fan-out grows
#           with H) and each host's CPU per event (decoding and applying: paid on every host
#           whichever the topology, since a relay forwards the same batches);
#     cluster_topology: path=zmq subs=H batches=N pod_us_per_batch=X host_us_per_event=Y
#   relay:  bench_cluster --fanout: MSGS messages of SIZE bytes (a batch) through a
#           nats-server to H subscribers, core NATS and a memory JetStream stream with an
#           ordered consumer per host: the server's CPU per message and per delivery, the
#           subscribers' per delivery (the "cluster_topology: path=core|jetstream" lines).
# The per-message costs feed the 50-host model in docs/cluster.md.
#   HOSTS (default "1 2 4 8"), EVENTS (default 100000; QUICK=1: 30000), BATCH (default 8),
#   RATE (default 20000), MSGS (default 50000; QUICK=1: 20000), SIZE (default 2048),
#   PORT (default 27600).
set -u
BIN=${1:?usage: cluster_topology.sh BUILD_BIN_DIR}
if [ -n "${QUICK:-}" ]; then
	EVENTS=${EVENTS:-30000}
	MSGS=${MSGS:-20000}
fi
HOSTS=${HOSTS-1 2 4 8}
EVENTS=${EVENTS:-100000}
BATCH=${BATCH:-8}
RATE=${RATE:-20000}
MSGS=${MSGS:-50000}
SIZE=${SIZE:-2048}
PORT=${PORT:-27600}
. "$(dirname "$0")/http_common.sh"
cleanup() {
	stop_all
	rm -f /dev/shm/kvidx-btopo-* 2>/dev/null
}
trap cleanup EXIT
command -v nats-server >/dev/null || { echo "cluster_topology: nats-server missing" >&2; exit 1; }

cpu_us() { # cpu_us PID: its user + system CPU so far, microseconds
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) * 1000000 / hz }' \
		"/proc/$1/stat" 2>/dev/null || echo 0
}

direct() { # direct H
	h=$1
	/usr/bin/time -f "%U %S" -o "$LOGS/pod.$h.cpu" "$BIN/kvidx-fakepod" --workload \
		--rate "$RATE" --batch "$BATCH" --count "$EVENTS" --wait-subscribers "$h" \
		--pub "tcp://127.0.0.1:$PORT" --pod "127.0.0.1:$((PORT + 4))" --seed 7 \
		>"$LOGS/pod.$h.log" 2>&1 &
	pod=$!
	ings=""
	k=0
	while [ $k -lt "$h" ]; do
		start "ingestd$k" "$BIN/kvidx-ingestd" --name "kvidx-btopo-$k" --capacity 256k \
			--pod "tcp://127.0.0.1:$PORT,name=127.0.0.1:$((PORT + 4))"
		ings="$ings $!"
		k=$((k + 1))
	done
	base=0
	for p in $ings; do base=$((base + $(cpu_us "$p" | cut -d. -f1))); done
	wait "$pod"
	sleep 0.5 # the last batches applied
	used=0
	for p in $ings; do used=$((used + $(cpu_us "$p" | cut -d. -f1))); done
	batches=$(( (EVENTS + BATCH - 1) / BATCH ))
	awk -v h="$h" -v b="$batches" -v e="$EVENTS" -v used="$used" -v base="$base" \
		'NR == 1 { printf "cluster_topology: path=zmq subs=%d batches=%d pod_us_per_batch=%.2f host_us_per_event=%.2f\n",
		           h, b, ($1 + $2) * 1e6 / b, (used - base) / h / e }' "$LOGS/pod.$h.cpu"
	stop_all
	rm -f /dev/shm/kvidx-btopo-* 2>/dev/null
}

for h in $HOSTS; do
	direct "$h"
done

mkdir -p "$LOGS/js"
nats-server -a 127.0.0.1 -p $((PORT + 2)) -js -sd "$LOGS/js" >"$LOGS/nats.log" 2>&1 &
nats=$!
PIDS="$PIDS $nats"
sleep 0.5
for mode in "" --js; do
	for h in $HOSTS; do
		"$BIN/bench_cluster" --fanout --nats "nats://127.0.0.1:$((PORT + 2))" --subs "$h" \
			--msgs "$MSGS" --size "$SIZE" $mode --server-pid "$nats"
	done
done
