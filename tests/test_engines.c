/*
 * test_engines.c — Criterion suite "engines": the other publishers of vLLM's wire format, fed
 * to the decoder and to kvidx-ingestd in the shapes their sources write (docs/events.md
 * "Other engines"): SGLang (6-field positional events, attn_dp_rank, BlockStoredWithMetadata
 * with a cache salt, its media, the epoch marker in the topic frame), TensorRT-LLM through
 * Dynamo's publisher (map events one per batch, signed 64-bit hashes, block_mm_infos, the
 * attention-DP rank in the third place) and LMCache through vLLM's LMCache connector (one
 * chunk per BlockStored, chunk-sized blocks, lowercase "cpu", a store-only stream).
 *
 * Payloads are packed here with msgpack-c by hand, not by kvidx's encoder, so that the shapes
 * are the other engines' and not kvidx's idea of them. End-to-end tests run the real daemon
 * (util_ingestd.h) and check the index as a router reads it.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "kvidx.h"
#include "util_index.h"
#include "util_ingestd.h"
#include "wire.h"

#define MODEL "eng-model"
#define POD "10.0.0.7:30000"
#define TOPIC "kv@" POD "@" MODEL
#define BS 16

static msgpack_sbuffer sb;
static msgpack_packer pk;
static struct kvw_batch batch;

static void setup(void)
{
	tu_ingestd_setup("eng");
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	kvw_batch_init(&batch);
}

static void teardown(void)
{
	kvw_batch_free(&batch);
	msgpack_sbuffer_destroy(&sb);
	tu_ingestd_teardown();
}

TestSuite(engines, .init = setup, .fini = teardown, .timeout = 120);

/* ---- packing by hand ------------------------------------------------------------------------- */

static void restart_buf(void)
{
	msgpack_sbuffer_clear(&sb);
}

static void pstr(const char *s)
{
	msgpack_pack_str(&pk, strlen(s));
	msgpack_pack_str_body(&pk, s, strlen(s));
}

