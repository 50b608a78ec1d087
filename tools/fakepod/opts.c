/*
 * opts.c — kvidx-fakepod's command line: the flags with their defaults and checks, the --help
 * text (quoted by the README), the topic they give (kv@<pod>@<model> or --topic) and the
 * endpoints of data-parallel ranks.
 */
#include "fakepod.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "listen.h"
#include "parse.h"

/* stays whole: one help text, a flat list of the flags and what each does (docs/STYLE.md). */
static void usage(FILE *f)
{
	fputs(
"Usage: " PROG " [OPTION]...\n"
"Plays one vLLM pod on the KV-cache event wire: publishes BlockStored, BlockRemoved and\n"
"AllBlocksCleared batches on a ZMQ PUB socket as [topic, seq8, payload], topic\n"
"kv@<pod>@<model> or --topic, from a synthetic workload, a script, and/or prompts served to\n"
"a router, in the shapes vLLM 0.26+ streams have when asked (Shapes below).\n"
"The workload runs when --workload is given or neither --script nor --http is. The run\n"
"ends once every source is done: the workload after --count events, the script at its\n"
"end; with --http, or a workload without --count, only --duration or a signal ends it.\n"
"Block hashes are engine hashes (XXH64 with a fakepod seed over the parent engine hash\n"
"and the block's tokens; nil parent for a prompt's first block), never kvidx request keys.\n"
"\n"
"Wire:\n"
"  --pub ENDPOINT         bind the PUB socket here (default tcp://127.0.0.1:5557)\n"
"  --replay ENDPOINT      bind a replay ROUTER here (default none): a request [\"\", seq8]\n"
"                         or [seq8] gets every kept batch with seq >= start as\n"
"                         [\"\", topic, seq8, payload], then [\"\", topic, ff*8, \"\"]\n"
"  --pub-connect          connect the PUB socket to --pub (rank r: port + r) instead of\n"
"                         binding it, as publishers that dial out do (kvidx-ingestd --bind)\n"
"  --old-replay-framing   replay without the topic frame: [\"\", seq8, payload]\n"
"  --keep N               batches kept for replay (default 10000; 0 keeps none)\n"
"  --publisher-id HEX|random\n"
"                         24-byte sequence frames, as vLLM #57789: the 8-byte number, then\n"
"                         a 16-byte publisher id (32 hex digits; random: a random one per\n"
"                         process). A restart is a new process with a new id: random draws\n"
"                         again, HEX adds the restart count to its last 8 bytes\n"
"  --heartbeat D          publish an empty batch on a rank idle for D (a duration: 1s);\n"
"                         0 for none (default 1s with --publisher-id, else 0)\n"
"  --kv-sources FORM      with --http, say where the events are published, as engines do:\n"
"                         vllm (GET /kv_event_sources, {\"sources\": [...]}, one entry per\n"
"                         rank, host 0.0.0.0), vllm-array (the bare array, the endpoints\n"
"                         as bound) or sglang (GET /server_info, kv_events with host *)\n"
"  --pod NAME             pod in the topic (default: HOST:PORT of --http, else of --pub;\n"
"                         a * or 0.0.0.0 host becomes 127.0.0.1)\n"
"  --model M              model in the topic (default fake-model)\n"
"  --encoding array|map   positional arrays (default) or type-tagged maps\n"
"  --hashes int|bytes     hashes as msgpack uint (default) or 8-byte big-endian bin\n"
"  --medium GPU|CPU       medium of the events (default GPU)\n"
"  --block-size N         tokens per block, 1..65536 (default 16)\n"
"  --rank N               data_parallel_rank of every batch (default: omitted, i.e. nil)\n"
"  --ts-ahead-ms MS       stamp batches MS ahead of the wall clock, as a publisher whose\n"
"                         clock runs ahead would (default 0)\n"
"  --wait-subscribers N   start nothing (workload, script, HTTP) before N subscriptions\n"
"                         have arrived, all ranks together; uses XPUB sockets (default 0:\n"
"                         start at once)\n"
"  --duration D           stop the sources after D, a duration with a unit: 30s, 1.5m,\n"
"                         500ms (default: no limit)\n"
"  --linger-ms MS         after a normal end, keep answering replay for MS before\n"
"                         exiting (default 200); also the sockets' ZMQ_LINGER\n"
"\n"
"Workload:\n"
"  --workload             run the workload (with --http too; not with --script)\n"
"  --prefixes K           distinct shared prefixes, i.e. system prompts (default 8)\n"
"  --prefix-blocks N      blocks per prefix (default 8)\n"
"  --suffix-blocks N      fresh blocks after the prefix in each prompt (default 2)\n"
"  --seed N               seed of the workload and of the served fates (default 1)\n"
"  --rate R               events per second, 0 = as fast as possible (default 1000)\n"
"  --batch N              events per batch, also in script mode (default 1)\n"
"  --kv-blocks C          KV cache blocks per rank (alias --cache-blocks; default 25000\n"
"                         for the pod model, else 1024); evictions give BlockRemoved\n"
"  --count N              stop the workload after N events (default 0: no limit)\n"
"\n"
"Script:\n"
"  --script FILE          run the commands in FILE, - for standard input\n"
"\n"
"HTTP (vLLM's OpenAI-compatible API, for routers; see below):\n"
"  --http HOST:PORT       serve POST /v1/completions, /v1/chat/completions, /tokenize,\n"
"                         GET /v1/models, /health, /metrics here (e.g. 127.0.0.1:8000)\n"
"  --prefill-ms MS        no pod model: every answer MS after its request, the cache\n"
"                         looked up at arrival, blocks stored at the answer\n"
"  --jitter-ms MS         with --prefill-ms: add a uniform 0..MS to both delays\n"
"  --event-delay-ms MS    time from request to its BlockStored batch (default 100 with\n"
"                         --prefill-ms, before or after the answer as MS says, as a\n"
"                         real pod's events leave before its answer ends; the pod\n"
"                         model: 0, the end of the step that caches them, never before)\n"
"  --fail-rate P          probability that prefill fails: HTTP 500, nothing stored\n"
"  --cancel-rate P        probability of a cancellation: the connection is closed\n"
"                         without an answer, nothing stored\n"
"  --drop-events P        probability that an ok request's event batch is never published\n"
"                         (no sequence number used: replay cannot recover it)\n"
"\n"
"The pod model (--http without --prefill-ms; tools/fakepod/README.md): vLLM V1's\n"
"scheduler, continuous batching with chunked prefill and preemption, a KV cache of\n"
"--kv-blocks blocks (held blocks pinned, freed ones reused least recently freed first);\n"
"defaults: Llama-3.1-8B on one H100 80GB (sources in the README):\n"
"  --max-num-seqs N       running requests at most (default 1024)\n"
"  --max-num-batched-tokens N  tokens per step at most (default 8192)\n"
"  --prefill-tokens-per-s R  prefill speed, uncached prompt tokens (default 24000)\n"
"  --step-overhead-ms MS  time of every step (default 4.6)\n"
"  --decode-ms-per-seq MS  added per decoding request in the step (default 0.03)\n"
"  --time-scale F         run the model F times as fast as real time (default 1);\n"
"                         reported times stay model time\n"
"Answers carry the model's times in headers X-Fakepod-Ttft-Seconds,\n"
"X-Fakepod-Queue-Seconds and X-Fakepod-E2e-Seconds; GET /metrics serves vLLM's metrics\n"
"(vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc,\n"
"vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,\n"
"vllm:time_to_first_token_seconds, ...).\n"
"\n"
"Shapes (what real vLLM 0.26+ streams contain):\n"
"  --topic T              the topic of every message instead of kv@<pod>@<model>; may be\n"
"                         \"\" (vLLM's default) or e.g. kv-events (vLLM's examples)\n"
"  --dp-ranks N           N data-parallel ranks, 1..32 (default 1): rank r binds --pub and\n"
"                         --replay at their port + r, numbers its batches from 0 and keeps\n"
"                         its own replay buffer, sets data_parallel_rank r and has a cache\n"
"                         of --cache-blocks of its own; a workload or served prompt goes to\n"
"                         the rank its first block's engine hash picks\n"
"  --lora NAME            workload prompts use LoRA adapter NAME: lora_name (and lora_id\n"
"                         1) set, NAME first in every block's extra_keys\n"
"  --lora-share P         share of workload prompts using --lora (default 1)\n"
"  --salt S               workload prompts carry cache_salt S, in block 0's extra_keys\n"
"  --salt-share P         share of workload prompts salted (default 1)\n"
"  --mm P                 share of workload prompts with an image: block-size placeholder\n"
"                         tokens from half a block into the suffix (or the last block),\n"
"                         identifier img-<16 hex>, entry (identifier, offset in block) in\n"
"                         the extra_keys of both blocks it overlaps (default 0)\n"
"  --mm-bare              multimodal entries as bare identifiers (vLLM 0.18-0.25)\n"
"  --hybrid               a hybrid model: every step's full-attention events (group_idx 0,\n"
"                         kv_cache_spec_kind full_attention) come with a sliding-window\n"
"                         group's (1, sliding_window, only the last 2 blocks listed, the\n"
"                         token_ids of all) and a Mamba group's (2, mamba, the last block\n"
"                         only), in the same batch; evictions are removed from all three\n"
"  --offload P            share of prompts whose new blocks an offload placeholder\n"
"                         (block_size 0, no tokens, nil parent) announces again on\n"
"                         --offload-medium, in the same batch; their eviction removes them\n"
"                         from that medium too (default 0)\n"
"  --offload-medium M     the placeholders' medium (default CPU)\n"
"  --dup-copies P         share of prompts whose new blocks are stored twice (two physical\n"
"                         copies, two BlockStored) and removed twice (default 0)\n"
"  --copy-counts          those BlockRemoved carry remaining_copy_counts\n"
"--lora, --salt and --mm shape the workload's prompts; --hybrid, --offload and --dup-copies\n"
"the workload's and the HTTP requests' events; the script has commands of its own.\n"
"\n"
"  -h, --help             print this help and exit\n"
"\n"
"Script commands, one per line (# starts a comment):\n"
"  store PARENT TOKENS    BlockStored for the full blocks of TOKENS (decimal, separated by\n"
"                         commas or spaces), chained from PARENT (hex engine hash, or -\n"
"                         for a first block); prints each block's hash as 0x%016x\n"
"  remove HASH...         BlockRemoved of these hex hashes\n"
"  clear                  AllBlocksCleared (also empties the served/workload cache)\n"
"  flush                  publish the pending batch now\n"
"  gap N                  skip N sequence numbers (a gap replay cannot fill)\n"
"  lose N                 do not send the next N batches, but keep them for replay\n"
"  restart                a pod restart, as SIGUSR1 below, in script order; with\n"
"                         --dp-ranks, of the script's rank only (its cache part too)\n"
"  delay D                run the publications, gap, lose and restart of the commands\n"
"                         that follow D later (0 restores); hashes still print at once\n"
"  sleep D                pause the script for D\n"
"  raw HEX                publish these bytes as a batch payload, as they are\n"
"  offload MEDIUM HASH... an offload placeholder: BlockStored of these hashes on MEDIUM,\n"
"                         block_size 0, no tokens, nil parent\n"
"  remove HASH:N...       (a count after each hash) with remaining_copy_counts N...\n"
"Settings for the events that follow (each until changed; - restores the default):\n"
"  rank R                 events, gap, lose, restart and clear go to rank R (< --dp-ranks;\n"
"                         default 0); clear empties that rank's cache only\n"
"  medium M|-             medium of store and remove (default --medium)\n"
"  group IDX KIND [WINDOW]|-  group_idx and kv_cache_spec_kind (KIND - for nil) of store\n"
"                         and remove; WINDOW: kv_cache_spec_sliding_window (tokens)\n"
"  locality L|-           locality (LOCAL, REMOTE) of store and remove\n"
"  lora NAME|-            store: lora_name NAME, NAME first in every block's extra_keys\n"
"  salt S|-               store with parent -: cache_salt S last in block 0's extra_keys\n"
"  mm [bare] START:LEN:ID...|-  store: multimodal items on tokens [START, START+LEN) of\n"
"                         the store's TOKENS, an entry (ID, START - block start), or ID\n"
"                         with bare, on every block they overlap\n"
"store's hashes fold in the block's extra_keys, as vLLM's do.\n"
"store, remove, offload and clear add an event to the pending batch, published once it\n"
"holds --batch events (so each is its own batch by default), on flush, before any other\n"
"command, and at the end of the script. store and remove do not touch the cache.\n"
"\n"
"HTTP: prompts are token ids or text; text goes through the stand-in tokenizer, one\n"
"token per UTF-8 byte (its value), and chat messages through the template\n"
"\"<|ROLE|>\\nCONTENT\\n\"... then \"<|assistant|>\\n\"; POST /tokenize shows the result.\n"
"Answers come after the last token (--prefill-ms: after MS):\n"
"usage.prompt_tokens_details.cached_tokens counts the leading full blocks cached when the\n"
"request was admitted (--prefill-ms: arrived; a fully cached prompt reports one block\n"
"less, as vLLM recomputes the last token); \"stream\": true gives server-sent events (the\n"
"usage chunk with stream_options.include_usage). A client that closes its connection\n"
"before its first token cancels the request. A step's events (--prefill-ms: an ok\n"
"request's) form one batch: BlockRemoved for evictions, then BlockStored. Another\n"
"model is 404; malformed requests 400, with OpenAI-style JSON errors. X-Request-Id is\n"
"echoed. Faults for validation tools: header X-Fakepod-Fault: fail, cancel,\n"
"drop-events, restart or delay=D (this request's events after D), comma-separated.\n"
"\n"
"Signals: SIGTERM and SIGINT exit at once (status 0). SIGUSR1 simulates a pod restart:\n"
"sequence back to 0, cache and replay buffer emptied, queued batches dropped, requests in\n"
"flight answered failed; nothing special is published.\n"
"A summary line is printed on standard error at exit, and a second one (shapes: ranks,\n"
"extra_blocks, placeholder_blocks, dup_blocks, group_events, as published) when there\n"
"are several ranks or a shape was published.\n"
"Exit status: 0 on success, 1 on a setup or runtime error, 2 on bad usage or script line.\n",
	      f);
}

