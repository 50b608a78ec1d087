/*
 * util_ingestd.h — kvidx-ingestd under test: the real daemon as a child of the test, writing
 * an index of the test's own, fed by fake vLLM pods played inside the test (an XPUB socket,
 * which also tells when the daemon's subscription has arrived, and a ROUTER playing vLLM's
 * replay socket, both on 127.0.0.1 and fed by the wire encoder), and the test's reader on
 * the index. Waits poll against a deadline while serving replay requests, and fail at once
 * if the daemon died. One such setup per test process, in tu_ing.
 */
#ifndef KVIDX_TESTS_UTIL_INGESTD_H
#define KVIDX_TESTS_UTIL_INGESTD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvidx.h"
#include "telemetry.h"
#include "util_run.h"
#include "wire.h"

#define TU_DEADLINE_MS 20000 /* how long any wait for the daemon may take */
#define TU_BLOCK_SIZE 16    /* the daemon's default block size, which the tests keep */

/* A batch a fake pod published (or lost), kept for replay. */
struct tu_batch {
	uint64_t seq;
	void *buf;
	size_t len;
};

/* A fake vLLM pod. */
struct tu_pub {
	void *xpub, *router;
	char ep[128], rep[128];   /* their endpoints, for --pod ENDPOINT,replay=REP */
	char topic[128];
	struct tu_batch *h;
	size_t nh, cap;
	uint64_t keep_from;       /* replay serves only batches with seq >= keep_from */
	bool old_framing;         /* replies ["", seq8, payload], not ["", topic, seq8, payload] */
	bool mute;                /* ignore replay requests */
	int replay_requests;
	uint64_t last_replay_from;
	uint64_t next_seq;
	bool has_id;              /* sequence frames of 24 bytes: seq8 + id (live and replayed) */
	uint8_t id[KVW_PUB_ID_LEN];
	struct kvw_enc enc;
};

struct tu_ingestd {
	char name[64];            /* the index, unique to the test */
	char log[256];            /* the daemon's standard output and error */
	void *zctx;
	struct tu_child daemon;
	struct kvidx_reader *rd;  /* the test's reader, once the index exists */
	struct tu_pub pubs[2];
	int npubs;
};

extern struct tu_ingestd tu_ing;

/* A suite's .init and .fini: names the index "t-TAG-...", and removes everything after. */
void tu_ingestd_setup(const char *tag);
void tu_ingestd_teardown(void);

/* A new fake pod publishing under topic ("kv@POD@MODEL"). */
struct tu_pub *tu_pub_open(const char *topic);

/* A new fake pod whose PUB and replay ROUTER bind host (a loopback address such as
 * 127.0.0.2) at ports xp and rp: pods told apart by address, as DNS discovery finds them. */
struct tu_pub *tu_pub_open_at(const char *topic, const char *host, int xp, int rp);

/*
 * n fake pods (n <= 2) for the ranks of one data-parallel pod: rank r's PUB at the first one's
 * port + r and its replay ROUTER at the first one's replay port + r. Returns rank 0's.
 */
struct tu_pub *tu_pub_open_ranks(const char *topic, int n);

/* Sends a message of two frames (c NULL) or three on socket s, asserting it went. */
void tu_send_frames(void *s, const void *a, size_t alen, const void *b, size_t blen,
		    const void *c, size_t clen);

/* Publishes payload as batch seq and keeps it for replay; send=false only keeps it, as if
 * the message had been lost on the way. */
void tu_pub_batch(struct tu_pub *p, uint64_t seq, const void *buf, size_t len, bool send);

/* The publisher restarts: a new process that numbers from 0 and holds nothing for replay;
 * id: the new process's publisher id (24-byte frames from now on), NULL: frames as before. */
void tu_pub_restart(struct tu_pub *p, const uint8_t *id);

/* Encodes events as one batch in form and publishes it as the next seq (send=false:
 * lost). Returns its seq. tu_pub_events() sends it in array form. */
uint64_t tu_pub_events_ex(struct tu_pub *p, const struct kvw_event *ev, size_t n, bool send,
			  enum kvw_form form);
uint64_t tu_pub_events(struct tu_pub *p, const struct kvw_event *ev, size_t n);

/* Waits until the daemon's subscription has reached p. */
void tu_pub_wait_subscribed(struct tu_pub *p);

/*
 * Starts kvidx-ingestd with --name, --log-level debug and the NULL-terminated args (later
 * flags win), and waits until the index exists; tu_ing.rd is then the test's reader.
 */
void tu_ingestd_start(const char *const *args);

/* Waits up to ms, serving replay requests, after checking that the daemon still runs. */
void tu_pump(int ms);

/* Asserts that cond comes to hold within TU_DEADLINE_MS, pumping every 2 ms. */
#define TU_EVENTUALLY(cond, ...) cr_assert(TU_POLL(cond, TU_DEADLINE_MS, tu_pump(2)), __VA_ARGS__)

/* Whether the daemon's log (tu_ing.log) holds needle so far. */
bool tu_log_has(const char *needle);

/* Waits until pod (a name) is in the index; returns its index. */
int tu_wait_pod(const char *pod);

/* The tiers (KVIDX_TIER_* bits) pod holds key on, as the test's reader sees it; 0: none. */
unsigned tu_tiers(uint64_t key, int pod);

/* Pod counter c of pod, as the test's reader sees it. */
uint64_t tu_ctr(int pod, enum kv_pod_ctr c);

/* Waits until pod has applied exactly n batches: every counter of those batches is final
 * then (batches is the last thing ingestd updates for a batch). */
void tu_wait_batches(int pod, uint64_t n);

/* n tokens base, base+1, ... (distinct bases give distinct blocks), in one of 8 buffers. */
const uint32_t *tu_toks(uint32_t base, size_t n);

/* A BlockStored event of nh engine blocks of bs tokens each. */
struct kvw_event tu_stored(const uint64_t *h, size_t nh, bool has_parent, uint64_t parent,
			   const uint32_t *tok, size_t ntok, uint32_t bs);

/* A BlockRemoved event of h[0..nh) on medium (NULL: none given). */
struct kvw_event tu_removed(const uint64_t *h, size_t nh, const char *medium);

/* Request keys of tok[0..n) chained from parent (0: model's root), as a router computes
 * them on the daemon's defaults (cbor-fnv, seed "", TU_BLOCK_SIZE); at most 256. */
size_t tu_keys_of(const char *model, uint64_t parent, const uint32_t *tok, size_t n,
		  uint64_t *out);

#endif /* KVIDX_TESTS_UTIL_INGESTD_H */