static void ptoks(const uint32_t *t, size_t n)
{
	msgpack_pack_array(&pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_uint32(&pk, t[i]);
}

static void phashes(const int64_t *h, size_t n)
{
	msgpack_pack_array(&pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_int64(&pk, h[i]);
}

/* SGLang's BlockStored (python/sglang/srt/disaggregation/kv_events.py): six positional fields,
 * medium last; salt non-NULL makes it BlockStoredWithMetadata ({"cache_salt": salt} after). */
static void sgl_stored(const int64_t *h, size_t nh, int64_t parent, const uint32_t *t,
		       size_t nt, const char *medium, const char *salt)
{
	msgpack_pack_array(&pk, salt ? 8 : 7);
	pstr("BlockStored");
	phashes(h, nh);
	if (parent)
		msgpack_pack_int64(&pk, parent);
	else
		msgpack_pack_nil(&pk);
	ptoks(t, nt);
	msgpack_pack_uint32(&pk, BS);
	msgpack_pack_nil(&pk); /* lora_id */
	if (medium)
		pstr(medium);
	else
		msgpack_pack_nil(&pk);
	if (salt) {
		msgpack_pack_map(&pk, 1);
		pstr("cache_salt");
		pstr(salt);
	}
}

static void decode_ok(void)
{
	char err[256];

	cr_assert_eq(kvw_decode_batch(sb.data, sb.size, &batch, err, sizeof(err)), 0, "%s", err);
}

/* Publishes the packed payload as p's next batch. */
static void pub_packed(struct tu_pub *p)
{
	tu_pub_batch(p, p->next_seq++, sb.data, sb.size, true);
}

#define START(...) tu_ingestd_start((const char *const[]){ __VA_ARGS__, NULL })

static void start_on(struct tu_pub *p, bool replay)
{
	char spec[512];

	snprintf(spec, sizeof(spec), "%s%s%s", p->ep, replay ? ",replay=" : "", replay ? p->rep : "");
	START("--capacity", "16k", "--pod", spec);
	tu_pub_wait_subscribed(p);
}

/* ---- SGLang ------------------------------------------------------------------------------------ */

/* Positional batches as SGLang's msgspec writes them: attn_dp_rank third, six-field events,
 * the salt's metadata map in lora_name's place; the map form's "attn_dp_rank". */
Test(engines, sglang_positional_shapes)
{
	const uint32_t *t = tu_toks(100, 2 * BS);
	int64_t h[] = { 1, 2, 3 };

	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 12.5);
	msgpack_pack_array(&pk, 5);
	sgl_stored(h, 2, 0, t, 2 * BS, "CPU_PINNED", NULL);
	sgl_stored(h + 2, 1, 2, t, BS, NULL, "tenant-9");
	msgpack_pack_array(&pk, 3); /* BlockRemoved: hashes, medium */
	pstr("BlockRemoved");
	phashes(h, 1);
	pstr("GPU");
	msgpack_pack_array(&pk, 8); /* a cache_salt that is not a string: that event only */
	pstr("BlockStored");
	phashes(h, 1);
	msgpack_pack_nil(&pk);
	ptoks(t, BS);
	msgpack_pack_uint32(&pk, BS);
	msgpack_pack_nil(&pk);
	msgpack_pack_nil(&pk);
	msgpack_pack_map(&pk, 1);
	pstr("cache_salt");
	msgpack_pack_int(&pk, 7);
	msgpack_pack_array(&pk, 1);
	pstr("AllBlocksCleared");
	msgpack_pack_uint32(&pk, 3);
	decode_ok();
	cr_assert_eq(batch.nevents, 4);
	cr_assert_eq(batch.nbad, 1, "the int salt: %s", batch.bad_msg);
	cr_assert(strstr(batch.bad_msg, "event 3") && strstr(batch.bad_msg, "cache_salt"), "%s",
		  batch.bad_msg);
	cr_assert(batch.has_dp_rank && batch.dp_rank == 3);
	cr_assert_str_eq(batch.events[0].medium, "CPU_PINNED");
	cr_assert_eq(kvidx_tier_from_medium(batch.events[0].medium), KVIDX_TIER_CPU);
	cr_assert_eq(batch.events[0].cache_salt[0], '\0');
	cr_assert_str_eq(batch.events[1].cache_salt, "tenant-9");
	cr_assert_eq(batch.events[1].lora_name[0], '\0');
	cr_assert(batch.events[1].has_parent && batch.events[1].parent == 2);
	cr_assert_eq(batch.events[2].type, KVW_BLOCK_REMOVED);
	cr_assert_str_eq(batch.events[2].medium, "GPU");
	cr_assert_eq(batch.events[3].type, KVW_ALL_BLOCKS_CLEARED);

	/* Map form: SGLang's field name for the rank, and "metadata" by name. */
	restart_buf();
	msgpack_pack_map(&pk, 3);
	pstr("ts");
	msgpack_pack_double(&pk, 1.0);
	pstr("attn_dp_rank");
	msgpack_pack_uint32(&pk, 2);
	pstr("events");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 6);
	pstr("type");
	pstr("BlockStored");
	pstr("block_hashes");
	phashes(h, 1);
	pstr("parent_block_hash");
	msgpack_pack_nil(&pk);
	pstr("token_ids");
	ptoks(t, BS);
	pstr("block_size");
	msgpack_pack_uint32(&pk, BS);
	pstr("metadata");
	msgpack_pack_map(&pk, 2);
	pstr("other");
	msgpack_pack_true(&pk);
	pstr("cache_salt");
	pstr("s2");
	decode_ok();
	cr_assert(batch.has_dp_rank && batch.dp_rank == 2);
	cr_assert_eq(batch.nevents, 1);
	cr_assert_str_eq(batch.events[0].cache_salt, "s2");
}

/* The topic frame of an SGLang publisher with snapshots: topic, "\0sgl-kv-epoch=" epoch,
 * optionally "\0sgl-kv-snapshot=" barrier; the epoch becomes the publisher id. */
