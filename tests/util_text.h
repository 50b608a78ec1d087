/*
 * util_text.h — checking what the tools print: a substring there or not, the number after
 * a label, and whether a text is exactly one well-formed JSON object (a strict RFC 8259
 * parser, which also wants raw bytes of 0x80 and above to be well-formed UTF-8, because the
 * tools escape whatever the untrusted segments hold).
 */
#ifndef KVIDX_TESTS_UTIL_TEXT_H
#define KVIDX_TESTS_UTIL_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Asserts that hay holds needle (tu_assert_has) or does not (tu_assert_lacks). */
void tu_assert_has(const char *hay, const char *needle);
void tu_assert_lacks(const char *hay, const char *needle);

/* The number after needle in hay, which must hold needle. */
double tu_number_after(const char *hay, const char *needle);

/*
 * Whether text is exactly one JSON object (and white space). If not, *bad (when not NULL)
 * gets the offset near which the parse failed.
 */
bool tu_json_object(const char *text, size_t *bad);

/* Asserts tu_json_object(text), naming where it went wrong. */
void tu_assert_json(const char *text);

#endif /* KVIDX_TESTS_UTIL_TEXT_H */
