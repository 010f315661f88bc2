/* What the trace reader and writer share (trace_names.h): link names, and
 * the paths their messages print. */
#include "store/trace_names.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

const char *dlc_trace_join(char *buf, const char *a, const char *sep, const char *b) {
  if (snprintf(buf, DLC_TRACE_WHERE_MAX, "%s%s%s", a, sep, b) >= DLC_TRACE_WHERE_MAX)
    buf[DLC_TRACE_WHERE_MAX - 1] = '\0';
  return buf;
}

void dlc_trace_encode_name(const char *name, char *out) {
  if (strcmp(name, ".") == 0) {
    strcpy(out, "%2E");
    return;
  }
  size_t n = 0;
  for (; *name; name++) {
    if (*name == '%' || *name == '/') n += (size_t)sprintf(out + n, "%%%02X", *name);
    else out[n++] = *name;
  }
  out[n] = '\0';
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

dl_status dlc_trace_decode_name(const char *enc, const char *where, char out[DLC_NAME_MAX]) {
  size_t n = 0;
  bool ok = *enc != '\0';
  for (const char *p = enc; ok && *p; p++) {
    char c = *p;
    if (c == '%') {
      int hi = hex_value(p[1]), lo = hi >= 0 ? hex_value(p[2]) : -1;
      ok = lo >= 0;
      c = ok ? (char)(hi * 16 + lo) : 0;
      p += ok ? 2 : 0;
    }
    ok = ok && n < DLC_NAME_MAX - 1;
    if (ok) out[n++] = c;
  }
  if (ok) out[n] = '\0';
  char again[DLC_TRACE_ENCODED_MAX];
  if (ok) dlc_trace_encode_name(out, again);
  if (!ok || strcmp(again, enc) != 0)
    return dl_fail(DL_ERR_FORMAT,
                   "%s/%s: not a name dlcheck writes (percent-encoded, at most "
                   "%d bytes)",
                   where, enc, DLC_NAME_MAX - 1);
  return DL_OK;
}