Test(engines, sglang_topic_epoch)
{
	static const char ep[] = "kv@p@m\0sgl-kv-epoch=00112233445566778899aabbccddeeff";
	static const char snap[] = "kv@p@m\0sgl-kv-epoch=00112233445566778899aabbccddeeff"
				   "\0sgl-kv-snapshot=b1";
	static const char odd[] = "kv@p@m\0sgl-kv-epoch=not-hex";
	static const char odd2[] = "kv@p@m\0sgl-kv-epoch=not-hey";
	struct kvw_seqf sf = { 0 }, sf2 = { 0 }, sf3 = { 0 };
	size_t base;

	cr_assert_eq(kvw_topic_split("kv@p@m", 6, &base, &sf), 0);
	cr_assert(base == 6 && !sf.has_id);
	cr_assert_eq(kvw_topic_split(ep, sizeof(ep) - 1, &base, &sf), 0);
	cr_assert_eq(base, 6);
	cr_assert(sf.has_id);
	cr_assert(sf.id[0] == 0x00 && sf.id[1] == 0x11 && sf.id[15] == 0xff);
	cr_assert_eq(kvw_topic_split(snap, sizeof(snap) - 1, &base, &sf2), 0);
	cr_assert(base == 6 && sf2.has_id && !memcmp(sf.id, sf2.id, KVW_PUB_ID_LEN),
		  "a barrier's topic names the same epoch");
	memset(&sf2, 0, sizeof(sf2));
	cr_assert_eq(kvw_topic_split(odd, sizeof(odd) - 1, &base, &sf2), 0);
	cr_assert_eq(kvw_topic_split(odd2, sizeof(odd2) - 1, &base, &sf3), 0);
	cr_assert(sf2.has_id && sf3.has_id && memcmp(sf2.id, sf3.id, KVW_PUB_ID_LEN),
		  "two epochs that are not hex must still differ");
	/* An id from a 24-byte sequence frame wins over the epoch. */
	memset(&sf3, 0, sizeof(sf3));
	sf3.has_id = true;
	sf3.id[0] = 0x77;
	cr_assert_eq(kvw_topic_split(ep, sizeof(ep) - 1, &base, &sf3), 0);
	cr_assert_eq(sf3.id[0], 0x77);
	/* Any other NUL is refused, as before. */
	cr_assert_eq(kvw_topic_split("a\0b", 3, &base, NULL), -EINVAL);
	cr_assert_eq(kvw_topic_split("a\0sgl-kv-epoch=", 15, &base, NULL), -EINVAL, "empty epoch");
	cr_assert_eq(kvw_topic_split("a\0sgl-kv-epoch=e\0x", 18, &base, NULL), -EINVAL);
	cr_assert_eq(base, 0);
}

/* SGLang's salted request (metadata.cache_salt) keys as vLLM's salt in extra_keys does, the
 * turn after it chains from it, an unsalted 6-field event keys plainly on CPU_PINNED. */
Test(engines, sglang_salt_and_media_end_to_end)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(7000, 3 * BS), *u = tu_toks(9000, BS);
	int64_t h[] = { 71, 72, 73 }, hu[] = { 81 };
	struct kvidx_key_extras ex = { .salt = "tenant-3" };
	uint64_t k[3], kp[2], ku[1];

	start_on(p, false);
	kvidx_key_chain_ex(KVIDX_KEY_CBOR_FNV, kvidx_key_root(KVIDX_KEY_CBOR_FNV, "", MODEL), t,
			   3 * BS, BS, &ex, k, 3);
	tu_keys_of(MODEL, 0, t, 2 * BS, kp);
	tu_keys_of(MODEL, 0, u, BS, ku);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 1.0);
	msgpack_pack_array(&pk, 3);
	sgl_stored(h, 2, 0, t, 2 * BS, "GPU", "tenant-3");
	sgl_stored(h + 2, 1, h[1], t + 2 * BS, BS, "GPU", NULL);
	sgl_stored(hu, 1, 0, u, BS, "CPU_PINNED", NULL);
	msgpack_pack_uint32(&pk, 0);
	pub_packed(p);
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 1);
	for (int i = 0; i < 3; i++)
		cr_assert(tu_tiers(k[i], pod) == KVIDX_TIER_GPU, "salted block %d; log: %s", i,
			  tu_ing.log);
	cr_assert(!tu_tiers(kp[0], pod) && !tu_tiers(kp[1], pod), "salted blocks keyed unsalted");
	cr_assert_eq(tu_tiers(ku[0], pod), KVIDX_TIER_CPU);
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_events), 0);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);
}

