/*
 * test_docs.c — Criterion suite "docs": the tree's references and the README's counts, through
 * tests/check_docs.py. Every file and section a comment, help text or document cites exists in
 * the tree, nothing cites a document outside it, the README's counts of tests, benchmark
 * programs and programs are true, every flag a program's --help defines is documented (and
 * every documented usage flag exists), and every exported function is named in docs/api.md.
 * Then the checker is shown to fail on a small tree of broken references and wrong counts, each
 * by its own message.
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

static const char *bin(void)
{
	const char *b = getenv("KVIDX_BIN");
	return b ? b : "build/bin";
}

Test(docs, every_reference_points_into_the_tree, .timeout = 120)
{
	struct tu_run r = tu_run_sh("/usr/bin/python3 '%s/tests/check_docs.py' --root '%s' "
				    "--bin '%s' 2>&1", src(), src(), bin());

	cr_assert_eq(r.status, 0, "check_docs.py:\n%s", r.out);
	tu_assert_has(r.out, "check_docs: ok (");
	tu_assert_has(r.out, "README counts true: ");
	free(r.out);
}

/* The broken tree: one citing file per kind of break, a README whose counts are wrong. */
static const char broken_tree[] =
	"mkdir -p \"$d/docs\" \"$d/bench\" \"$d/tools\" && cd \"$d\" && "
	"printf '# Title\\n\\n## Real section\\n\\n## 3. Numbered\\n' > docs/x.md && "
	"printf '# R\\n\\n## Make targets\\n\\n~100 tests; the three programs in `build/bin/` "
	"(`kvidx-a`, `kvidx-b`, `kvidx-c`); `bench_*.c` the five benchmark programs\\n' "
	"  > README.md && "
	"touch bench/bench_a.c bench/bench_b.c && "
	"printf 'list-programs:\\n\\t@echo kvidx-top kvidx-b\\n' > Makefile && "
	"printf '## kvidx-top \\342\\200\\224 the live view\\n\\n`kvidx-top [--name NAME] "
	"[--interval D] [--frobnicate]`\\n' > docs/tools.md && "
	"printf '/* docs/x.md \"Real section\", docs/x.md section 3: fine */\\n' > tools/ok.c && "
	"printf '/* see docs/gone.md */\\n' > tools/a.c && "
	"printf '/* see docs/x.md \"No such title\" */\\n' > tools/b.c && "
	"printf '/* see docs/x.md#nope and docs/x.md section 7 */\\n' > tools/c.c && "
	/* (split so that the tree itself holds neither citation) */
	"printf '/* the design: /work/" "shared/DESIGN.md; the seed " "document says so */\\n' "
	"  > tools/d.c && "
	"printf 'A [link](docs/x.md#real-section) and a [broken one](docs/y.md).\\n' > docs/z.md";

Test(docs, checker_catches_broken_references_and_counts, .timeout = 120)
{
	char tmp[] = "/tmp/kvidx-docs-test.XXXXXX";

	cr_assert_not_null(mkdtemp(tmp));
	struct tu_run r = tu_run_sh("d='%s'; ( %s ) && /usr/bin/python3 '%s/tests/check_docs.py' "
				    "--root \"$d\" --bin '%s' 2>&1; s=$?; rm -rf \"$d\"; exit $s",
				    tmp, broken_tree, src(), bin());

	cr_assert_eq(r.status, 1, "the checker passed a broken tree:\n%s", r.out);
	tu_assert_has(r.out, "tools/a.c:1: docs/gone.md: no such file in the tree");
	tu_assert_has(r.out, "tools/b.c:1: docs/x.md \"No such title\": no such section in docs/x.md");
	tu_assert_has(r.out, "tools/c.c:1: docs/x.md#nope: no such section in docs/x.md");
	tu_assert_has(r.out, "tools/c.c:1: docs/x.md section 7: docs/x.md has no section 7");
	tu_assert_has(r.out, "tools/d.c:1: cites the shared background folder");
	tu_assert_has(r.out, "tools/d.c:1: cites \"the seed\"");
	tu_assert_has(r.out, "docs/z.md:1: link docs/y.md: no such file in the tree");
	tu_assert_lacks(r.out, "tools/ok.c");
	tu_assert_lacks(r.out, "link docs/x.md#real-section");
	tu_assert_has(r.out, "README.md: says ~100 tests, make test runs ");
	tu_assert_has(r.out, "README.md: says five benchmark programs, bench/ has 2");
	tu_assert_has(r.out, "README.md: says three programs, the Makefile builds 2");
	tu_assert_has(r.out, "kvidx-top --once: in its --help, not in docs/tools.md");
	tu_assert_lacks(r.out, "kvidx-top --name");
	tu_assert_has(r.out, "kvidx-top --frobnicate: in its usage in docs/tools.md, not in its "
			     "--help");
	tu_assert_has(r.out, "kvidx-b: not built in ");
	tu_assert_has(r.out, "docs/api.md: the exported function kvidx_lookup is not named");
	free(r.out);
}
