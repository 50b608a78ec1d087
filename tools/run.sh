#!/bin/sh
# run.sh BUILD_BIN_DIR — the demo behind `make run`: on loopback, three fake vLLM pods
# (kvidx-fakepod --http, vLLM's OpenAI-compatible API, each the pod model of a vLLM engine
# run 10 times as fast as real time, with small failure rates) in the shapes real vLLM streams have (pod 0: vLLM's default topic "" and two
# data-parallel ranks; pod 1: a hybrid model with CPU offloading and duplicate copies; pod 2:
# llm-d's kv@POD@MODEL topic), a fourth pod playing a workload of LoRA, salted and multimodal
# prompts (not routed to), kvidx-ingestd subscribed to their KV events (with their replay sockets),
# two kvidx-route --listen front workers sharing one port (SO_REUSEPORT) and the index, a
# third kvidx-route sending a synthetic multi-turn workload to that port, and kvidx-top in
# the foreground. While it runs, curl the front (the line is printed). Ctrl-C (or SIGTERM)
# stops every process this script started and removes the index from /dev/shm.
#
# Environment (all optional):
#   KVIDX_RUN_NAME   index name (default kvidx-run)
#   KVIDX_RUN_PORT   first TCP port; pod i uses PORT+10i .. PORT+10i+4, the front
#                    PORT+100 (default 25500)
#   KVIDX_RUN_RATE   new conversations per second sent to the front (default 16)
#   KVIDX_RUN_SECS   stop by itself after this many seconds, a whole number (default: run
#                    until Ctrl-C)
#   KVIDX_RUN_HOSTS  router hosts, 1 to 4 (default 1). Above 1: a nats-server (JetStream on)
#                    on loopback at PORT+150 and, per host h, its own index (NAME for host 0,
#                    NAME-hH for the others), its own ingestd linked to the others by
#                    --cluster, its own two front workers on PORT+100+h; the client load goes
#                    round robin over the hosts' fronts, so a follow-up turn usually reaches
#                    another host than its first turn, and kvidx-top (host 0) shows the
#                    predictions its peers sent (SPECULATION, column remote)
set -u

BIN=${1:?usage: run.sh BUILD_BIN_DIR}
NAME=${KVIDX_RUN_NAME:-kvidx-run}
PORT=${KVIDX_RUN_PORT:-25500}
RATE=${KVIDX_RUN_RATE:-16}
SECS=${KVIDX_RUN_SECS:-}
case $SECS in # its name carries the unit: a whole number, as for the tools' -ms flags
*[!0-9]*)
	echo "run.sh: KVIDX_RUN_SECS '$SECS': expected a whole number of seconds" >&2
	exit 2
	;;
esac
HOSTS=${KVIDX_RUN_HOSTS:-1}
case $HOSTS in
1 | 2 | 3 | 4) ;;
*)
	echo "run.sh: KVIDX_RUN_HOSTS '$HOSTS': expected 1 to 4 router hosts" >&2
	exit 2
	;;
esac
NPODS=3
NFRONTS=2
FRONT=$((PORT + 100))
NATS=$((PORT + 150))
# host_name H: host H's index
host_name() {
	if [ "$1" -eq 0 ]; then echo "$NAME"; else echo "$NAME-h$1"; fi
}

for t in kvidx-fakepod kvidx-ingestd kvidx-route kvidx-top; do
	if [ ! -x "$BIN/$t" ]; then
		echo "run.sh: $BIN/$t is missing: run 'make' first" >&2
		exit 1
	fi
done
if [ "$HOSTS" -gt 1 ] && ! command -v nats-server >/dev/null; then
	echo "run.sh: KVIDX_RUN_HOSTS=$HOSTS needs nats-server (make setup installs it)" >&2
	exit 1
fi
h=0
while [ $h -lt "$HOSTS" ]; do
	n=$(host_name $h)
	if [ -e "/dev/shm/$n" ]; then
		echo "run.sh: /dev/shm/$n exists: another 'make run' is running, or a previous one" \
		     "was killed (then: rm /dev/shm/$n /dev/shm/$n.lock /dev/shm/$n.reg.* /dev/shm/$n.data.*)" >&2
		exit 1
	fi
	h=$((h + 1))