static void sgl_send(struct tu_pub *p, const char *epoch, const char *barrier, uint64_t seq)
{
	char topic[256];
	uint8_t s8[8];
	int n = snprintf(topic, sizeof(topic), "%s", TOPIC);

	n += 1 + snprintf(topic + n + 1, sizeof(topic) - (size_t)n - 1, "sgl-kv-epoch=%s", epoch);
	if (barrier)
		n += 1 + snprintf(topic + n + 1, sizeof(topic) - (size_t)n - 1, "sgl-kv-snapshot=%s",
				  barrier);
	kvw_seq_put(s8, seq);
	tu_send_frames(p->xpub, topic, (size_t)n, s8, 8, sb.data, sb.size);
}

static void one_block(const int64_t *h, int64_t parent, const uint32_t *t)
{
	restart_buf();
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 1.0);
	msgpack_pack_array(&pk, 1);
	sgl_stored(h, 1, parent, t, BS, NULL, NULL);
	msgpack_pack_uint32(&pk, 0);
}

/* A new epoch in SGLang's topic is an engine restart (the pod is cleared, the new process's
 * blocks arrive) even where its numbers alone read as duplicates; a snapshot barrier of the
 * same epoch (an empty batch) is a heartbeat, not a restart. */
Test(engines, sglang_epoch_restart)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const char *ea = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *eb = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
	const uint32_t *t = tu_toks(11000, 2 * BS), *u = tu_toks(12000, BS);
	int64_t h[] = { 501, 502 }, hu[] = { 601 };
	uint64_t k[2], ku[1];

	start_on(p, false);
	tu_keys_of(MODEL, 0, t, 2 * BS, k);
	tu_keys_of(MODEL, 0, u, BS, ku);
	one_block(h, 0, t);
	sgl_send(p, ea, NULL, 0);
	one_block(h + 1, h[0], t + BS);
	sgl_send(p, ea, NULL, 1);
	restart_buf();
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 2.0);
	msgpack_pack_array(&pk, 0);
	msgpack_pack_uint32(&pk, 0);
	sgl_send(p, ea, "0123", 2);
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 3);
	cr_assert(tu_tiers(k[1], pod), "chain of epoch A not stored; log: %s", tu_ing.log);
	cr_assert_eq(tu_ctr(pod, KV_PC_heartbeats), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_restarts), 0);
	/* The new process: seq 2 again, which numbers alone take for a duplicate. */
	one_block(hu, 0, u);
	sgl_send(p, eb, NULL, 2);
	TU_EVENTUALLY(tu_tiers(ku[0], pod), "new epoch's block not applied; log: %s", tu_ing.log);
	cr_assert(!tu_tiers(k[0], pod) && !tu_tiers(k[1], pod), "old epoch's blocks survived");
	cr_assert_eq(tu_ctr(pod, KV_PC_restarts), 1);
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);
	cr_assert(tu_log_has("publisher id changed from aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa to "
			     "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"), "log: %s", tu_ing.log);
}

/* ---- TensorRT-LLM (Dynamo's publisher) --------------------------------------------------------- */

