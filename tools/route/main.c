/*
 * kvidx-route — a reference router worker for kvidx: an OpenAI-compatible front that routes
 * each request to the pod holding its prefix (--listen), a load generator (the default), and
 * the paired-gap validation of docs/ttl.md against live pods (--validate). route.h lists the parts.
 * This file: the command line, signals, and the mode chosen.
 *
 * Pods are vLLM servers (or kvidx-fakepod --http) named as the index names them, with the
 * base URL they serve on: --pod 10.0.0.11:8000=http://10.0.0.11:8000.
 *
 * Exit status: 0 on success (also after SIGTERM / SIGINT), 1 if the index, a socket or the
 * HTTP machinery cannot be set up, 2 on bad usage.
 */
#include "route.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "attach.h"
#include "args.h"
#include "cli.h"
#include "listen.h"
#include "parse.h"

/* stays whole: one help text, a flat list of the flags and what each does (docs/STYLE.md). */
static void usage(FILE *f)
{
	fputs(
"Usage: " PROG " --listen HOST:PORT --pod NAME=URL [--pod ...] [OPTION]...   (front)\n"
"       " PROG " --pod NAME=URL [--pod ...] [--file F | --synthetic] [OPTION]...\n"
"       " PROG " --front URL [--front ...] [--file F | --synthetic] [OPTION]...\n"
"       " PROG " --validate --pod NAME=URL [--pod ...] [OPTION]...\n"
"A reference router worker for a kvidx index. For each prompt it computes the block keys\n"
"(the index's algorithm, seed and block size, and --model), scores the pods wait-free,\n"
"picks one, commits the decision to the index (speculative entries, trusted for the pod's\n"
"TTL until a BlockStored event confirms them), sends the request to the pod over HTTP\n"
"(vLLM's OpenAI-compatible API, HTTP/1.1 keep-alive) and reports the answer's\n"
"usage.prompt_tokens_details.cached_tokens back to the index.\n"
"\n"
"Index and pods:\n"
"  --name NAME            index to attach to (default kvidx)\n"
"  --model M              model the keys are rooted at and sent to the pods (default\n"
"                         fake-model, kvidx-fakepod's default)\n"
"  --pod NAME=URL         a candidate (decode) pod, repeatable (at most 256): NAME as in\n"
"                         the index (the pod's ip:port), URL its HTTP base, e.g.\n"
"                         --pod 127.0.0.1:8000=http://127.0.0.1:8000\n"
"  --prefill NAME=URL     a prefill pod under P/D disaggregation, repeatable: the\n"
"                         best-scored prefill pod is committed too and named to the decode\n"
"                         pod in the x-prefiller-host-port header (llm-d's sidecar)\n"
"  --policy P             how to pick a pod (default kvidx; see Policy below): kvidx,\n"
"                         prefix, round-robin, least-loaded, llm-d, dynamo\n"
"  --pod-prefill-rate R   prompt tokens a pod prefills per second (default 24000, as\n"
"                         kvidx-fakepod's model): the pods' prefill backlogs drain at it\n"
"  --pod-time-scale F     the pods' model runs F times as fast as the wall clock, as\n"
"                         kvidx-fakepod --time-scale (default 1: real pods)\n"
"  --pod-max-num-seqs N   a pod's running-set bound, vLLM's --max-num-seqs (default 1024):\n"
"                         llm-d's queue scorer counts the requests beyond it as waiting\n"
"  --pod-kv-blocks N      a pod's KV cache in blocks (default 25000; 0: usage 0): llm-d's\n"
"                         KV-utilization scorer\n"
"  --balance-slack S      kvidx: pass over a busy pod whose recent uncached tokens exceed\n"
"                         the pods' mean by more than S x the mean and the margin below\n"
"                         (default 0.15; 0: never)\n"
"  --balance-margin-ms MS  that margin, in prefill time at --pod-prefill-rate (default 125)\n"
"  --balance-half-life D  the weight of those tokens halves every D of pod time (default\n"
"                         30s)\n"
"  --spec-weight W        weight of a speculative block in the score, 0..1 (default 1, as\n"
"                         llm-d; below 1 a confirmed match beats an equally long prediction)\n"
"  --down-ms MS           a pod that cannot be reached is left out this long (default 5000)\n"
"  --connect-timeout-ms MS  connection timeout to a pod (default 1000)\n"
"  --reply-timeout-ms MS  give a request up if its pod has not answered it whole\n"
"                         (default 300000)\n"
"\n"
"Front (--listen):\n"
"  --listen HOST:PORT     serve POST /v1/completions and /v1/chat/completions (and GET\n"
"                         /v1/models, /health) here, with SO_REUSEPORT: several workers on\n"
"                         one port share the kernel's connections and one index\n"
"  --tries N              pods tried per request when pods cannot be reached (default 3)\n"
"  --max-body BYTES       larger request bodies are answered 413 (default 67108864)\n"
"  --keepalive-requests N  close a client connection after its N-th answer (default 100;\n"
"                         0: never), so that the kernel spreads reconnecting clients over\n"
"                         the workers on the port again\n"
"\n"
"Load generator (default mode; prompts from standard input, one per line, tokens as decimal\n"
"uint32 separated by whitespace or commas; blank lines and lines starting with # are\n"
"skipped):\n"
"  --front URL            send to this kvidx-route front instead of routing (repeatable:\n"
"                         round robin); the front's decision comes from its headers\n"
"  --join-front URL       a front that joins the round robin only --join-after from the\n"
"                         start (repeatable; a host joining a running fleet)\n"
"  --join-after D         when the --join-front fronts join, a duration (default 5s)\n"
"  --file FILE            read the prompts from FILE instead\n"
"  --synthetic            generate a shared-prefix workload instead:\n"
"  --prefixes K             distinct shared prefixes (default 8)\n"
"  --prefix-blocks N        blocks per prefix (default 8)\n"
"  --suffix-blocks N        fresh blocks after the prefix in each prompt (default 2)\n"
"  --seed N                 seed of the prefix choice and of the suffixes (default 1); the\n"
"                           prefixes themselves are the same in every kvidx-route\n"
"  --followups P            probability that an answered request gets a next turn: the\n"
"                           whole prompt plus --suffix-blocks fresh blocks, up to 4 turns\n"
"                           (default 0)\n"
"  --followup-ms MS         mean of the exponential gap from an answer to the next turn\n"
"                           (default 100)\n"
"  --trace FILE           replay a request trace in the Mooncake format instead (one JSON\n"
"                         object a line: timestamp ms, input_length, output_length,\n"
"                         hash_ids): each hash id is the same 512 synthetic tokens in every\n"
"                         process, max_tokens is output_length, arrivals at the timestamps\n"
"  --trace-speedup X        divide the trace's timestamps by X (default 1)\n"
"  --trace-limit N          replay its first N requests only (default 0: all)\n"
"  --trace-dump             print each request's prompt as an input line and exit (no\n"
"                           index, no pods needed)\n"
"  --rate R               requests per second (synthetic default 10; with lines: default 0,\n"
"                         each line as soon as it is read; 0: as fast as --concurrency\n"
"                         allows)\n"
"  --poisson              exponential gaps between requests (Poisson arrivals at --rate)\n"
"                         instead of even spacing\n"
"  --count N              stop after N requests, next turns included (default 0: no\n"
"                         limit)\n"
"  --duration D           stop sending after D, a duration with a unit: 30s, 2m\n"
"                         (default 0: no limit)\n"
"  --max-tokens N         max_tokens of each request (default 4)\n"
"  --concurrency N        requests in flight at most; the input waits beyond (default\n"
"                         4096; with --rate 0 a closed loop of N clients)\n"
"  --no-stream            ask for whole answers (TTFT is then the whole answer's time)\n"
"  TTFT is the pod's own figure where an answer carries X-Fakepod-Ttft-Seconds\n"
"  (kvidx-fakepod's model time), else the time to the first answer byte\n"
"\n"
"Validation (--validate): pairs of requests sharing a long fresh prefix, the second sent\n"
"a gap after the first; see docs/ttl.md.\n"
"  --validate             run the validation and print its table\n"
"  --pairs N              pairs per gap and scenario (default 5)\n"
"  --gaps LIST            gaps, durations with a unit, comma-separated: 40ms,300ms,1.8s\n"
"                         (default: below p50, near p95 of the pods' confirmation\n"
"                         latency, near the TTL and beyond it)\n"
"  --scenarios LIST       of success, cancel, fail, restart, delay (default success,cancel;\n"
"                         with --fakepods all five)\n"
"  --fakepods             the pods are kvidx-fakepod: faults through X-Fakepod-Fault\n"
"  --delay-ms MS          the delay scenario's event delay (default TTL + 500 ms)\n"
"  --stagger-ms MS        start of one pair to the next within a cell (default 50)\n"
"  (--prefix-blocks, default 16, and --suffix-blocks, default 2, shape the pairs)\n"
"\n"
"Output:\n"
"  --quiet                no line per decision and outcome, only the summary (with --json:\n"
"                         the summary as one JSON line)\n"
"  --json                 JSON lines instead of text\n"
"  -h, --help             print this help and exit\n"
"\n"
"Policy (--policy), among the pods that are up, from the score (blocks matched from block\n"
"0, tier- and speculation-weighted) and each pod's load, what this router sent it plus\n"
"what the other routers did from the index's load view (requests outstanding; the prefill\n"
"backlog: uncached tokens sent, drained at --pod-prefill-rate; prompt tokens in flight):\n"
"  kvidx         the lowest TTFT added: (prefill queued + this prompt's uncached tokens x\n"
"                (1 + the requests whose prefill is queued there, which it delays)) / rate,\n"
"                speculative blocks discounted by the pod's confirmation rate\n"
"  prefix        the best score\n"
"  round-robin   the next pod in turn\n"
"  least-loaded  the fewest requests outstanding\n"
"  llm-d         llm-d's precise prefix-cache profile: 2 x prefix + 1 x (1 - KV usage)\n"
"                + 1 x queue, the highest\n"
"  dynamo        Dynamo's KV router cost, the lowest: max(prefill blocks (queued +\n"
"                prompt) - overlap blocks, 0) + decode blocks (in flight + prompt)\n"
"Ties go to the pod with the fewest requests outstanding, then round robin. Pods the index\n"
"does not know (yet) are routed to without scores or commits.\n"
"A pod that cannot be reached is marked down for --down-ms; the front retries elsewhere.\n"
"\n"
"Each decision prints its kind: predicted (the chosen pod's match includes speculative\n"
"blocks), confirmed (the match is all confirmed blocks) or nomatch; each answer prints its\n"
"status (ok, failed, cancelled, timeout, unreachable, error), the cached tokens, the\n"
"tokens the match promised, the TTFT, and FALSE-WARM when the pod cached fewer than\n"
"promised. At the end a summary: decisions by kind with TTFT and cached tokens, outcomes,\n"
"false warm routes, next turns on the previous turn's pod, requests per pod.\n"
"\n"
"Front: each request is tokenized (token-id prompts as given; text and chat through a\n"
"pod's /tokenize), routed, committed, forwarded unchanged (stream_options.include_usage is\n"
"added to streams that lack it, and the usage chunk it brings is not passed on), and its\n"
"answer streamed back unchanged with X-Request-Id (the client's, or one made up: the\n"
"correlation id), X-Kvidx-Pod and X-Kvidx-Decision. Errors are OpenAI-style JSON.\n"
"\n"
"Exit status: 0 on success or after SIGTERM/SIGINT, 1 if the index or a socket cannot be\n"
"set up, 2 on bad usage.\n",
	      f);
}

