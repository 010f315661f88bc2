#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { DL_MSG_MAX = 2048 };
static _Thread_local char dl_msg[DL_MSG_MAX];

dl_status dl_fail(dl_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dl_msg, sizeof dl_msg, fmt, ap);
  va_end(ap);
  return s;
}

dl_status dl_fail_context(dl_status s, const char *fmt, ...) {
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  /* Keep the prefix whole; the callee's message loses its tail if both do
   * not fit (messages are for people: 2 KiB is plenty). */
  size_t plen = strlen(prefix), olen = strlen(dl_msg);
  if (plen + olen > DL_MSG_MAX - 1) olen = DL_MSG_MAX - 1 - plen;
  memmove(dl_msg + plen, dl_msg, olen);
  memcpy(dl_msg, prefix, plen);
  dl_msg[plen + olen] = '\0';
  return s;
}

const char *dl_last_error(void) { return dl_msg; }
void dl_clear_error(void) { dl_msg[0] = '\0'; }

const char *dl_status_name(dl_status s) {
  switch (s) {
  case DL_OK: return "ok";
  case DL_ERR_INVALID: return "invalid input";
  case DL_ERR_NOMEM: return "out of memory";
  case DL_ERR_IO: return "I/O error";
  case DL_ERR_FORMAT: return "malformed file";
  case DL_ERR_UNSUPPORTED: return "unsupported";
  case DL_ERR_NUMERIC: return "non-finite value";
  case DL_ERR_INTERNAL: return "internal error";
  }
  return "unknown error";
}
