/*
 * kvidx-fakepod — a vLLM-compatible KV-cache event publisher, for tests, demos and benchmarks.
 * This file: setup, the poll loop, signals, teardown and the summary line; fakepod.h lists
 * the other parts.
 *
 * It plays one vLLM pod on the wire (docs/events.md): a PUB socket sending
 * [topic, seq8, payload] batches of BlockStored / BlockRemoved / AllBlocksCleared events in
 * either msgpack encoding, and optionally vLLM's replay ROUTER (pub.c); with --dp-ranks N,
 * N such engines on consecutive ports behind the one pod. The events take the shapes real
 * vLLM 0.26+ streams have on request: LoRA, salt and multimodal extra_keys, hybrid models'
 * groups, offload placeholders, duplicate copies (events.c, cache.c). What it publishes
 * comes from one or more sources:
 *
 *   - a workload (workload.c): prompts built from a pool of shared prefixes, run through an
 *     LRU block cache (cache.c), emitting BlockStored for blocks not yet cached and
 *     BlockRemoved for evictions, paced at a given event rate;
 *   - a script (script.c): one command per line, for tests that need exact events, sequence
 *     gaps, restarts, delayed delivery and malformed payloads;
 *   - an HTTP server (http.c, serve.c) speaking vLLM's OpenAI-compatible API: routers send
 *     prompts; the pod model (engine.c: vLLM V1's scheduler and block pool, on a model clock
 *     --time-scale times as fast as real time) schedules them, publishes what its cache
 *     stores and evicts, and answers with usage.prompt_tokens_details.cached_tokens and its
 *     model times; or, with --prefill-ms, after a constant delay; with injectable failures,
 *     cancellations and lost events.
 *
 * Block hashes are the engine's, not kvidx request keys, as with a real vLLM (hash.c).
 *
 * Everything runs in one thread around one zmq_poll() loop. Publications, replies and
 * script sequence changes are actions in a queue ordered by (due time, creation order)
 * (sched.c). Time is CLOCK_MONOTONIC (kvidx_now_ns()); the batch timestamp is the wall
 * clock, as vLLM's. Signals arrive through a signalfd, so a signal never races with the poll.
 *
 * Exit status: 0 on a normal end or SIGTERM/SIGINT, 1 on a setup or runtime error (bind
 * failure, out of memory), 2 on bad usage or a bad script line.
 */
#include "fakepod.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"
#include "kvidx.h"

void fp_warn(struct ilog_limit *lim, const char *fmt, ...)
{
	uint64_t suppressed;
	va_list ap;

	if (!ilog_limit_pass(lim, &suppressed))
		return;
	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (suppressed)
		fprintf(stderr, " (%" PRIu64 " similar messages suppressed)", suppressed);
	fputc('\n', stderr);
}