static uint64_t opt_int(const char *name, const char *arg, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (!tc_parse_dec(arg, max, &v) || v < min)
		tc_usage_error("bad --%s '%s': expected a decimal integer %" PRIu64 "..%" PRIu64,
			       name, arg, min, max);
	return v;
}

/* Which of the two words a and b arg is: 0 or 1. */
static int opt_pick(const char *name, const char *arg, const char *a, const char *b)
{
	if (!strcmp(arg, a))
		return 0;
	if (!strcmp(arg, b))
		return 1;
	tc_usage_error("bad --%s '%s': expected %s or %s", name, arg, a, b);
}

static void check_name(const char *what, const char *s)
{
	if (!*s)
		tc_usage_error("bad %s '': must not be empty", what);
	if (strlen(s) > NAME_MAX_LEN)
		tc_usage_error("bad %s: %zu bytes, limit %d", what, strlen(s), NAME_MAX_LEN);
	if (strchr(s, '@'))
		tc_usage_error("bad %s '%s': must not contain '@' (the topic is kv@<pod>@<model>)",
			       what, s);
}

/*
 * The pod name an endpoint stands for: what follows "://", with a wildcard host localised.
 * False if it does not fit.
 */
static bool derive_pod(const char *ep, char *out, size_t outlen)
{
	const char *p = strstr(ep, "://");
	int n;

	p = p ? p + 3 : ep;
	if (!strncmp(p, "*:", 2))
		n = snprintf(out, outlen, "127.0.0.1%s", p + 1);
	else if (!strncmp(p, "0.0.0.0:", 8))
		n = snprintf(out, outlen, "127.0.0.1%s", p + 7);
	else
		n = snprintf(out, outlen, "%s", p);
	return n >= 0 && (size_t)n < outlen;
}