/* One map event per batch: signed hashes, no medium, lora_name, block_mm_infos. */
static void trt_stored(const int64_t *h, size_t nh, int64_t parent, const uint32_t *t,
		       size_t nt, bool mm_on_last, int rank)
{
	restart_buf();
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 3.0);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 6);
	pstr("type");
	pstr("BlockStored");
	pstr("block_hashes");
	phashes(h, nh);
	pstr("parent_block_hash");
	if (parent)
		msgpack_pack_int64(&pk, parent);
	else
		msgpack_pack_nil(&pk);
	pstr("token_ids");
	ptoks(t, nt);
	pstr("block_size");
	msgpack_pack_uint32(&pk, BS);
	pstr("block_mm_infos");
	msgpack_pack_array(&pk, nh);
	for (size_t i = 0; i < nh; i++) {
		if (!mm_on_last || i + 1 < nh) {
			msgpack_pack_nil(&pk);
			continue;
		}
		msgpack_pack_map(&pk, 1);
		pstr("mm_objects");
		msgpack_pack_array(&pk, 1);
		msgpack_pack_map(&pk, 2);
		pstr("mm_hash");
		msgpack_pack_int64(&pk, 0x1234567890abcdefll);
		pstr("offsets");
		msgpack_pack_array(&pk, 0);
	}
	msgpack_pack_int(&pk, rank);
}

static void trt_removed(const int64_t *h, size_t nh)
{
	restart_buf();
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 4.0);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_map(&pk, 2);
	pstr("type");
	pstr("BlockRemoved");
	pstr("block_hashes");
	phashes(h, nh);
	msgpack_pack_int(&pk, 0);
}

Test(engines, trtllm_map_events_decode)
{
	const uint32_t *t = tu_toks(200, 2 * BS);
	int64_t h[] = { -5, INT64_MIN };

	trt_stored(h, 2, -9, t, 2 * BS, true, 1);
	decode_ok();
	cr_assert_eq(batch.nevents, 1);
	cr_assert(batch.has_dp_rank && batch.dp_rank == 1, "attention-DP rank in the third place");
	const struct kvw_event *ev = &batch.events[0];
	cr_assert_eq(ev->hashes[0], (uint64_t)-5);
	cr_assert_eq(ev->hashes[1], (uint64_t)1 << 63);
	cr_assert(ev->has_parent && ev->parent == (uint64_t)-9);
	cr_assert_eq(ev->medium[0], '\0', "no medium: GPU");
	cr_assert(ev->has_extra_keys && ev->nextra == 2);
	cr_assert(!ev->extra[0].set);
	cr_assert(ev->extra[1].set && ev->extra[1].nitems == 1 &&
		  ev->extra[1].items[0].kind == KVW_X_OTHER,
		  "a block's multimodal objects: extras no router reproduces");
	trt_removed(h, 1);
	decode_ok();
	cr_assert(batch.nevents == 1 && batch.events[0].type == KVW_BLOCK_REMOVED);
	cr_assert_eq(batch.events[0].hashes[0], (uint64_t)-5);
}

/* End to end: the text block is indexed, the block with multimodal objects ends its chain
 * (unkeyable_extras) rather than being keyed as text, a signed-hash removal removes. */
Test(engines, trtllm_end_to_end)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(21000, 2 * BS);
	int64_t h[] = { -100, -101 };
	uint64_t k[2];

	start_on(p, false);
	tu_keys_of(MODEL, 0, t, 2 * BS, k);
	trt_stored(h, 2, 0, t, 2 * BS, true, 0);
	pub_packed(p);
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 1);
	cr_assert_eq(tu_tiers(k[0], pod), KVIDX_TIER_GPU, "log: %s", tu_ing.log);
	cr_assert_eq(tu_tiers(k[1], pod), 0, "a multimodal block keyed as text");
	cr_assert_eq(tu_ctr(pod, KV_PC_unkeyable_extras), 1);
	trt_removed(h, 1);
	pub_packed(p);
	tu_wait_batches(pod, 2);
	cr_assert_eq(tu_tiers(k[0], pod), 0, "removal by signed hash did not remove");
	cr_assert_eq(tu_ctr(pod, KV_PC_decode_errors), 0);
}

