/* What the trace reader (trace_read.c) and writer (trace_write.c) share:
 * the seal's magic, how a name becomes an HDF5 link name, and the paths
 * their messages print. */
#ifndef DLC_STORE_TRACE_NAMES_H
#define DLC_STORE_TRACE_NAMES_H

#include "store/trace_io.h"

/* The user block's magic line (h5util.h's seal). */
#define DLC_TRACE_MAGIC "dlcheck trace 1\n"

enum {
  DLC_TRACE_WHERE_MAX = DLC_PATH_MAX + 64,
  DLC_TRACE_ENCODED_MAX = 3 * DLC_NAME_MAX + 1,
  DLC_TRACE_KIND_MAX = 16
};

/* "a" + sep + "b" into a DLC_TRACE_WHERE_MAX buffer, for messages only: a
 * very long path is cut short there, never in what is read or written. */
const char *dlc_trace_join(char *buf, const char *a, const char *sep, const char *b);

/* Percent-encodes what HDF5 link names cannot hold ('%', '/', a lone
 * "."); out has DLC_TRACE_ENCODED_MAX bytes. */
void dlc_trace_encode_name(const char *name, char *out);

/* Inverse of dlc_trace_encode_name; only the encoding it produces is
 * accepted, so that two links can never decode to the same name.
 * DL_ERR_FORMAT naming where/enc otherwise. */
dl_status dlc_trace_decode_name(const char *enc, const char *where, char out[DLC_NAME_MAX]);

#endif