static void check_shapes(const struct opts *o);

/* --publisher-id: 32 hex digits, or "random". */
static void parse_pub_id(struct opts *o, const char *arg)
{
	o->pub_id_set = true;
	o->pub_id_random = !strcmp(arg, "random");
	if (o->pub_id_random)
		return;
	for (int i = 0; i < 32; i++) {
		char c = arg[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (v < 0) {
			fprintf(stderr, PROG ": --publisher-id: expected 32 hex digits or random, "
				"got '%s'\n", arg);
			exit(2);
		}
		o->pub_id[i / 2] = (uint8_t)(o->pub_id[i / 2] << 4 | v);
	}
	if (arg[32]) {
		fprintf(stderr, PROG ": --publisher-id: expected 32 hex digits or random, got "
			"'%s'\n", arg);
		exit(2);
	}
}

/* The defaults that depend on the mode: the pod model, or not
 * (tools/fakepod/README.md "The pod model"). */
static void model_defaults(struct opts *o)
{
	bool model = o->http_addr && !o->constant;

	if (!o->cache_blocks)
		o->cache_blocks = model ? MODEL_KV_BLOCKS : 1024;
	if (o->event_delay_ms == UINT64_MAX)
		o->event_delay_ms = model ? 0 : 100;
	o->kv_blocks = o->cache_blocks;
	if (o->jitter_ms && !o->constant)
		tc_usage_error("--jitter-ms varies --prefill-ms: it needs --prefill-ms");
}

/* stays whole: a flat table of options, one case per flag (docs/STYLE.md). */
void opts_parse(int argc, char **argv, struct opts *o)
{
	enum {
		O_PUB = 256, O_REPLAY, O_OLD, O_KEEP, O_POD, O_MODEL, O_ENCODING, O_HASHES,
		O_MEDIUM, O_BS, O_RANK, O_WAIT, O_DURATION, O_LINGER, O_WORKLOAD, O_PREFIXES,
		O_PBLOCKS, O_SBLOCKS, O_SEED, O_RATE, O_BATCH, O_CACHE, O_COUNT, O_SCRIPT,
		O_HTTP, O_PREFILL, O_JITTER, O_EVDELAY, O_FAIL, O_CANCEL, O_DROP, O_TS_AHEAD,
		/* Shapes */
		O_TOPIC, O_DP_RANKS, O_LORA, O_LORA_SHARE, O_SALT, O_SALT_SHARE, O_MM, O_MM_BARE,
		O_HYBRID, O_OFFLOAD, O_OFFLOAD_MEDIUM, O_DUP, O_COPY_COUNTS, O_PUB_ID,
		O_HEARTBEAT, O_KV_SOURCES, O_PUB_CONNECT,
		/* The pod model */
		O_SEQS, O_BATCHED, O_PREFILL_TPS, O_STEP_MS, O_DECODE_MS, O_SCALE,
	};
	static const struct option longopts[] = {
		{ "pub", required_argument, NULL, O_PUB },
		{ "replay", required_argument, NULL, O_REPLAY },
		{ "old-replay-framing", no_argument, NULL, O_OLD },
		{ "keep", required_argument, NULL, O_KEEP },
		{ "publisher-id", required_argument, NULL, O_PUB_ID },
		{ "heartbeat", required_argument, NULL, O_HEARTBEAT },
		{ "kv-sources", required_argument, NULL, O_KV_SOURCES },
		{ "pub-connect", no_argument, NULL, O_PUB_CONNECT },
		{ "pod", required_argument, NULL, O_POD },
		{ "model", required_argument, NULL, O_MODEL },
		{ "encoding", required_argument, NULL, O_ENCODING },
		{ "hashes", required_argument, NULL, O_HASHES },
		{ "medium", required_argument, NULL, O_MEDIUM },
		{ "block-size", required_argument, NULL, O_BS },
		{ "rank", required_argument, NULL, O_RANK },
		{ "ts-ahead-ms", required_argument, NULL, O_TS_AHEAD },
		{ "wait-subscribers", required_argument, NULL, O_WAIT },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "linger-ms", required_argument, NULL, O_LINGER },
		{ "workload", no_argument, NULL, O_WORKLOAD },
		{ "prefixes", required_argument, NULL, O_PREFIXES },
		{ "prefix-blocks", required_argument, NULL, O_PBLOCKS },
		{ "suffix-blocks", required_argument, NULL, O_SBLOCKS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "rate", required_argument, NULL, O_RATE },
		{ "batch", required_argument, NULL, O_BATCH },
		{ "cache-blocks", required_argument, NULL, O_CACHE },
		{ "kv-blocks", required_argument, NULL, O_CACHE },
		{ "count", required_argument, NULL, O_COUNT },
		{ "script", required_argument, NULL, O_SCRIPT },
		{ "http", required_argument, NULL, O_HTTP },
		{ "prefill-ms", required_argument, NULL, O_PREFILL },
		{ "jitter-ms", required_argument, NULL, O_JITTER },
		{ "event-delay-ms", required_argument, NULL, O_EVDELAY },
		{ "fail-rate", required_argument, NULL, O_FAIL },
		{ "cancel-rate", required_argument, NULL, O_CANCEL },
		{ "drop-events", required_argument, NULL, O_DROP },
		/* Shapes */
		{ "topic", required_argument, NULL, O_TOPIC },
		{ "dp-ranks", required_argument, NULL, O_DP_RANKS },
		{ "lora", required_argument, NULL, O_LORA },
		{ "lora-share", required_argument, NULL, O_LORA_SHARE },
		{ "salt", required_argument, NULL, O_SALT },
		{ "salt-share", required_argument, NULL, O_SALT_SHARE },
		{ "mm", required_argument, NULL, O_MM },
		{ "mm-bare", no_argument, NULL, O_MM_BARE },
		{ "hybrid", no_argument, NULL, O_HYBRID },
		{ "offload", required_argument, NULL, O_OFFLOAD },
		{ "offload-medium", required_argument, NULL, O_OFFLOAD_MEDIUM },
		{ "dup-copies", required_argument, NULL, O_DUP },
		{ "copy-counts", no_argument, NULL, O_COPY_COUNTS },
		/* The pod model */
		{ "max-num-seqs", required_argument, NULL, O_SEQS },
		{ "max-num-batched-tokens", required_argument, NULL, O_BATCHED },
		{ "prefill-tokens-per-s", required_argument, NULL, O_PREFILL_TPS },
		{ "step-overhead-ms", required_argument, NULL, O_STEP_MS },
		{ "decode-ms-per-seq", required_argument, NULL, O_DECODE_MS },
		{ "time-scale", required_argument, NULL, O_SCALE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char err[160];
	bool heartbeat_set = false;
	int c;

	*o = (struct opts){
		.pub_ep = "tcp://127.0.0.1:5557", .model = "fake-model", .medium = "GPU",
		.block_size = 16, .keep = 10000, .linger_ms = 200, .prefixes = 8,
		.prefix_blocks = 8, .suffix_blocks = 2, .seed = 1, .rate = 1000, .batch = 1,
		.event_delay_ms = UINT64_MAX,
		/* The pod model: Llama-3.1-8B on one H100 (tools/fakepod/README.md "The pod model") */
		.max_num_seqs = MODEL_SEQS, .max_batched = MODEL_BATCHED,
		.prefill_tps = MODEL_PREFILL_TPS, .step_ms = MODEL_STEP_MS,
		.decode_seq_ms = MODEL_DECODE_MS, .time_scale = 1,
		/* Shapes */
		.dp_ranks = 1, .lora_share = 1, .salt_share = 1, .offload_medium = "CPU",
	};
	tc_prog = PROG;
	opterr = 0; /* This program prints its own messages, naming itself PROG. */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_PUB: o->pub_ep = optarg; break;
		case O_REPLAY: o->replay_ep = optarg; break;
		case O_OLD: o->old_framing = true; break;
		case O_PUB_CONNECT: o->pub_connect = true; break;
		case O_KEEP: o->keep = opt_int("keep", optarg, 0, 100000000); break;
		case O_PUB_ID: parse_pub_id(o, optarg); break;
		case O_KV_SOURCES:
			if (strcmp(optarg, "vllm") && strcmp(optarg, "vllm-array") &&
			    strcmp(optarg, "sglang"))
				tc_usage_error("bad --kv-sources '%s': vllm, vllm-array or sglang",
					       optarg);
			o->kv_sources = optarg;
			break;
		case O_HEARTBEAT:
			o->heartbeat_ms = (uint64_t)(tc_arg_duration("heartbeat", optarg) * 1e3);
			heartbeat_set = true;
			break;
		case O_POD: o->pod = optarg; break;
		case O_MODEL: o->model = optarg; break;
		case O_ENCODING:
			o->form = opt_pick("encoding", optarg, "array", "map") ?
				  KVW_FORM_MAP : KVW_FORM_ARRAY;
			break;
		case O_HASHES:
			o->hash_form = opt_pick("hashes", optarg, "int", "bytes") ?
				       KVW_HASH_BIN : KVW_HASH_INT;
			break;
		case O_MEDIUM:
			opt_pick("medium", optarg, "GPU", "CPU");
			o->medium = optarg;
			break;
		case O_BS: o->block_size = (uint32_t)opt_int("block-size", optarg, 1, 65536); break;
		case O_RANK:
			o->rank = (int64_t)opt_int("rank", optarg, 0, INT32_MAX);
			o->has_rank = true;
			break;
		case O_WAIT: o->wait_subs = opt_int("wait-subscribers", optarg, 0, 1000000); break;
		case O_DURATION:
			o->duration = tc_arg_duration("duration", optarg);
			if (!(o->duration > 0))
				tc_usage_error("bad --duration '%s': must be longer than 0", optarg);
			break;
		case O_LINGER: o->linger_ms = opt_int("linger-ms", optarg, 0, MAX_MS); break;
		case O_WORKLOAD: o->workload = true; break;
		case O_PREFIXES: o->prefixes = opt_int("prefixes", optarg, 1, 1u << 30); break;
		case O_PBLOCKS: o->prefix_blocks = opt_int("prefix-blocks", optarg, 0, 1u << 16); break;
		case O_SBLOCKS: o->suffix_blocks = opt_int("suffix-blocks", optarg, 0, 1u << 16); break;
		case O_SEED: o->seed = opt_int("seed", optarg, 0, UINT64_MAX); break;
		case O_RATE: o->rate = tc_arg_num("rate", optarg, 0, 1e9); break;
		case O_BATCH: o->batch = opt_int("batch", optarg, 1, 65536); break;
		case O_CACHE: o->cache_blocks = opt_int("kv-blocks", optarg, 1, 1u << 26); break;
		case O_COUNT: o->count = opt_int("count", optarg, 0, UINT64_MAX); break;
		case O_SCRIPT: o->script = optarg; break;
		case O_HTTP:
			if (tc_listen_check(optarg, err, sizeof(err)))
				tc_usage_error("bad --http '%s': %s", optarg, err);
			o->http_addr = optarg;
			break;
		case O_TS_AHEAD: o->ts_ahead_ms = opt_int("ts-ahead-ms", optarg, 0, MAX_MS); break;
		case O_PREFILL:
			o->prefill_ms = opt_int("prefill-ms", optarg, 0, MAX_MS);
			o->constant = true;
			break;
		case O_JITTER: o->jitter_ms = opt_int("jitter-ms", optarg, 0, MAX_MS); break;
		case O_EVDELAY: o->event_delay_ms = opt_int("event-delay-ms", optarg, 0, MAX_MS); break;
		case O_FAIL: o->fail_rate = tc_arg_num("fail-rate", optarg, 0, 1); break;
		case O_CANCEL: o->cancel_rate = tc_arg_num("cancel-rate", optarg, 0, 1); break;
		case O_DROP: o->drop_rate = tc_arg_num("drop-events", optarg, 0, 1); break;
		/* Shapes */
		case O_TOPIC: o->topic = optarg; break;
		case O_DP_RANKS:
			o->dp_ranks = (uint32_t)opt_int("dp-ranks", optarg, 1, FP_MAX_RANKS);
			break;
		case O_LORA: o->lora = optarg; break;
		case O_LORA_SHARE: o->lora_share = tc_arg_num("lora-share", optarg, 0, 1); break;
		case O_SALT: o->salt = optarg; break;
		case O_SALT_SHARE: o->salt_share = tc_arg_num("salt-share", optarg, 0, 1); break;
		case O_MM: o->mm_rate = tc_arg_num("mm", optarg, 0, 1); break;
		case O_MM_BARE: o->mm_bare = true; break;
		case O_HYBRID: o->hybrid = true; break;
		case O_OFFLOAD: o->offload = tc_arg_num("offload", optarg, 0, 1); break;
		case O_OFFLOAD_MEDIUM: o->offload_medium = optarg; break;
		case O_DUP: o->dup_copies = tc_arg_num("dup-copies", optarg, 0, 1); break;
		case O_COPY_COUNTS: o->copy_counts = true; break;
		case O_SEQS: o->max_num_seqs = opt_int("max-num-seqs", optarg, 1, 1u << 20); break;
		case O_BATCHED:
			o->max_batched = opt_int("max-num-batched-tokens", optarg, 1, 1u << 24);
			break;
		case O_PREFILL_TPS:
			o->prefill_tps = tc_arg_num("prefill-tokens-per-s", optarg, 1, 1e9);
			break;
		case O_STEP_MS: o->step_ms = tc_arg_num("step-overhead-ms", optarg, 0, 1e5); break;
		case O_DECODE_MS: o->decode_seq_ms = tc_arg_num("decode-ms-per-seq", optarg, 0, 1e4); break;
		case O_SCALE: o->time_scale = tc_arg_num("time-scale", optarg, 1e-3, 1e6); break;
		default: /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
		}
	}
	if (!heartbeat_set && o->pub_id_set)
		o->heartbeat_ms = 1000; /* vLLM #57789's idle publishers: one a second */
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->workload && o->script)
		tc_usage_error("--workload and --script cannot be combined");
	if (!o->script && !o->http_addr)
		o->workload = true;
	model_defaults(o);
	if (o->fail_rate + o->cancel_rate > 1)
		tc_usage_error("--fail-rate %g plus --cancel-rate %g exceed 1", o->fail_rate,
			       o->cancel_rate);
	if (o->workload && o->prefix_blocks + o->suffix_blocks == 0)
		tc_usage_error("--prefix-blocks and --suffix-blocks are both 0: prompts would be "
			       "empty");
	if (o->workload && o->suffix_blocks == 0 &&
	    o->prefixes * o->prefix_blocks <= o->cache_blocks)
		tc_usage_error("--suffix-blocks 0 with --prefixes x --prefix-blocks (%" PRIu64 ") "
			       "fitting in --cache-blocks %" PRIu64 ": once all is cached the "
			       "workload publishes nothing", o->prefixes * o->prefix_blocks,
			       o->cache_blocks);
	if ((o->prefix_blocks + o->suffix_blocks) * o->block_size > KVW_MAX_TOKENS)
		tc_usage_error("a workload prompt of (%" PRIu64 " + %" PRIu64 ") blocks of %" PRIu32
			       " tokens exceeds %u tokens", o->prefix_blocks, o->suffix_blocks,
			       o->block_size, KVW_MAX_TOKENS);
	check_name("--model", o->model);
	if (o->pod)
		check_name("--pod", o->pod);
	check_shapes(o);
}