/* ---- LMCache (vLLM's LMCache connector) -------------------------------------------------------- */

/* One LMCache chunk as vLLM's LMCacheConnectorV1 relays it: one hash, chunk-sized block_size
 * (the last chunk may be shorter), token_ids possibly empty, medium "cpu". */
static void lmc_chunk(int64_t h, int64_t parent, const uint32_t *t, size_t nt, uint32_t bs)
{
	msgpack_pack_array(&pk, 8);
	pstr("BlockStored");
	phashes(&h, 1);
	if (parent)
		msgpack_pack_int64(&pk, parent);
	else
		msgpack_pack_nil(&pk);
	ptoks(t, nt);
	msgpack_pack_uint32(&pk, bs);
	msgpack_pack_nil(&pk);
	pstr("cpu");
	msgpack_pack_nil(&pk); /* lora_name */
}

/* Chunks of 256 tokens key 16 index blocks each on the CPU tier, chained chunk to chunk; a
 * shorter last chunk that is no multiple of the index block (skipped_shape) and a chunk
 * without tokens (an offload placeholder of an unknown hash) are skipped and counted; the GPU copy's removal leaves the chunk's CPU copy (LMCache never
 * removes), AllBlocksCleared drops it. */
Test(engines, lmcache_chunks_end_to_end)
{
	struct tu_pub *p = tu_pub_open(TOPIC);
	const uint32_t *t = tu_toks(30000, 2 * 256 + 100);
	int64_t hv[] = { 9001 };
	uint64_t k[32 + 6];

	start_on(p, false);
	tu_keys_of(MODEL, 0, t, 2 * 256 + 96, k);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 5.0);
	msgpack_pack_array(&pk, 5);
	lmc_chunk(0x7000000000000001ll, 0, t, 256, 256);
	lmc_chunk(0x7000000000000002ll, 0x7000000000000001ll, t + 256, 256, 256);
	lmc_chunk(0x7000000000000003ll, 0x7000000000000002ll, t + 512, 100, 100);
	lmc_chunk(0x7000000000000004ll, 0, NULL, 0, 256);
	/* vLLM's own GPU block for the first 16 tokens, in the same batch. */
	sgl_stored(hv, 1, 0, t, BS, "GPU", NULL);
	msgpack_pack_nil(&pk);
	pub_packed(p);
	int pod = tu_wait_pod(POD);
	tu_wait_batches(pod, 1);
	cr_assert_eq(tu_tiers(k[0], pod), KVIDX_TIER_CPU | KVIDX_TIER_GPU, "log: %s", tu_ing.log);
	for (int i = 1; i < 32; i++)
		cr_assert_eq(tu_tiers(k[i], pod), KVIDX_TIER_CPU, "chunk block %d", i);
	for (int i = 32; i < 38; i++)
		cr_assert_eq(tu_tiers(k[i], pod), 0, "the 100-token chunk's block %d", i);
	/* The 100-token chunk: skipped_shape; the tokenless one reads as an offload placeholder
	 * whose (LMCache) hash is unknown. */
	cr_assert_eq(tu_ctr(pod, KV_PC_skipped_shape), 1, "log: %s", tu_ing.log);
	cr_assert_eq(tu_ctr(pod, KV_PC_offload_unknown), 1);
	restart_buf();
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 6.0);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 3);
	pstr("BlockRemoved");
	phashes(hv, 1);
	pstr("GPU");
	msgpack_pack_nil(&pk);
	pub_packed(p);
	tu_wait_batches(pod, 2);
	cr_assert_eq(tu_tiers(k[0], pod), KVIDX_TIER_CPU, "the CPU chunk went with the GPU block");
	restart_buf();
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 7.0);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 1);
	pstr("AllBlocksCleared");
	msgpack_pack_nil(&pk);
	pub_packed(p);
	tu_wait_batches(pod, 3);
	cr_assert_eq(tu_tiers(k[0], pod), 0);
	cr_assert_eq(tu_tiers(k[31], pod), 0);
}
