/*
 * redis_index.h — the Redis baseline: llm-d's Redis index (llm-d-kv-cache-manager
 * pkg/kvcache/kvblock/redis.go) on a redis-server over loopback, through hiredis. One hash
 * per request key, named "<model>@<key>" (the key in decimal), one field "<pod>@<tier>" per
 * pod holding it, valued with an RFC 3339 timestamp; Add is a pipeline of HSET, Evict of
 * HDEL, and Lookup one pipeline of HKEYS over all of a prompt's keys, cut client-side at the
 * first key no pod holds. redis_hset/hdel/hkeys() append a command to the pipeline
 * (redisAppendCommandArgv: the argv form formats at half the cost of a format string),
 * redis_send() sends what is appended, and the replies are read in order (redisGetReply;
 * HKEYS replies with reply-object functions that allocate nothing, see redis_index.c).
 */
#ifndef KVIDX_BENCH_REDIS_INDEX_H
#define KVIDX_BENCH_REDIS_INDEX_H

#include <stdint.h>
#include <hiredis/hiredis.h>

#include "score.h"

/* A connection to the redis-server on 127.0.0.1:port, with TCP_NODELAY; dies if it fails. */
redisContext *redis_open(int port);

/* Runs one command (redisCommand's format) and drops its reply; dies on an error. */
void redis_call(redisContext *c, const char *fmt, ...);

/* Appends HSET <model>@<key> <pod>@gpu <ts> [...] for npods (at most 8) pods. */
void redis_hset(redisContext *c, uint64_t key, const uint16_t *pods, unsigned npods);

/* Appends HDEL <model>@<key> <pod>@gpu. */
void redis_hdel(redisContext *c, uint64_t key, uint16_t pod);

/* Appends HKEYS <model>@<key>. */
void redis_hkeys(redisContext *c, uint64_t key);

/* Writes every appended command to the socket; dies on a write error. */
void redis_send(redisContext *c);

/* Reads and drops n replies; dies on an error reply. */
void redis_skip(redisContext *c, uint64_t n);

/* Reads one HKEYS reply; calls fn for each "10.A.B.C:8000@tier" field with its pod index.
 * Returns the number of fields. */
uint64_t redis_read_hkeys(redisContext *c, void (*fn)(void *arg, unsigned pod), void *arg);

/* llm-d's RedisIndex.Lookup for one prompt: one pipeline of n HKEYS, then per key in order
 * the pods, stopping at the first key without any (llm-d stops at an empty reply). Returns
 * the longest run of any pod, as the other scorers. */
uint32_t score_redis(redisContext *c, struct rows *rw, const uint64_t *k, uint32_t n);

/* INFO memory's used_memory, in bytes (0 if unknown). */
uint64_t redis_used_memory(redisContext *c);

#endif /* KVIDX_BENCH_REDIS_INDEX_H */