done

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/kvidx-run.XXXXXX") || exit 1
PIDS=""
. "$(dirname "$0")/loopback.sh" # start, wait_index, wait_http

cleanup() {
	trap '' INT TERM
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null
	done
	# Give them a moment to exit cleanly (route workers print their summaries), then insist.
	i=0
	while [ $i -lt 20 ]; do
		alive=""
		for p in $PIDS; do
			kill -0 "$p" 2>/dev/null && alive="$alive $p"
		done
		[ -z "$alive" ] && break
		sleep 0.1
		i=$((i + 1))
	done
	for p in $PIDS; do
		kill -KILL "$p" 2>/dev/null
	done
	wait 2>/dev/null
	h=0
	while [ $h -lt "$HOSTS" ]; do
		n=$(host_name $h)
		rm -f "/dev/shm/$n" "/dev/shm/$n.lock" "/dev/shm/$n".reg.* "/dev/shm/$n".data.*
		h=$((h + 1))
	done
	echo
	echo "run.sh: stopped; index(es) removed; logs kept in $LOGS"
	for f in "$LOGS"/front-*.log "$LOGS"/client.log; do
		[ -f "$f" ] && sed -n 's/^summary: /  '"$(basename "$f" .log)"': /p' "$f"
	done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$HOSTS" -eq 1 ]; then
	echo "run.sh: index $NAME, pods on ports $PORT..$((PORT + 10 * NPODS + 4)), front on $FRONT (127.0.0.1)"
else
	echo "run.sh: $HOSTS router hosts (indexes $NAME, $NAME-h1..), linked by a nats-server on" \
	     "$NATS; pods on ports $PORT..$((PORT + 10 * NPODS + 4)), fronts on $FRONT..$((FRONT + HOSTS - 1))"
fi
echo "run.sh: logs in $LOGS"
echo "run.sh: in another terminal: $BIN/kvidx-ttl --name $NAME"
echo "        (and $BIN/kvidx-dump --name $NAME for everything the index holds)"

# Pods: the pod model (tools/fakepod/README.md) at --time-scale 10, so that two cores keep
# up with it, with a KV cache small enough to evict (2048 blocks; pod 1's 512 blocks show
# three groups' events), a few failed or cancelled requests and lost events, so that early
# and stale expiries show up. Pod i publishes on
# PORT+10i (rank r on + r), replays on PORT+10i+2 (+ r) and serves HTTP on PORT+10i+4.
podargs=""
routeargs=""
i=0
while [ $i -lt $NPODS ]; do
	pub=$((PORT + 10 * i))
	rep=$((pub + 2))
	srv=$((pub + 4))
	attrs=""
	case $i in # the shapes: the positional parameters (BIN is read already)
	0) set -- --topic "" --dp-ranks 2; attrs=",model=fake-model,dp-ranks=2" ;;
	1) set -- --hybrid --offload 0.3 --dup-copies 0.1 --copy-counts --kv-blocks 512 ;;
	*) set -- ;;
	esac
	start "pod-$i" "$BIN/kvidx-fakepod" --http "127.0.0.1:$srv" \
		--pub "tcp://127.0.0.1:$pub" --replay "tcp://127.0.0.1:$rep" \
		--time-scale 10 --kv-blocks 2048 --max-num-seqs 64 \
		--fail-rate 0.02 --cancel-rate 0.01 --drop-events 0.01 --seed $((i + 1)) "$@"
	spec="tcp://127.0.0.1:$pub,replay=tcp://127.0.0.1:$rep,name=127.0.0.1:$srv$attrs"
	podargs="$podargs --pod $spec"
	routeargs="$routeargs --pod 127.0.0.1:$srv=http://127.0.0.1:$srv"
	i=$((i + 1))
