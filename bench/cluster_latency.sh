#!/bin/sh
# cluster_latency.sh BUILD_BIN_DIR — the cluster link's commit-on-A to visible-on-B latency on
# loopback, beside the local commit path in the same run (bench_cluster): a nats-server, one
# fake pod and two ingestds (indexes of their own, both subscribed to the pod, linked by
# --cluster). Prints one "cluster_latency:" line per path (p50/p99/max in microseconds).
#   COUNT (default 2000) commits; KEYS (default 8) keys per commit; PORT (default 27300);
#   POLL (default yield): how bench_cluster waits between lookups, yield|spin|sleep
#   (bench_cluster.c, docs/cluster.md "Measuring").
set -u
BIN=${1:?usage: cluster_latency.sh BUILD_BIN_DIR}
COUNT=${COUNT:-2000}
KEYS=${KEYS:-8}
PORT=${PORT:-27300}
A=kvidx-bench-cla
B=kvidx-bench-clb
POD=127.0.0.1:$PORT
. "$(dirname "$0")/http_common.sh"
cleanup() {
	stop_all
	for n in $A $B; do
		rm -f /dev/shm/$n /dev/shm/$n.lock /dev/shm/$n.reg.* /dev/shm/$n.data.*
	done
}
trap cleanup EXIT

command -v nats-server >/dev/null || { echo "cluster_latency: nats-server missing (make setup)" >&2; exit 1; }
start nats nats-server -a 127.0.0.1 -p $((PORT + 2))
start pod "$BIN/kvidx-fakepod" --http "$POD" --pub "tcp://127.0.0.1:$((PORT + 1))" \
	--prefill-ms 0 --event-delay-ms 0
for n in $A $B; do
	start "$n" "$BIN/kvidx-ingestd" --name "$n" --capacity 256k --ttl 30s --stale-limit 0 \
		--pod "tcp://127.0.0.1:$((PORT + 1)),name=$POD" --cluster "nats://127.0.0.1:$((PORT + 2))"
	wait_index "$n"
done
sleep 1
"$BIN/bench_cluster" --a $A --b $B --pod "$POD" --count "$COUNT" --keys "$KEYS" \
	--poll "${POLL:-yield}"
