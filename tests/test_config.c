/*
 * test_config.c — kvidx-ingestd's config file reader (tools/ingestd/config.c) against files
 * that are not config files: /dev/zero, a binary, a line or a file too long. Each must fail
 * at once with an error naming the file, the line and the reason (issue 10, item 4: the old
 * reader looped on /dev/zero forever, printing nothing).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "util_run.h"

static char path[64];

static void fini(void)
{
	if (path[0])
		unlink(path);
}

TestSuite(config, .fini = fini);

/* Writes n bytes of what fill() yields into a temporary file; returns its path. */
static const char *write_file(size_t n, int (*fill)(size_t i))
{
	snprintf(path, sizeof(path), "/tmp/kvidx-conf-%d", getpid());
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	for (size_t i = 0; i < n; i++)
		putc(fill(i), f);
	cr_assert_eq(fclose(f), 0);
	return path;
}

static int fill_nul(size_t i) { return i == 20 ? 0 : i < 19 ? "capacity = 1024\n"[i % 16] : 'x'; }
static int fill_long(size_t i) { return i < 8 ? "# long: "[i] : 'y'; }
static int fill_comments(size_t i) { return "# comment\n"[i % 10]; }

static void expect_fail(const char *p, int rc_want, const char *line, const char *why)
{
	struct ing_config c;
	char err[512];

	ing_config_init(&c);
	int rc = ing_config_load_file(&c, p, err, sizeof(err));
	cr_assert_eq(rc, rc_want, "%s: rc %d (%s)", p, rc, err);
	char want[64];
	snprintf(want, sizeof(want), "%s:%s: ", p, line);
	cr_assert(strstr(err, want), "no '%s' in: %s", want, err);
	cr_assert(strstr(err, why), "no '%s' in: %s", why, err);
	ing_config_free(&c);
}

Test(config, dev_zero_fails_at_once, .timeout = 10)
{
	expect_fail("/dev/zero", -EINVAL, "1", "NUL byte");
}

Test(config, nul_byte_on_line_two)
{
	expect_fail(write_file(40, fill_nul), -EINVAL, "2", "NUL byte");
}

Test(config, line_too_long)
{
	expect_fail(write_file(5000, fill_long), -EINVAL, "1", "line too long");
}

Test(config, file_too_large)
{
	/* 2 MiB of valid comment lines: the limit is on size, whatever the content. */
	expect_fail(write_file(2 << 20, fill_comments), -EFBIG, "104858", "file too large");
}

Test(config, longest_line_and_no_final_newline_are_fine)
{
	struct ing_config c;
	char err[512];
	static char text[4200];

	/* A 4096-byte comment line, then a setting without a newline at the end. */
	memset(text, 'z', sizeof(text));
	memcpy(text, "# ", 2);
	text[4096] = '\n';
	snprintf(text + 4097, sizeof(text) - 4097, "capacity = 2048");
	snprintf(path, sizeof(path), "/tmp/kvidx-conf-%d", getpid());
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
	ing_config_init(&c);
	cr_assert_eq(ing_config_load_file(&c, path, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.geo.capacity, 2048);
	ing_config_free(&c);
}