done
# A pod no router sends to, whose own workload uses a LoRA adapter, salts and images.
pub=$((PORT + 10 * NPODS))
start "pod-$NPODS" "$BIN/kvidx-fakepod" --workload --rate 100 --batch 4 \
	--pub "tcp://127.0.0.1:$pub" --replay "tcp://127.0.0.1:$((pub + 2))" \
	--pod "127.0.0.1:$((pub + 4))" --lora adapter-a --lora-share 0.5 --salt tenant-1 \
	--salt-share 0.3 --mm 0.2 --seed $((NPODS + 1))
podargs="$podargs --pod tcp://127.0.0.1:$pub,replay=tcp://127.0.0.1:$((pub + 2))"

# Several hosts: the NATS server their ingestds share predictions, outcomes and load through
# (docs/cluster.md), with JetStream for the warm start.
cluster=""
if [ "$HOSTS" -gt 1 ]; then
	mkdir -p "$LOGS/nats-store"
	start nats nats-server -a 127.0.0.1 -p "$NATS" -js -sd "$LOGS/nats-store"
	cluster="--cluster nats://127.0.0.1:$NATS"
fi

# Per host: the writer, with its speculation settings at their defaults (static 2 s TTL),
# and two front workers on one port, one index (the kernel spreads connections over them).
fronts=""
h=0
while [ $h -lt "$HOSTS" ]; do
	n=$(host_name $h)
	sfx=""
	[ "$h" -gt 0 ] && sfx="-h$h"
	# shellcheck disable=SC2086
	start "ingestd$sfx" "$BIN/kvidx-ingestd" --name "$n" --capacity 64k $podargs $cluster
	wait_index "$n"
	if ! "$BIN/kvidx-top" --name "$n" --once >/dev/null 2>&1; then
		echo "run.sh: kvidx-ingestd did not create index $n; its log:" >&2
		cat "$LOGS/ingestd$sfx.log" >&2
		exit 1
	fi
	i=0
	while [ $i -lt $NFRONTS ]; do
		# shellcheck disable=SC2086
		start "front$sfx-$i" "$BIN/kvidx-route" --name "$n" $routeargs \
			--listen "127.0.0.1:$((FRONT + h))" --quiet
		i=$((i + 1))
	done
	fronts="$fronts --front http://127.0.0.1:$((FRONT + h))"
	h=$((h + 1))
done
h=0
while [ $h -lt "$HOSTS" ]; do
	wait_http "http://127.0.0.1:$((FRONT + h))/health"
	h=$((h + 1))
done

# The client load: conversations of up to 4 turns, each next turn 100 ms (mean) after the
# previous answer, sent to the fronts' ports round robin (it learns each decision from their
# headers).
# shellcheck disable=SC2086
start client "$BIN/kvidx-route" $fronts --synthetic \
	--prefixes 6 --prefix-blocks 8 --suffix-blocks 2 --rate "$RATE" --poisson \
	--followups 0.7 --followup-ms 100 --quiet

echo "run.sh: the front serves OpenAI-style requests; in another terminal, for example:"
echo "  curl -s http://127.0.0.1:$FRONT/v1/completions -H 'Content-Type: application/json' \\"
echo "       -d '{\"prompt\": \"The quick brown fox jumps over the lazy dog, twice.\", \"max_tokens\": 4}'"
echo "  (add -i to see X-Kvidx-Pod and X-Kvidx-Decision; /v1/chat/completions takes messages)"
if [ "$HOSTS" -gt 1 ]; then
	echo "run.sh: kvidx-top shows host 0 ($NAME); another host: $BIN/kvidx-top --name $NAME-h1"
fi

# The live view: in the background so that the traps run as soon as a signal arrives
# (a shell runs traps only between commands); it shares the terminal and gets Ctrl-C too.
"$BIN/kvidx-top" --name "$NAME" &
TOP=$!
PIDS="$PIDS $TOP"
if [ -n "$SECS" ]; then
	(sleep "$SECS" && kill -TERM "$TOP" 2>/dev/null) &
	PIDS="$PIDS $!"
fi
wait "$TOP"
exit 0
