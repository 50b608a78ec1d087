/*
 * test_layers.c — Criterion suite "layers": the tools reach the index only through its doors
 * (tests/check_doors.py): no tool includes shm/layout.h, no tool or benchmark touches a raw
 * telemetry word or names a histogram by a number. Then the checker is shown to fail on a
 * small tree that breaks each rule, each by its own message, and to pass what is allowed.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "util_run.h"
#include "util_text.h"

static const char *src(void)
{
	const char *s = getenv("KVIDX_SRC");
	return s ? s : ".";
}

Test(layers, tools_use_the_doors, .timeout = 120)
{
	struct tu_run r = tu_run_sh("/usr/bin/python3 '%s/tests/check_doors.py' --root '%s' 2>&1",
				    src(), src());

	cr_assert_eq(r.status, 0, "check_doors.py:\n%s", r.out);
	tu_assert_has(r.out, "check_doors: ok (");
	free(r.out);
}

/* One file per broken rule; ok.c holds what is allowed (the words in a comment or a string,
 * a class histogram by its macro, an id by its name). */
static const char broken_tree[] =
	"mkdir -p \"$d/tools/x\" \"$d/bench\" && cd \"$d\" && "
	"printf '#include \"layout.h\"\\n' > tools/x/a.c && "
	"printf 'int f(void)\\n{\\n\\treturn v->pods[1].pd_ctr[2];\\n}\\n' > tools/b.c && "
	"printf 'void g(void)\\n{\\n\\th = kv_tm_view_hist(v, pod,\\n\\t\\t\\t    1);\\n}\\n' "
	"  > tools/c.c && "
	"printf 'void k(void)\\n{\\n\\th = kv_tm_hist(w, p, r ? 1 : 0);\\n}\\n' > tools/d.c && "
	"printf 'uint64_t n = v->st->keys;\\n' > bench/e.c && "
	"printf '/* pd_ctr, #include \"layout.h\" */\\nconst char *s = \"rt_hist\";\\n"
	"void o(void)\\n{\\n\\th = kv_tm_view_hist(v, 3, KV_HIST_CLASS(2));\\n"
	"\\th = kv_tm_hist(w, 1, KV_HIST_LAG);\\n}\\n' > tools/ok.c";

Test(layers, checker_catches_each_rule, .timeout = 120)
{
	char tmp[] = "/tmp/kvidx-layers-test.XXXXXX";

	cr_assert_not_null(mkdtemp(tmp));
	struct tu_run r = tu_run_sh("d='%s'; ( %s ) && /usr/bin/python3 '%s/tests/check_doors.py' "
				    "--root \"$d\" 2>&1; s=$?; rm -rf \"$d\"; exit $s",
				    tmp, broken_tree, src());

	cr_assert_eq(r.status, 1, "the checker passed a broken tree:\n%s", r.out);
	tu_assert_has(r.out, "tools/x/a.c:1: includes shm/layout.h");
	tu_assert_has(r.out, "tools/b.c:3: raw telemetry word pd_ctr");
	tu_assert_has(r.out, "tools/c.c:3: histogram named by a number");
	tu_assert_has(r.out, "tools/d.c:3: histogram named by a number");
	tu_assert_has(r.out, "bench/e.c:1: raw telemetry word ->st->");
	tu_assert_lacks(r.out, "tools/ok.c");
	free(r.out);
}
