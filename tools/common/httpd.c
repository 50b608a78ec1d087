/*
 * httpd.c — the request id, body and error answers of the tools' OpenAI-compatible HTTP
 * servers (see httpd.h).
 */
#include "httpd.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

bool tc_http_request_id(struct MHD_Connection *c, char *id, size_t cap)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");

	if (!v || !*v || strlen(v) >= cap)
		return false;
	snprintf(id, cap, "%s", v);
	return true;
}

void tc_http_body_chunk(struct tc_buf *body, bool *too_big, size_t max, const char *data,
			size_t *size)
{
	if (body->len + *size > max)
		*too_big = true;
	else
		tc_buf_add(body, data, *size);
	*size = 0;
}

static const char *error_type(unsigned status)
{
	switch (status) {
	case 400: return "BadRequestError";
	case 404: return "NotFoundError";
	case 405: return "MethodNotAllowed";
	case 413: return "RequestEntityTooLarge";
	case 502: return "BadGatewayError";
	case 503: return "ServiceUnavailableError";
	case 504: return "GatewayTimeoutError";
	default: return "InternalServerError";
	}
}

char *tc_http_error_body(unsigned status, const char *msg)
{
	json_t *j = json_pack("{s:{s:s,s:s,s:n,s:i}}", "error", "message", msg, "type",
			      error_type(status), "param", "code", (int)status);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	return s;
}
