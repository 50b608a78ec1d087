/*
 * main.c — kvidx-ingestd, the one writer of a kvidx index: parses the configuration, installs
 * the signal handlers, opens the index, starts the --metrics-listen endpoint if asked (metrics.c),
 * prints the start-up summary and runs the event loop (tools/ingestd/ingest.c) until SIGTERM
 * or SIGINT. Everything testable lives in the other files of tools/ingestd/; this one only
 * wires them together.
 *
 * Exit status: 0 after a clean stop (or --help), 1 if the index or the sockets could not be
 * set up, 2 on a usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "discover.h"
#include "ingest.h"
#include "log.h"
#include "metrics.h"

static volatile sig_atomic_t stop_flag, hup_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void on_hup(int sig)
{
	(void)sig;
	hup_flag = 1;
}

/* No SA_RESTART: a signal interrupts zmq_poll, so the loop sees the flag at once. */
static void install(int sig, void (*fn)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv)
{
	struct ing_config cfg;
	struct ingestd d;
	char err[1024];
	int rc;

	ing_config_init(&cfg);
	rc = ing_config_parse_args(&cfg, argc, argv, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "kvidx-ingestd: %s\n", err);
		ing_config_free(&cfg);
		return 2;
	}
	if (cfg.help) {
		ing_config_usage(stdout);
		ing_config_free(&cfg);
		return 0;
	}
	if (ing_config_check(&cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvidx-ingestd: %s\n", err);
		ing_config_free(&cfg);
		return 2;
	}
	ilog_set_level(cfg.log_level);
	install(SIGTERM, on_stop);
	install(SIGINT, on_stop);
	install(SIGHUP, on_hup);
	signal(SIGPIPE, SIG_IGN);

	if (ingestd_open(&d, &cfg) < 0) {
		ing_config_free(&cfg);
		return 1;
	}
	if (cfg.metrics[0]) {
		/* The index exists now; the server thread reads it like any router would. */
		if (cfg.disc.dns[0] || cfg.disc.http[0] || cfg.disc.watch_ms)
			metrics_add_extra(discover_render, &d.disc);
		if (d.cluster)
			metrics_add_extra(cluster_metrics, d.cluster);
		rc = metrics_http_start(cfg.metrics, cfg.name);
		if (rc < 0) {
			ilog(ILOG_ERROR, "metrics endpoint %s: %s", cfg.metrics, kvidx_strerror(rc));
			metrics_clear_extra();
			ingestd_close(&d);
			ing_config_free(&cfg);
			return 1;
		}
		ilog(ILOG_INFO, "metrics: http://%s/metrics (probes /healthz, /readyz)", cfg.metrics);
	}
	ingestd_summary(&d);
	rc = ingestd_run(&d, &stop_flag, &hup_flag);
	ilog(ILOG_INFO, "stopping: closing sockets; the index stays for its readers");
	metrics_clear_extra(); /* before what the renderers read is freed */
	ingestd_close(&d);
	ing_config_free(&cfg);
	return rc < 0 ? 1 : 0;
}
