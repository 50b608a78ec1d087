/*
 * attach.h — a tool attaching to an index as an ordinary reader (the data segment mapped
 * read-only, one registry slot), and reading its header, saying why not in the same words
 * in every tool.
 */
#ifndef KVIDX_TOOLS_ATTACH_H
#define KVIDX_TOOLS_ATTACH_H

#include "kvidx.h"

/*
 * Returns arg, the value of a --name option, if it is a valid index name; otherwise exits
 * through tc_usage_error(), saying what a name may hold.
 */
const char *tc_index_name_arg(const char *arg);

/*
 * Opens index name as a reader. Returns it, or NULL after telling standard error why: not
 * found (and whether kvidx-ingestd may be missing), no live data segment yet, no permission,
 * or the library's reason.
 */
struct kvidx_reader *tc_index_open(const char *name);

/*
 * kvidx_reader_info(), tried once more if the writer was switching generations. Returns 0,
 * or a negative error after "PROG: index 'NAME': reading the header: <why>".
 */
int tc_index_info(struct kvidx_reader *r, const char *name, struct kvidx_info *info);

#endif /* KVIDX_TOOLS_ATTACH_H */