static uint64_t opt_u64(const char *flag, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (!tc_parse_dec(s, max, &v) || v < min)
		tc_usage_error("--%s: expected an integer in %" PRIu64 "..%" PRIu64 ", got '%s'",
			       flag, min, max, s);
	return v;
}

/* An HTTP base URL: http(s)://host:port[/], kept without the trailing '/'. */
static void check_url(const char *flag, const char *url, char *out, size_t outlen)
{
	size_t n = strlen(url);

	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
		tc_usage_error("--%s: '%s' is not an HTTP URL (e.g. http://127.0.0.1:8000)", flag,
			       url);
	if (n >= outlen)
		tc_usage_error("--%s: URL longer than %zu bytes", flag, outlen - 1);
	snprintf(out, outlen, "%s", url);
	while (n > 8 && out[n - 1] == '/')
		out[--n] = '\0';
}

static void opt_pod(struct opts *o, char *arg, bool prefill)
{
	const char *flag = prefill ? "prefill" : "pod";
	char *eq = strchr(arg, '=');

	if (!eq || eq == arg || !eq[1])
		tc_usage_error("--%s: expected NAME=URL, got '%s'", flag, arg);
	*eq = '\0';
	if (strlen(arg) >= KVIDX_POD_NAME_MAX)
		tc_usage_error("--%s: name '%s' is longer than %d bytes", flag, arg,
			       KVIDX_POD_NAME_MAX - 1);
	if (o->npods == MAX_PODS)
		tc_usage_error("--%s: at most %d pods", flag, MAX_PODS);
	for (int i = 0; i < o->npods; i++)
		if (!strcmp(o->pods[i].name, arg))
			tc_usage_error("--%s: %s is given twice", flag, arg);
	struct pod *p = &o->pods[o->npods++];
	snprintf(p->name, sizeof(p->name), "%s", arg);
	check_url(flag, eq + 1, p->url, sizeof(p->url));
	p->idx = -1;
	p->prefill = prefill;
	o->nprefill += prefill;
}

