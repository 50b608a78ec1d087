/*
 * offload.c — work that would hold up the front's one event loop, on one helper thread:
 * the parse of a large request body and of a large /tokenize answer (jansson builds a node
 * per token id: a few seconds for millions of tokens, during which the loop would serve
 * nobody). The loop hands a job over (offload_submit) and goes on serving; the thread runs
 * the job's work(), queues it as done and wakes the loop's curl_multi_poll()
 * (curl_multi_wakeup); the loop runs done() of every finished job (offload_collect) on its
 * own thread, as everything else in kvidx-route. work() touches only its job's data, which
 * the loop leaves alone until done().
 */
#include "route.h"

#include <stdlib.h>
#include <string.h>

static void *offload_thread(void *arg);

int offload_start(struct offload *ol, CURLM *wake)
{
	memset(ol, 0, sizeof(*ol));
	ol->wake = wake;
	pthread_mutex_init(&ol->mu, NULL);
	pthread_cond_init(&ol->cv, NULL);
	if (pthread_create(&ol->th, NULL, offload_thread, ol))
		return -1;
	ol->started = true;
	return 0;
}

static void *offload_thread(void *arg)
{
	struct offload *ol = arg;

	pthread_mutex_lock(&ol->mu);
	for (;;) {
		while (!ol->todo && !ol->stop)
			pthread_cond_wait(&ol->cv, &ol->mu);
		if (ol->stop)
			break;
		struct job *j = ol->todo;
		ol->todo = j->next;
		pthread_mutex_unlock(&ol->mu);
		j->work(j);
		pthread_mutex_lock(&ol->mu);
		j->next = ol->done;
		ol->done = j;
		curl_multi_wakeup(ol->wake);
	}
	pthread_mutex_unlock(&ol->mu);
	return NULL;
}

void offload_submit(struct offload *ol, struct job *j)
{
	struct job **t;

	j->next = NULL;
	pthread_mutex_lock(&ol->mu);
	for (t = &ol->todo; *t; t = &(*t)->next)
		;
	*t = j; /* first in, first out: jobs are few (one per large request) */
	pthread_cond_signal(&ol->cv);
	pthread_mutex_unlock(&ol->mu);
}

void offload_collect(struct offload *ol)
{
	struct job *j, *rev = NULL;

	pthread_mutex_lock(&ol->mu);
	j = ol->done;
	ol->done = NULL;
	pthread_mutex_unlock(&ol->mu);
	while (j) { /* in the order they finished */
		struct job *n = j->next;
		j->next = rev;
		rev = j;
		j = n;
	}
	while (rev) {
		j = rev;
		rev = rev->next;
		j->done(j);
	}
}

void offload_stop(struct offload *ol)
{
	if (!ol->started)
		return;
	pthread_mutex_lock(&ol->mu);
	ol->stop = true;
	pthread_cond_signal(&ol->cv);
	pthread_mutex_unlock(&ol->mu);
	pthread_join(ol->th, NULL); /* the job it runs ends first; queued ones never run */
	ol->started = false;
}
