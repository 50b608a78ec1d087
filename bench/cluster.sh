#!/bin/sh
# cluster.sh BUILD_BIN_DIR — the cluster link measured (docs/cluster.md, issue 20): H router
# hosts on loopback, each with its own index, ingestd (subscribed to every pod) and front
# (kvidx-route --listen), the multi-turn workload of bench/gateway.sh sent round robin over
# the hosts' fronts (so a follow-up turn usually reaches another host than its first turn),
# once with the hosts linked by a nats-server (--cluster: mode=nats) and once without
# (mode=own). One line per H and mode:
#   cluster: hosts=H mode=nats|own followups=N on_prefix_pod=M share=S cached_share=C
# Then the commit-on-A -> visible-on-B latency beside the local commit path
# (bench/cluster_latency.sh: "cluster_latency:" lines), and a fault run: FAULT_HOSTS hosts
# linked, the workload for 30 s with nats-server killed at 10 s and restarted at 20 s; per
# second the follow-ups answered, the share of them that found their prefix cached (on this
# workload, a follow-up on its prefix pod) and whether host 0's link was up:
#   cluster_fault: t=S followups=N warm=M share=X connected=0|1
#   cluster_fault: summary down_share=... up_share=... back_within_s=... unanswered=...
# and a join run: JOIN_HOSTS hosts linked under the workload, one more (ingestd and front)
# joins after JOIN_AT s; once it is ready, the share of host 0's predictions from before the
# join that it holds (the pods' events 1 s late in this run, so that they are still
# predictions), and of its confirmed records (those come from the pods' replay only, which
# these pods do not offer); then, the client sending to its front too from JOIN_AT + 1 s on
# (kvidx-route --join-front), its first 100 follow-ups' share on their prefix pod beside the
# other hosts' follow-ups answered in the same window:
#   cluster_join: peers_predictions_from_before=N joined_host_has=M share=S ...
#   cluster_join: joined_host_followups=100 on_prefix_pod=M share=S others_followups=N ...
#   ROUTE_ARGS: more flags for every front (e.g. --policy prefix);
#   HOSTS (default "1 2 4 8"; empty: none); CONVS (default 300), GAP_MS (30), EVENT_MS (80), PODS (4) as
#   in gateway.sh; JOIN_HOSTS (default 3; 0: no join run), JOIN_AT (5), JOIN_SECS (the join
#   run's client, default 25), JOIN_LINK=0 (the joining host without --cluster, a contrast);
#   FAULT_HOSTS (default 4; 0: no
#   fault run); FAULT_SECS (default 30: the
#   outage is its middle third); LATENCY_COUNT (default 2000; 0: none); QUICK=1: CONVS 100,
#   HOSTS "1 2 4 8", FAULT_SECS 15, LATENCY_COUNT 500; PORT (default 27400).
set -u
BIN=${1:?usage: cluster.sh BUILD_BIN_DIR}
if [ -n "${QUICK:-}" ]; then
	CONVS=${CONVS:-100}
	FAULT_SECS=${FAULT_SECS:-15}
	LATENCY_COUNT=${LATENCY_COUNT:-500}
fi
HOSTS=${HOSTS-1 2 4 8}
CONVS=${CONVS:-300}
GAP_MS=${GAP_MS:-30}
EVENT_MS=${EVENT_MS:-80}
PODS=${PODS:-4}
FAULT_HOSTS=${FAULT_HOSTS:-4}
JOIN_HOSTS=${JOIN_HOSTS:-3}
JOIN_AT=${JOIN_AT:-5}
JOIN_LINK=${JOIN_LINK:-1}
JOIN_SECS=${JOIN_SECS:-25}
FAULT_SECS=${FAULT_SECS:-30}
LATENCY_COUNT=${LATENCY_COUNT:-2000}
PORT=${PORT:-27400}
ROUTE_ARGS=${ROUTE_ARGS:-}
NATS_PORT=$((PORT + 190))
NATS_URL=nats://127.0.0.1:$NATS_PORT
. "$(dirname "$0")/http_common.sh"
NATS_PID=""
cleanup() {
	[ -n "$NATS_PID" ] && kill "$NATS_PID" 2>/dev/null
	stop_all
	rm -f /dev/shm/kvidx-bcl-* 2>/dev/null
}
trap cleanup EXIT
command -v nats-server >/dev/null || { echo "cluster: nats-server missing (make setup)" >&2; exit 1; }