enum {
	O_NAME = 256, O_MODEL, O_POD, O_PREFILL, O_SPEC_WEIGHT, O_DOWN, O_CONNECT, O_TIMEOUT,
	O_LISTEN, O_TRIES, O_FRONT, O_FILE, O_SYNTH, O_PREFIXES, O_PREFIX_BLOCKS,
	O_SUFFIX_BLOCKS, O_SEED, O_FOLLOWUPS, O_FOLLOWUP_MS, O_RATE, O_POISSON, O_COUNT,
	O_DURATION, O_MAX_TOKENS, O_CONCURRENCY, O_NO_STREAM, O_VALIDATE, O_PAIRS, O_GAPS, O_SCENARIOS,
	O_FAKEPODS, O_DELAY, O_STAGGER, O_QUIET, O_JSON, O_POLICY, O_PREFILL_RATE, O_MAX_SEQS,
	O_KV_BLOCKS, O_TIME_SCALE, O_TRACE, O_TRACE_SPEEDUP, O_TRACE_LIMIT, O_TRACE_DUMP, O_MAX_BODY, O_KEEPALIVE, O_BALANCE, O_HALF_LIFE, O_MARGIN,
	O_JOIN_FRONT, O_JOIN_AFTER,
};

/* stays whole: a flat table of options, one case per flag (docs/STYLE.md). */
static void parse_args(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "name", required_argument, NULL, O_NAME },
		{ "model", required_argument, NULL, O_MODEL },
		{ "pod", required_argument, NULL, O_POD },
		{ "prefill", required_argument, NULL, O_PREFILL },
		{ "spec-weight", required_argument, NULL, O_SPEC_WEIGHT },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "trace-speedup", required_argument, NULL, O_TRACE_SPEEDUP },
		{ "trace-limit", required_argument, NULL, O_TRACE_LIMIT },
		{ "trace-dump", no_argument, NULL, O_TRACE_DUMP },
		{ "pod-prefill-rate", required_argument, NULL, O_PREFILL_RATE },
		{ "pod-max-num-seqs", required_argument, NULL, O_MAX_SEQS },
		{ "pod-time-scale", required_argument, NULL, O_TIME_SCALE },
		{ "pod-kv-blocks", required_argument, NULL, O_KV_BLOCKS },
		{ "balance-slack", required_argument, NULL, O_BALANCE },
		{ "balance-half-life", required_argument, NULL, O_HALF_LIFE },
		{ "balance-margin-ms", required_argument, NULL, O_MARGIN },
		{ "down-ms", required_argument, NULL, O_DOWN },
		{ "connect-timeout-ms", required_argument, NULL, O_CONNECT },
		{ "reply-timeout-ms", required_argument, NULL, O_TIMEOUT },
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "tries", required_argument, NULL, O_TRIES },
		{ "max-body", required_argument, NULL, O_MAX_BODY },
		{ "keepalive-requests", required_argument, NULL, O_KEEPALIVE },
		{ "front", required_argument, NULL, O_FRONT },
		{ "join-front", required_argument, NULL, O_JOIN_FRONT },
		{ "join-after", required_argument, NULL, O_JOIN_AFTER },
		{ "file", required_argument, NULL, O_FILE },
		{ "synthetic", no_argument, NULL, O_SYNTH },
		{ "prefixes", required_argument, NULL, O_PREFIXES },
		{ "prefix-blocks", required_argument, NULL, O_PREFIX_BLOCKS },
		{ "suffix-blocks", required_argument, NULL, O_SUFFIX_BLOCKS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "followups", required_argument, NULL, O_FOLLOWUPS },
		{ "followup-ms", required_argument, NULL, O_FOLLOWUP_MS },
		{ "rate", required_argument, NULL, O_RATE },
		{ "poisson", no_argument, NULL, O_POISSON },
		{ "count", required_argument, NULL, O_COUNT },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "max-tokens", required_argument, NULL, O_MAX_TOKENS },
		{ "concurrency", required_argument, NULL, O_CONCURRENCY },
		{ "no-stream", no_argument, NULL, O_NO_STREAM },
		{ "validate", no_argument, NULL, O_VALIDATE },
		{ "pairs", required_argument, NULL, O_PAIRS },
		{ "gaps", required_argument, NULL, O_GAPS },
		{ "scenarios", required_argument, NULL, O_SCENARIOS },
		{ "fakepods", no_argument, NULL, O_FAKEPODS },
		{ "delay-ms", required_argument, NULL, O_DELAY },
		{ "stagger-ms", required_argument, NULL, O_STAGGER },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool rate_set = false, pb_set = false;
	char err[160];
	int c;

	tc_prog = PROG;
	*o = (struct opts){ .name = KVIDX_DEFAULT_NAME, .model = "fake-model", .prefixes = 8,
			    .prefix_blocks = 8, .suffix_blocks = 2, .seed = 1,
			    .reply_timeout_ms = 300000, .connect_timeout_ms = 1000,
			    .down_ms = 5000, .tries = 3, .max_body = 64u << 20,
			    .keepalive_requests = 100, .spec_weight = 1.0, .followup_ms = 100,
			    .max_tokens = 4, .concurrency = 4096, .policy = P_KVIDX,
			    .prefill_rate = 24000, .pod_max_num_seqs = 1024, .pod_kv_blocks = 25000,
			    .pod_time_scale = 1, .balance_slack = 0.15, .balance_half_life = 30,
			    .balance_margin_ms = 125,
			    .trace_speedup = 1, .stream = true, .pairs = 5, .stagger_ms = 50,
			    .join_after = 5 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case O_NAME: o->name = tc_index_name_arg(optarg); break;
		case O_MODEL:
			if (!*optarg || strlen(optarg) > 255)
				tc_usage_error("--model: 1..255 bytes");
			o->model = optarg;
			break;
		case O_POD: opt_pod(o, optarg, false); break;
		case O_PREFILL: opt_pod(o, optarg, true); break;
		case O_SPEC_WEIGHT: o->spec_weight = tc_arg_num("spec-weight", optarg, 0, 1); break;
		case O_POLICY:
			if (policy_parse(optarg, &o->policy))
				tc_usage_error("--policy: '%s' is none of kvidx, prefix, round-robin, "
					       "least-loaded, llm-d, dynamo", optarg);
			break;
		case O_TRACE: o->trace = optarg; break;
		case O_TRACE_SPEEDUP:
			o->trace_speedup = tc_arg_num("trace-speedup", optarg, 1e-3, 1e6);
			break;
		case O_TRACE_LIMIT: o->trace_limit = opt_u64("trace-limit", optarg, 0, UINT32_MAX); break;
		case O_TRACE_DUMP: o->trace_dump = true; break;
		case O_PREFILL_RATE:
			o->prefill_rate = tc_arg_num("pod-prefill-rate", optarg, 1, 1e9);
			break;
		case O_TIME_SCALE:
			o->pod_time_scale = tc_arg_num("pod-time-scale", optarg, 1e-3, 1e6);
			break;
		case O_MAX_SEQS:
			o->pod_max_num_seqs = opt_u64("pod-max-num-seqs", optarg, 1, 1u << 20);
			break;
		case O_KV_BLOCKS:
			o->pod_kv_blocks = opt_u64("pod-kv-blocks", optarg, 0, 1ull << 40);
			break;
		case O_BALANCE: o->balance_slack = tc_arg_num("balance-slack", optarg, 0, 1e6); break;
		case O_MARGIN:
			o->balance_margin_ms = tc_arg_num("balance-margin-ms", optarg, 0, 1e9);
			break;
		case O_HALF_LIFE:
			o->balance_half_life = tc_arg_duration("balance-half-life", optarg);
			if (!(o->balance_half_life > 0))
				tc_usage_error("--balance-half-life: a duration above 0, got '%s'",
					       optarg);
			break;
		case O_DOWN: o->down_ms = opt_u64("down-ms", optarg, 0, 86400000); break;
		case O_CONNECT:
			o->connect_timeout_ms = opt_u64("connect-timeout-ms", optarg, 1, 600000);
			break;
		case O_TIMEOUT:
			o->reply_timeout_ms = opt_u64("reply-timeout-ms", optarg, 1, 86400000);
			break;
		case O_LISTEN:
			if (tc_listen_check(optarg, err, sizeof(err)))
				tc_usage_error("--listen '%s': %s", optarg, err);
			o->listen = optarg;
			break;
		case O_TRIES: o->tries = opt_u64("tries", optarg, 1, MAX_PODS); break;
		case O_MAX_BODY: o->max_body = opt_u64("max-body", optarg, 64, 1ull << 32); break;
		case O_KEEPALIVE:
			o->keepalive_requests = opt_u64("keepalive-requests", optarg, 0, UINT32_MAX);
			break;
		case O_FRONT:
		case O_JOIN_FRONT: {
			static char urls[MAX_FRONTS][URL_MAX];
			if (o->nfronts == MAX_FRONTS)
				tc_usage_error("--front: at most %d", MAX_FRONTS);
			if (c == O_FRONT && o->njoin)
				tc_usage_error("--front after --join-front: give the fronts of the "
					       "start first");
			check_url(c == O_FRONT ? "front" : "join-front", optarg, urls[o->nfronts],
				  URL_MAX);
			o->fronts[o->nfronts] = urls[o->nfronts];
			o->nfronts++;
			o->njoin += c == O_JOIN_FRONT;
			break;
		}
		case O_JOIN_AFTER: o->join_after = tc_arg_duration("join-after", optarg); break;
		case O_FILE: o->file = optarg; break;
		case O_SYNTH: o->synthetic = true; break;
		case O_PREFIXES: o->prefixes = opt_u64("prefixes", optarg, 1, 1u << 20); break;
		case O_PREFIX_BLOCKS:
			o->prefix_blocks = opt_u64("prefix-blocks", optarg, 0, 4096);
			pb_set = true;
			break;
		case O_SUFFIX_BLOCKS:
			o->suffix_blocks = opt_u64("suffix-blocks", optarg, 0, 4096);
			break;
		case O_SEED: o->seed = opt_u64("seed", optarg, 0, UINT64_MAX); break;
		case O_FOLLOWUPS: o->followups = tc_arg_num("followups", optarg, 0, 1); break;
		case O_FOLLOWUP_MS:
			o->followup_ms = (double)opt_u64("followup-ms", optarg, 0, 3600000);
			break;
		case O_RATE:
			o->rate = tc_arg_num("rate", optarg, 0, 1e7);
			rate_set = true;
			break;
		case O_POISSON: o->poisson = true; break;
		case O_COUNT: o->count = opt_u64("count", optarg, 0, UINT32_MAX); break;
		case O_DURATION: o->duration = tc_arg_duration("duration", optarg); break;
		case O_MAX_TOKENS: o->max_tokens = opt_u64("max-tokens", optarg, 1, 65536); break;
		case O_CONCURRENCY:
			o->concurrency = opt_u64("concurrency", optarg, 1, 65536);
			break;
		case O_NO_STREAM: o->stream = false; break;
		case O_VALIDATE: o->mode = M_VALIDATE; break;
		case O_PAIRS: o->pairs = opt_u64("pairs", optarg, 1, 1000); break;
		case O_GAPS: o->gaps = optarg; break;
		case O_SCENARIOS: o->scenarios = optarg; break;
		case O_FAKEPODS: o->fakepods = true; break;
		case O_DELAY: o->delay_ms = opt_u64("delay-ms", optarg, 1, 600000); break;
		case O_STAGGER: o->stagger_ms = opt_u64("stagger-ms", optarg, 0, 60000); break;
		case O_QUIET: o->quiet = true; break;
		case O_JSON: o->json = true; break;
		default: /* 'h', ':' or '?' */
			tc_getopt_default(c, argv, usage);
		}
	}
	if (optind < argc)
		tc_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->listen && o->mode == M_VALIDATE)
		tc_usage_error("--listen and --validate exclude each other");
	if (o->listen)
		o->mode = M_FRONT;
	if (o->trace && (o->synthetic || o->file))
		tc_usage_error("--trace excludes --synthetic and --file");
	if (o->trace && o->mode != M_LOAD)
		tc_usage_error("--trace is for the load generator, not with --listen or --validate");
	if ((o->trace_dump || o->trace_limit) && !o->trace)
		tc_usage_error("--trace-dump and --trace-limit need --trace FILE");
	if (o->trace_dump) /* no pods needed to print prompts */
		return;
	if (o->nfronts && o->mode != M_LOAD)
		tc_usage_error("--front is for the load generator, not with --listen or "
			       "--validate");
	if (o->nfronts && o->npods)
		tc_usage_error("--front and --pod exclude each other: the front routes");
	if (o->njoin && o->njoin == o->nfronts)
		tc_usage_error("--join-front needs a --front to start with");
	if (!o->nfronts && o->npods == o->nprefill)
		tc_usage_error("no pods: give at least one --pod NAME=URL%s",
			       o->mode == M_LOAD ? " (or --front URL)" : "");
	if (o->synthetic && o->file)
		tc_usage_error("--synthetic and --file exclude each other");
	if (o->mode == M_VALIDATE && !pb_set)
		o->prefix_blocks = 16;
	if (o->synthetic && o->prefix_blocks + o->suffix_blocks == 0)
		tc_usage_error("--prefix-blocks and --suffix-blocks are both 0: empty prompts");
	if (o->mode == M_VALIDATE && o->prefix_blocks == 0)
		tc_usage_error("--validate needs --prefix-blocks of at least 1");
	if (o->synthetic && !rate_set)
		o->rate = 10;
}

int main(int argc, char **argv)
{
	static struct opts o;
	sigset_t sigs;
	int sfd;

	parse_args(&o, argc, argv);
	if (!o.quiet)
		setvbuf(stdout, NULL, _IOLBF, 0);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
		return 1;
	}
	switch (o.mode) {
	case M_FRONT: return front_main(&o, sfd);
	case M_VALIDATE: return validate_main(&o, sfd);
	default: return load_main(&o, sfd);
	}
}