/* The checks of the Shapes block. */
static void check_shapes(const struct opts *o)
{
	char ep[512];

	if (o->topic && strlen(o->topic) > 2 * NAME_MAX_LEN + 7)
		tc_usage_error("bad --topic: %zu bytes, limit %d", strlen(o->topic),
			       2 * NAME_MAX_LEN + 7);
	if (o->dp_ranks > 1) {
		if (o->has_rank)
			tc_usage_error("--rank and --dp-ranks cannot be combined: rank r's batches "
				       "carry data_parallel_rank r");
		opts_rank_endpoint("--pub", o->pub_ep, o->dp_ranks - 1, ep, sizeof ep);
		if (o->replay_ep)
			opts_rank_endpoint("--replay", o->replay_ep, o->dp_ranks - 1, ep, sizeof ep);
	}
	if (o->kv_sources && !o->http_addr)
		tc_usage_error("--kv-sources is served over --http: add --http");
	if ((o->lora || o->salt || o->mm_rate > 0) && !o->workload)
		tc_usage_error("--lora, --salt and --mm shape the workload's prompts: add "
			       "--workload (the script has lora, salt and mm commands)");
	if ((o->hybrid || o->offload > 0 || o->dup_copies > 0) && !o->workload && !o->http_addr)
		tc_usage_error("--hybrid, --offload and --dup-copies shape the workload's and "
			       "--http requests' events (the script has group, offload and store)");
	if (o->lora && (!*o->lora || strlen(o->lora) >= KVW_LORA_NAME_MAX))
		tc_usage_error("bad --lora: 1 to %d bytes", KVW_LORA_NAME_MAX - 1);
	if (o->salt && !*o->salt)
		tc_usage_error("bad --salt '': an empty salt is no salt in vLLM");
	if (!*o->offload_medium || strlen(o->offload_medium) >= KVW_MEDIUM_MAX)
		tc_usage_error("bad --offload-medium: 1 to %d bytes", KVW_MEDIUM_MAX - 1);
}