nats_up() { # nats_up: a fresh nats-server (JetStream in memory) on NATS_PORT
	mkdir -p "$LOGS/js"
	nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$LOGS/js" >>"$LOGS/nats.log" 2>&1 &
	NATS_PID=$!
	i=0
	while ! /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $NATS_PORT), 1)" \
		2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
}
nats_down() {
	[ -n "$NATS_PID" ] && kill -KILL "$NATS_PID" 2>/dev/null && wait "$NATS_PID" 2>/dev/null
	NATS_PID=""
}

# metric HOST NAME: a sample of host HOST's ingestd /metrics (empty if it does not answer)
metric() {
	curl -sf --max-time 1 "http://127.0.0.1:$((PORT + 300 + $1))/metrics" 2>/dev/null |
		sed -n "s/^$2 //p"
}

# hosts_up H MODE: the pods, and H hosts (ingestd + front each); sets FRONTS
hosts_up() {
	h=$1 mode=$2
	start_fakepods "$PODS" --prefill-ms 5 --event-delay-ms "$EVENT_MS" --jitter-ms 40 \
		--cache-blocks 1000000
	link=""
	[ "$mode" = nats ] && link="--cluster $NATS_URL"
	FRONTS=""
	k=0
	while [ $k -lt "$h" ]; do
		# shellcheck disable=SC2086
		start "ingestd$k" "$BIN/kvidx-ingestd" --name "kvidx-bcl-$k" --capacity 256k $ing \
			$link --metrics "127.0.0.1:$((PORT + 300 + k))"
		wait_index "kvidx-bcl-$k"
		fp=$((PORT + 200 + k))
		# shellcheck disable=SC2086
		start "front$k" "$BIN/kvidx-route" --name "kvidx-bcl-$k" $pods \
			--listen "127.0.0.1:$fp" --quiet $ROUTE_ARGS
		FRONTS="$FRONTS --front http://127.0.0.1:$fp"
		k=$((k + 1))
	done
	k=0
	while [ $k -lt "$h" ]; do
		wait_http "http://127.0.0.1:$((PORT + 200 + k))/health"
		wait_http "http://127.0.0.1:$((PORT + 300 + k))/readyz"
		k=$((k + 1))
	done
	sleep 0.5 # every subscription up
}

hosts_down() {
	stop_all
	rm -f /dev/shm/kvidx-bcl-* 2>/dev/null
}

run() { # run H MODE
	[ "$2" = nats ] && nats_up
	hosts_up "$1" "$2"
	out="$LOGS/client.$1.$2"
	# shellcheck disable=SC2086
	"$BIN/kvidx-route" $FRONTS --synthetic --prefixes 100000 --prefix-blocks 8 \
		--suffix-blocks 2 --rate 40 --poisson --followups 1 --followup-ms "$GAP_MS" \
		--count $((CONVS * 4)) --json >"$out" # outcome lines kept: the misses
	n=$(json_field "$out" followups)
	same=$(json_field "$out" followups_same_pod)
	cached=$(json_field "$out" followup_cached_tokens)
	prompt=$(json_field "$out" followup_prompt_tokens)
	# Host 0's link and pod counters, kept for a look at the misses.
	curl -sf --max-time 2 "http://127.0.0.1:$((PORT + 300))/metrics" 2>/dev/null |
		grep -E '^kvidx_(cluster_|pod_(remote_)?speculations|pod_spec_paused)' \
		>"$LOGS/metrics.$1.$2"
	echo "cluster: hosts=$1 mode=$2 followups=$n on_prefix_pod=$same" \
	     "share=$(awk "BEGIN{printf \"%.3f\", $same / ($n ? $n : 1)}")" \
	     "cached_share=$(awk "BEGIN{printf \"%.3f\", $cached / ($prompt ? $prompt : 1)}")"
	hosts_down
	nats_down
}

for h in $HOSTS; do
	run "$h" nats
	run "$h" own
done

