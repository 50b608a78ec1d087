#!/bin/sh
# gateway.sh BUILD_BIN_DIR — the experiment behind a shared index (SGLang's router team:
# with per-gateway state the hit rate of follow-up turns falls from 0.94 to 0.66 going from
# 1 to 8 gateways; 0.95 with a shared index). Multi-turn conversations are sent round robin
# across W = 1, 2, 4, 8 kvidx-route --listen workers (one port each, so that consecutive
# turns go to different workers), once with every worker on one shared index (one ingestd)
# and once with each worker on an index of its own (its own ingestd, subscribed to every
# pod: it sees every pod's events, but only its own predictions). For each W and mode: the
# share of follow-up turns that land on the pod holding their prefix (the pod that served
# the previous turn) and their cached tokens. One greppable line per W and mode.
#   CONVS (default 300) conversations per run, up to 4 turns each; GAP_MS (default 30) mean
#   gap from an answer to the next turn; EVENT_MS (default 80, + 0..40 jitter) the pods'
#   route-to-event delay; PODS (default 4); PORT (default 27200).
set -u
BIN=${1:?usage: gateway.sh BUILD_BIN_DIR}
CONVS=${CONVS:-300}
GAP_MS=${GAP_MS:-30}
EVENT_MS=${EVENT_MS:-80}
PODS=${PODS:-4}
PORT=${PORT:-27200}
. "$(dirname "$0")/http_common.sh"
cleanup() {
	stop_all
	rm -f /dev/shm/kvidx-gw-* 2>/dev/null
}
trap cleanup EXIT

run() { # run W MODE
	w=$1 mode=$2
	pods="" ing=""
	i=0
	while [ $i -lt "$PODS" ]; do
		start "pod$i" "$BIN/kvidx-fakepod" --http "127.0.0.1:$((PORT + 10 * i))" \
			--pub "tcp://127.0.0.1:$((PORT + 10 * i + 1))" --prefill-ms 5 \
			--event-delay-ms "$EVENT_MS" --jitter-ms 40 --cache-blocks 1000000 \
			--seed $((i + 1))
		pods="$pods --pod 127.0.0.1:$((PORT + 10 * i))=http://127.0.0.1:$((PORT + 10 * i))"
		ing="$ing --pod tcp://127.0.0.1:$((PORT + 10 * i + 1)),name=127.0.0.1:$((PORT + 10 * i))"
		i=$((i + 1))
	done
	fronts=""
	k=0
	while [ $k -lt "$w" ]; do
		if [ "$mode" = shared ]; then idx=kvidx-gw-shared; else idx=kvidx-gw-$k; fi
		if [ "$mode" = own ] || [ $k -eq 0 ]; then
			# shellcheck disable=SC2086
			start "ingestd$k" "$BIN/kvidx-ingestd" --name "$idx" --capacity 256k $ing
			wait_index "$idx"
		fi
		fp=$((PORT + 200 + k))
		# shellcheck disable=SC2086
		start "front$k" "$BIN/kvidx-route" --name "$idx" $pods --listen "127.0.0.1:$fp" --quiet
		fronts="$fronts --front http://127.0.0.1:$fp"
		k=$((k + 1))
	done
	k=0
	while [ $k -lt "$w" ]; do
		wait_http "http://127.0.0.1:$((PORT + 200 + k))/health"
		k=$((k + 1))
	done
	sleep 0.5 # every subscription up
	out="$LOGS/client.$w.$mode"
	# shellcheck disable=SC2086
	"$BIN/kvidx-route" $fronts --synthetic --prefixes 100000 --prefix-blocks 8 \
		--suffix-blocks 2 --rate 40 --poisson --followups 1 --followup-ms "$GAP_MS" \
		--count $((CONVS * 4)) --json --quiet >"$out"
	n=$(json_field "$out" followups)
	same=$(json_field "$out" followups_same_pod)
	cached=$(json_field "$out" followup_cached_tokens)
	prompt=$(json_field "$out" followup_prompt_tokens)
	echo "gateway: workers=$w index=$mode followups=$n on_prefix_pod=$same" \
	     "share=$(awk "BEGIN{printf \"%.3f\", $same / ($n ? $n : 1)}")" \
	     "cached_tokens=$cached of $prompt" \
	     "cached_share=$(awk "BEGIN{printf \"%.3f\", $cached / ($prompt ? $prompt : 1)}")"
	stop_all
	rm -f /dev/shm/kvidx-gw-* 2>/dev/null
}

for w in 1 2 4 8; do
	run "$w" shared
	run "$w" own
done
