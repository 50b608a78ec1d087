/*
 * httpd.h — what the two OpenAI-compatible HTTP servers of the tools (kvidx-fakepod --http,
 * kvidx-route --listen), both on libmicrohttpd, do alike with a request: take its
 * X-Request-Id, read its body up to a limit, and answer an error with an OpenAI-style body.
 */
#ifndef KVIDX_TOOLS_HTTPD_H
#define KVIDX_TOOLS_HTTPD_H

#include <stdbool.h>
#include <stddef.h>

#include "cli.h"

struct MHD_Connection;

/*
 * Copies the request's X-Request-Id header into id if it has one, not empty and shorter than
 * cap bytes, and returns true; otherwise returns false with id untouched (the server makes
 * one up).
 */
bool tc_http_request_id(struct MHD_Connection *c, char *id, size_t cap);

/*
 * One chunk of a request body (the handler's upload_data and *upload_data_size): appended to
 * body unless the body would then exceed max bytes, which sets *too_big instead; *size is set
 * to 0, the chunk taken either way.
 */
void tc_http_body_chunk(struct tc_buf *body, bool *too_big, size_t max, const char *data,
			size_t *size);

/*
 * The body of an error answer as OpenAI's API writes it,
 * {"error":{"message":msg,"type":...,"param":null,"code":status}}, its type named after the
 * status (BadRequestError for 400, and so on): compact JSON in a malloc'd string, or NULL if
 * memory ran out.
 */
char *tc_http_error_body(unsigned status, const char *msg);

#endif /* KVIDX_TOOLS_HTTPD_H */
