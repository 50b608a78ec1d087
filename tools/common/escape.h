/*
 * escape.h — writing strings that come from an index's segments (untrusted bytes) so that
 * what the tools print stays well-formed whatever the bytes are: as JSON strings, as text
 * for a terminal, and as Prometheus label values. One walker (tc_escape()) and one check of
 * well-formed UTF-8 serve all three.
 */
#ifndef KVIDX_TOOLS_ESCAPE_H
#define KVIDX_TOOLS_ESCAPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Length of the well-formed UTF-8 sequence at p (2 to 4 bytes), with its code point in *cp,
 * or 0 if p does not start one (a lone or ASCII byte, an overlong form, a surrogate, a code
 * point above U+10FFFF). Stops at a NUL, which is never a continuation byte.
 */
size_t tc_utf8_seq(const unsigned char *p, uint32_t *cp);

enum tc_esc {
	TC_ESC_JSON, /* the inside of a JSON string (tc_json_str()) */
	TC_ESC_TEXT, /* text for a terminal (tc_text_str()) */
	/* The inside of a Prometheus label value: backslash, double quote and line feed escaped
	 * as the exposition format requires; other control characters and malformed bytes
	 * replaced by U+FFFD, so the output is valid UTF-8. */
	TC_ESC_PROM,
};

/* Writes s in the given style (see each below); returns the columns written, roughly. */
size_t tc_escape(FILE *f, const char *s, enum tc_esc how);

/*
 * Writes s as a JSON string: quotes and backslashes escaped, control characters as \uXXXX,
 * well-formed UTF-8 as is, any other byte as U+FFFD. The result is valid JSON whatever s
 * holds.
 */
void tc_json_str(FILE *f, const char *s);

/*
 * Writes s for a terminal: printable ASCII and well-formed UTF-8 as they are; backslashes and
 * double quotes escaped with a backslash (the text output quotes some strings); control
 * characters (C0, DEL and C1, which can drive a terminal) and stray bytes as \u00HH or \xHH.
 * Returns the number of columns written, roughly, for padding.
 */
size_t tc_text_str(FILE *f, const char *s);

#endif /* KVIDX_TOOLS_ESCAPE_H */
