/*
 * test_deploy.c — deploy/ as docs/operations.md promises it, through tests/check_deploy.py:
 * the Kubernetes manifests (the shared /dev/shm, the index group == fsGroup, the probe paths
 * and scrape port against a running kvidx-ingestd started from each ConfigMap's config), the
 * Prometheus configurations (promtool check config, the scrape job matching the manifests),
 * the Containerfile (multi-stage bookworm, non-root, run-time packages covering what the tools
 * link, no kvidx-fakepod) and the systemd units (systemd-analyze verify without a message,
 * the sandboxing). Then the checker is shown to fail on broken copies of deploy/.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util_run.h"
#include "util_text.h"

static const char *src(void)
{
	const char *s = getenv("KVIDX_SRC");
	return s ? s : ".";
}

static const char *bin(void)
{
	const char *b = getenv("KVIDX_BIN");
	return b ? b : "build/bin";
}

Test(deploy, manifests_image_and_units_hold, .timeout = 120)
{
	struct tu_run r = tu_run_sh("cd '%s' && /usr/bin/python3 tests/check_deploy.py --bin '%s' 2>&1",
			     src(), bin());
	cr_assert_eq(r.status, 0, "check_deploy.py:\n%s", r.out);
	tu_assert_has(r.out, "check_deploy: ok (2 manifests, Containerfile, Prometheus");
	free(r.out);
}

/* Each break is caught, by its own message. */
Test(deploy, checker_catches_broken_copies, .timeout = 120)
{
	char tmp[] = "/tmp/kvidx-deploy-test.XXXXXX";
	cr_assert_not_null(mkdtemp(tmp));
	struct tu_run r = tu_run_sh(
		"cd '%s' && cp -r deploy '%s/' && d='%s/deploy' && "
		/* a probe path ingestd does not serve, another group than the config's */
		"sed -i 's|path: /readyz|path: /ready|; 0,/fsGroup: 2000/s//fsGroup: 2001/' "
		"  \"$d/kubernetes/sidecar.yaml\" && "
		/* the routers on their own emptyDir instead of the node's /dev/shm */
		"sed -i '0,/hostPath: {path: \\/dev\\/shm/! s|hostPath: {path: /dev/shm, "
		"type: Directory}|emptyDir: {}|' "
		"  \"$d/kubernetes/daemonset.yaml\" && "
		"sed -i 's/libmicrohttpd12 libzmq5/libmicrohttpd12/' \"$d/Containerfile\" && "
		"sed -i 's/regex: metrics/regex: http/' \"$d/prometheus/kubernetes.yml\" && "
		"sed -i 's/^PrivateTmp=yes/PrivateTmp=no/; s/^ProtectHome=yes/ProtectHome=bogus/' "
		"  \"$d/systemd/kvidx-ingestd.service\" && "
		"/usr/bin/python3 tests/check_deploy.py --bin '%s' --dir \"$d\" 2>&1; s=$?; "
		"rm -rf '%s'; exit $s",
		src(), tmp, tmp, bin(), tmp);
	cr_assert_eq(r.status, 1, "the checker passed broken copies:\n%s", r.out);
	tu_assert_has(r.out, "readiness path /ready with the pod down: 404");
	tu_assert_has(r.out, "the index group 2000 is not its fsGroup");
	tu_assert_has(r.out, "router does not mount the node's /dev/shm");
	tu_assert_has(r.out, "miss ['libbsd0'");
	tu_assert_has(r.out, "kubernetes.yml: keeps __meta_kubernetes_pod_container_port_name = "
			     "'http', daemonset.yaml has 'metrics'");
	tu_assert_has(r.out, "kvidx-ingestd.service lacks PrivateTmp=yes");
	tu_assert_has(r.out, "Failed to parse protect home value");
	free(r.out);
}