if [ "$LATENCY_COUNT" -gt 0 ]; then
	COUNT=$LATENCY_COUNT PORT=$((PORT + 400)) "$(dirname "$0")/cluster_latency.sh" "$BIN"
fi

# The join run: JOIN_HOSTS hosts linked under the workload; after 5 s one more host joins
# (a fresh ingestd --cluster: its index starts empty). Once it is ready (/readyz: the warm
# start applied), which of the predictions host 0 held from before the join does it hold?
join_run() {
	nats_up
	# The pods' events 1-1.04 s late, so that predictions made before the join are still
	# predictions (not yet confirmed) when the new host is ready: what the warm start is for.
	ev=$EVENT_MS
	EVENT_MS=1000
	hosts_up "$JOIN_HOSTS" nats
	EVENT_MS=$ev
	# The client sends to the new host's front too from JOIN_AT + 1 s on (--join-front): by
	# then it is up (front_up_ms is printed; the front starts once its index is ready).
	j=$JOIN_HOSTS
	join_link="--cluster $NATS_URL"
	[ "$JOIN_LINK" = 0 ] && join_link="" # the contrast: a newcomer without the link
	tc=$(date +%s%N)
	# shellcheck disable=SC2086
	"$BIN/kvidx-route" $FRONTS --join-front "http://127.0.0.1:$((PORT + 200 + j))" \
		--join-after "$((JOIN_AT + 1))s" --synthetic --prefixes 100000 --prefix-blocks 8 \
		--suffix-blocks 2 --rate 40 --poisson --followups 1 --followup-ms "$GAP_MS" \
		--duration "${JOIN_SECS}s" --json >"$LOGS/client.join" &
	client=$!
	sleep "$JOIN_AT"
	t0=$(date +%s%N)
	# shellcheck disable=SC2086
	start "ingestd$j" "$BIN/kvidx-ingestd" --name "kvidx-bcl-$j" --capacity 256k $ing \
		$join_link --metrics "127.0.0.1:$((PORT + 300 + j))"
	i=0
	while ! curl -sf "http://127.0.0.1:$((PORT + 300 + j))/readyz" >/dev/null 2>&1 &&
		[ $i -lt 300 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	ready_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	"$BIN/kvidx-dump" --name "kvidx-bcl-$j" --entries=0 --json >"$LOGS/join.new.json"
	"$BIN/kvidx-dump" --name kvidx-bcl-0 --entries=0 --json >"$LOGS/join.peer.json"
	since_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	# shellcheck disable=SC2086
	start "front$j" "$BIN/kvidx-route" --name "kvidx-bcl-$j" $pods \
		--listen "127.0.0.1:$((PORT + 200 + j))" --quiet $ROUTE_ARGS
	wait_http "http://127.0.0.1:$((PORT + 200 + j))/health"
	front_ms=$(( ($(date +%s%N) - tc) / 1000000 ))
	wait "$client"
	/usr/bin/python3 - "$LOGS/join.peer.json" "$LOGS/join.new.json" "$since_ms" "$ready_ms" \
		"$(metric "$j" kvidx_cluster_warm_messages_total)" <<'EOF'
import json, sys
peer, new, since, ready, warm = sys.argv[1:6]
def recs(path):
    d = json.load(open(path))
    return {(e["key"], r["pod"]): r for e in d["entries"] for r in e["pods"]}
p, n = recs(peer), recs(new)
def share(state):
    old = [k for k, r in p.items() if r["state"] == state and r["age_ms"] >= float(since)]
    has = sum(1 for k in old if k in n)
    return len(old), has, has / len(old) if old else 0.0
sn, sh, ss = share("speculative")
cn, ch, cs = share("confirmed")
print(f"cluster_join: peers_predictions_from_before={sn} joined_host_has={sh} share={ss:.3f} "
      f"peers_confirmed_from_before={cn} joined_host_has={ch} share={cs:.3f} "
      f"ready_ms={ready} warm_messages={warm}")
EOF
	# The joined host's first 100 follow-ups (answered next turns through its front), and
	# the other hosts' follow-ups answered in the same window: the share of each on the pod
	# of their previous turn (the prefix pod).
	/usr/bin/python3 - "$LOGS/client.join" "$j" "$front_ms" "$((JOIN_AT * 1000 + 1000))" <<'EOF'
import json, sys
out, j, front_ms, join_ms = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
fu = sorted((l for l in lines if l.get("event") == "outcome" and l.get("status") == "ok"
             and l.get("turn", 1) > 1), key=lambda l: l["t_ms"])
mine = [l for l in fu if l["front"] == j][:100]
lo, hi = (mine[0]["t_ms"], mine[-1]["t_ms"]) if mine else (0, -1)
others = [l for l in fu if l["front"] != j and lo <= l["t_ms"] <= hi]
bad = sum(1 for l in lines if l.get("event") == "outcome" and l.get("front") == j
          and l.get("status") != "ok")
def share(v):
    return sum(1 for l in v if l["same_pod"]) / len(v) if v else 0.0
print(f"cluster_join: joined_host_followups={len(mine)} on_prefix_pod="
      f"{sum(1 for l in mine if l['same_pod'])} share={share(mine):.3f} "
      f"others_followups={len(others)} on_prefix_pod={sum(1 for l in others if l['same_pod'])} "
      f"share={share(others):.3f} diff={share(mine) - share(others):+.3f} "
      f"window_s={(hi - lo) / 1000:.1f} front_up_ms={front_ms} joins_at_ms={join_ms} "
      f"joined_front_not_ok={bad}")
EOF
	hosts_down
	nats_down
}
[ "$JOIN_HOSTS" -gt 0 ] && join_run

[ "$FAULT_HOSTS" -gt 0 ] || exit 0
# The fault run: per-outcome lines (turn, cached tokens, time) give the share per second.
nats_up
hosts_up "$FAULT_HOSTS" nats
third=$((FAULT_SECS / 3))
out="$LOGS/client.fault"
# shellcheck disable=SC2086
"$BIN/kvidx-route" $FRONTS --synthetic --prefixes 100000 --prefix-blocks 8 --suffix-blocks 2 \
	--rate 40 --poisson --followups 1 --followup-ms "$GAP_MS" --duration "${FAULT_SECS}s" \
	--json >"$out" &
client=$!
: >"$LOGS/connected"
s=0
while kill -0 "$client" 2>/dev/null; do
	[ $s -eq "$third" ] && nats_down
	[ $s -eq $((2 * third)) ] && nats_up
	echo "$s $(metric 0 kvidx_cluster_connected)" >>"$LOGS/connected"
	sleep 1
	s=$((s + 1))
done
wait "$client"
/usr/bin/python3 - "$out" "$LOGS/connected" "$third" <<'EOF'
import json, sys
out, conn, third = sys.argv[1], sys.argv[2], int(sys.argv[3])
up = {}
for line in open(conn):
    f = line.split()
    up[int(f[0])] = f[1] if len(f) > 1 else "?"
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
t0 = min(l["t_ms"] for l in lines if l.get("event") == "outcome")
sec = {}
for l in lines:
    if l.get("event") != "outcome" or l.get("turn", 1) < 2 or l.get("status") != "ok":
        continue
    s = int((l["t_ms"] - t0) / 1000)
    n, w = sec.get(s, (0, 0))
    sec[s] = (n + 1, w + (l["cached_tokens"] > 0))
for s in sorted(sec):
    n, w = sec[s]
    print(f"cluster_fault: t={s} followups={n} warm={w} share={w / n:.3f} "
          f"connected={up.get(s, '?')}")
def share(lo, hi):
    n = sum(sec[s][0] for s in sec if lo <= s < hi)
    w = sum(sec[s][1] for s in sec if lo <= s < hi)
    return w / n if n else 0.0
before, down = share(0, third), share(third + 1, 2 * third)
back = next((s - 2 * third for s in sorted(sec) if s >= 2 * third and
             sec[s][1] / sec[s][0] >= before - 0.05), -1)
summ = lines[-1] if lines[-1].get("event") == "summary" else {}
print(f"cluster_fault: summary before_share={before:.3f} down_share={down:.3f} "
      f"after_share={share(2 * third + 5, 10 ** 9):.3f} back_within_s={back} "
      f"unanswered={summ.get('unanswered', '?')} errors={summ.get('errors', '?')}")
EOF