void opts_rank_endpoint(const char *flag, const char *ep, unsigned r, char *out, size_t cap)
{
	const char *colon = strrchr(ep, ':');
	uint64_t port;

	if (r == 0) {
		if ((size_t)snprintf(out, cap, "%s", ep) >= cap)
			tc_usage_error("bad %s: endpoint longer than %zu bytes", flag, cap - 1);
		return;
	}
	if (!colon || !tc_parse_dec(colon + 1, 65535, &port) || port == 0)
		tc_usage_error("bad %s '%s': --dp-ranks needs a numeric port (rank r binds port "
			       "+ r)", flag, ep);
	if (port + r > 65535)
		tc_usage_error("bad %s '%s': rank %u's port %" PRIu64 " exceeds 65535", flag, ep,
			       r, port + r);
	if ((size_t)snprintf(out, cap, "%.*s:%" PRIu64, (int)(colon - ep), ep, port + r) >= cap)
		tc_usage_error("bad %s: endpoint longer than %zu bytes", flag, cap - 1);
}


size_t opts_topic(const struct opts *o, char *topic, size_t cap)
{
	char pod[NAME_MAX_LEN + 1];

	if (o->topic)
		return (size_t)snprintf(topic, cap, "%s", o->topic);
	if (o->pod) {
		snprintf(pod, sizeof pod, "%s", o->pod);
	} else {
		if (!derive_pod(o->http_addr ? o->http_addr : o->pub_ep, pod, sizeof pod))
			tc_usage_error("the pod name derived from the endpoint is longer than %d "
				       "bytes: use --pod", NAME_MAX_LEN);
		check_name("pod name derived from the endpoint (use --pod)", pod);
	}
	return (size_t)snprintf(topic, cap, "kv@%s@%s", pod, o->model);
}