static void setup(struct fp *fp)
{
	const struct opts *o = &fp->o;
	sigset_t sigs;

	fp->topiclen = opts_topic(o, fp->topic, sizeof fp->topic);

	/* Blocked before ZMQ starts its threads, so that they inherit the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	fp->sigfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fp->sigfd < 0) {
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
		exit(1);
	}

	fp->zctx = zmq_ctx_new();
	if (!fp->zctx) {
		fprintf(stderr, PROG ": zmq_ctx_new: %s\n", zmq_strerror(errno));
		exit(1);
	}
	fp->xpub = o->wait_subs > 0;
	fp->nranks = o->dp_ranks;
	for (uint32_t r = 0; r < fp->nranks; r++) {
		char ep[512];

		opts_rank_endpoint("--pub", o->pub_ep, r, ep, sizeof ep);
		fp->rk[r].pub = bind_socket(fp, fp->xpub ? ZMQ_XPUB : ZMQ_PUB, "--pub", ep, 1024);
		if (o->replay_ep) {
			opts_rank_endpoint("--replay", o->replay_ep, r, ep, sizeof ep);
			fp->rk[r].replay = bind_socket(fp, ZMQ_ROUTER, "--replay", ep, 1024);
		}
		if (o->keep)
			fp->rk[r].ring = tc_xrealloc(NULL, o->keep * sizeof(*fp->rk[r].ring));
	}

	kvw_enc_init(&fp->enc);
	fp->encopts.batch_form = fp->encopts.event_form = o->form;
	fp->encopts.hash_form = o->hash_form;
	cache_init(&fp->cache, (uint32_t)o->cache_blocks, fp->nranks);
	fp->attr.medium = fp->script_attr.medium = o->medium;
	fp->shape_rng = o->seed ^ 0x5a17e5a17e5a17e5ull;
	fp->wl_on = o->workload;
	fp->wl_rng = o->seed;
	fp->srv_rng = o->seed ^ 0x5e12e5e12e5e12e5ull;
	script_open(fp);
	if (o->http_addr)
		http_start(fp);
}

static void teardown(struct fp *fp)
{
	http_stop(fp);
	engine_free(fp);
	while (fp->nheap) {
		struct action a = heap_pop(fp);

		if (a.kind == ACT_PUBLISH)
			free(a.data);
		else if (a.kind == ACT_SERVE_DONE)
			free_inflight(fp, a.data);
	}
	free(fp->heap);
	for (uint32_t r = 0; r < fp->nranks; r++) {
		ring_clear(fp, r);
		free(fp->rk[r].ring);
		zmq_close(fp->rk[r].pub);
		if (fp->rk[r].replay)
			zmq_close(fp->rk[r].replay);
	}
	evlist_drop(&fp->pending, fp->pending.n);
	free(fp->pending.v);
	free(fp->pending.rank);
	free(fp->tmp.v);
	free(fp->tmp.rank);
	free(fp->side.v);
	free(fp->side.rank);
	for (size_t i = 0; i < fp->nside; i++)
		free(fp->side_acts[i].data);
	free(fp->side_acts);
	free(fp->evict);
	free(fp->evict_fl);
	script_free(fp);
	cache_free(&fp->cache);
	kvw_enc_free(&fp->enc);
	free(fp->sbuf);
	free(fp->toks);
	free(fp->hbuf);
	zmq_ctx_term(fp->zctx);
	if (fp->script_fd > STDIN_FILENO)
		close(fp->script_fd);
	close(fp->sigfd);
}

/* Reads the signalfd; returns true when the program must exit now. */
static bool handle_signals(struct fp *fp)
{
	struct signalfd_siginfo si;

	while (read(fp->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGUSR1) {
			evlist_drop(&fp->pending, fp->pending.n);
			pod_restart(fp, fp->order, -1);
		} else {
			return true;
		}
	}
	return false;
}

/* Whether every source has finished and nothing is queued. */
static bool all_done(const struct fp *fp)
{
	if (fp->nheap)
		return false;
	if (fp->stopping)
		return true;
	return !fp->o.http_addr && (!fp->wl_on || fp->wl_done) &&
	       (!fp->script_on || fp->script_done);
}

/* When the loop must wake next (UINT64_MAX: no deadline); sends the heartbeats that are due. */
static uint64_t next_wake(struct fp *fp, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	if (fp->nheap)
		next = fp->heap[0].due;
	if (!fp->stopping && !fp->lingering) {
		uint64_t hb = pub_heartbeats(fp, now);
		if (hb < next)
			next = hb;
	}
	if (fp->lingering && fp->linger_until < next)
		next = fp->linger_until;
	if (!fp->stopping) {
		if (fp->end_ns && fp->end_ns < next)
			next = fp->end_ns;
		if (fp->script_on && !fp->script_done && fp->sleep_until > now &&
		    fp->sleep_until < next)
			next = fp->sleep_until;
		if (fp->wl_on && !fp->wl_done && fp->wl_next < next)
			next = fp->wl_next;
	}
	return next;
}

static void run(struct fp *fp)
{
	for (;;) {
		zmq_pollitem_t items[4 + 2 * FP_MAX_RANKS];
		int n = 0, i_sig, i_pub[FP_MAX_RANKS], i_replay[FP_MAX_RANKS], i_http = -1;
		int i_script = -1;
		uint64_t now = kvidx_now_ns(), next = UINT64_MAX;
		long timeout;

		if (!fp->started && fp->subs >= fp->o.wait_subs) {
			fp->started = true;
			fp->start_ns = now;
			if (fp->o.duration > 0)
				fp->end_ns = now + (uint64_t)(fp->o.duration * (double)NS_PER_S);
		}
		if (fp->started) {
			run_due(fp, now);
			if (!fp->stopping && fp->end_ns && now >= fp->end_ns) {
				fp->stopping = true; /* --duration: stop the sources, drain the queue */
				if (fp->script_on && !fp->script_done)
					flush_pending(fp, fp->pending.n, now);
			}
			if (!fp->stopping) {
				if (fp->script_on)
					script_step(fp, now);
				if (fp->wl_on && !fp->wl_done)
					workload_step(fp, now);
			}
			if (fp->exit_code)
				return;
			if (!fp->lingering && all_done(fp)) {
				fp->lingering = true;
				fp->linger_until = now + fp->o.linger_ms * NS_PER_MS;
			}
			if (fp->lingering && now >= fp->linger_until)
				return;
			next = next_wake(fp, now);
		}
		timeout = next == UINT64_MAX ? -1
			  : next <= now ? 0 : (long)((next - now + NS_PER_MS - 1) / NS_PER_MS);

		if (fp->httpd && fp->started) {
			long ht = http_timeout_ms(fp);

			if (ht >= 0 && (timeout < 0 || ht < timeout))
				timeout = ht;
		}

		items[n] = (zmq_pollitem_t){ .fd = fp->sigfd, .events = ZMQ_POLLIN };
		i_sig = n++;
		for (uint32_t r = 0; r < fp->nranks; r++) {
			struct rank *rk = &fp->rk[r];

			i_pub[r] = i_replay[r] = -1;
			if (fp->xpub) {
				items[n] = (zmq_pollitem_t){ .socket = rk->pub, .events = ZMQ_POLLIN };
				i_pub[r] = n++;
			}
			if (rk->replay) {
				items[n] = (zmq_pollitem_t){ .socket = rk->replay,
							     .events = ZMQ_POLLIN };
				i_replay[r] = n++;
			}
		}
		if (fp->httpd && fp->started) {
			items[n] = (zmq_pollitem_t){ .fd = fp->http_fd, .events = ZMQ_POLLIN };
			i_http = n++;
		}
		if (fp->started && !fp->stopping && script_wants_input(fp) &&
		    fp->sleep_until <= now) {
			items[n] = (zmq_pollitem_t){ .fd = fp->script_fd, .events = ZMQ_POLLIN };
			i_script = n++;
		}
		if (zmq_poll(items, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, PROG ": zmq_poll: %s\n", zmq_strerror(errno));
			fp->exit_code = 1;
			return;
		}
		now = kvidx_now_ns();
		if ((items[i_sig].revents & ZMQ_POLLIN) && handle_signals(fp))
			return;
		for (uint32_t r = 0; r < fp->nranks; r++) {
			if (i_pub[r] >= 0 && (items[i_pub[r]].revents & ZMQ_POLLIN))
				handle_xpub(fp, r);
			if (i_replay[r] >= 0 && (items[i_replay[r]].revents & ZMQ_POLLIN))
				handle_replay(fp, r);
		}
		if (i_http >= 0)
			http_run(fp); /* its timeouts too, not only what the descriptor says */
		if (i_script >= 0 && (items[i_script].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
			script_read(fp);
	}
}

int main(int argc, char **argv)
{
	static struct fp fp;
	const struct stats *s = &fp.st;

	opts_parse(argc, argv, &fp.o);
	setup(&fp);
	run(&fp);
	fprintf(stderr,
		PROG ": events=%" PRIu64 " batches=%" PRIu64 " blocks_stored=%" PRIu64
		" blocks_removed=%" PRIu64 " clears=%" PRIu64 " raw=%" PRIu64 " lost=%" PRIu64
		" discarded=%" PRIu64 " requests=%" PRIu64 " ok=%" PRIu64 " failed=%" PRIu64
		" cancelled=%" PRIu64 " events_dropped=%" PRIu64 " bad_requests=%" PRIu64
		" replays=%" PRIu64 " restarts=%" PRIu64 "\n",
		s->events, s->batches, s->stored, s->removed, s->cleared, s->raw, s->lost,
		s->discarded, s->requests, s->ok, s->failed, s->cancelled, s->dropped,
		s->bad_requests, s->replays, s->restarts);
	if (fp.nranks > 1 || s->extra_blocks || s->placeholders || s->dup_blocks ||
	    s->group_events)
		fprintf(stderr,
			PROG ": shapes: ranks=%" PRIu32 " extra_blocks=%" PRIu64
			" placeholder_blocks=%" PRIu64 " dup_blocks=%" PRIu64
			" group_events=%" PRIu64 "\n",
			fp.nranks, s->extra_blocks, s->placeholders, s->dup_blocks,
			s->group_events);
	teardown(&fp);
	return fp.exit_code;
}
