/* utf8.h: decoding and writing UTF-8. */
#include "trace/utf8.h"

#include <stdlib.h>
#include <string.h>

int dlc_utf8_next(const char *s, uint32_t *cp) {
  const unsigned char *u = (const unsigned char *)s;
  int len;
  uint32_t c, min;
  if (u[0] < 0x80) {
    *cp = u[0];
    return 1;
  }
  if (u[0] >= 0xc2 && u[0] <= 0xdf) len = 2, c = u[0] & 0x1fu, min = 0x80;
  else if (u[0] >= 0xe0 && u[0] <= 0xef) len = 3, c = u[0] & 0x0fu, min = 0x800;
  else if (u[0] >= 0xf0 && u[0] <= 0xf4) len = 4, c = u[0] & 0x07u, min = 0x10000;
  else goto invalid;
  for (int i = 1; i < len; i++) {
    if ((u[i] & 0xc0) != 0x80) goto invalid; /* also stops at the terminating 0 */
    c = (c << 6) | (u[i] & 0x3fu);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) goto invalid;
  *cp = c;
  return len;
invalid:
  *cp = 0xfffd;
  return 1;
}

void dlc_utf8_put(FILE *f, uint32_t cp) {
  if (cp < 0x80) fputc((int)cp, f);
  else if (cp < 0x800) {
    fputc((int)(0xc0 | (cp >> 6)), f);
    fputc((int)(0x80 | (cp & 0x3f)), f);
  } else if (cp < 0x10000) {
    fputc((int)(0xe0 | (cp >> 12)), f);
    fputc((int)(0x80 | ((cp >> 6) & 0x3f)), f);
    fputc((int)(0x80 | (cp & 0x3f)), f);
  } else {
    fputc((int)(0xf0 | (cp >> 18)), f);
    fputc((int)(0x80 | ((cp >> 12) & 0x3f)), f);
    fputc((int)(0x80 | ((cp >> 6) & 0x3f)), f);
    fputc((int)(0x80 | (cp & 0x3f)), f);
  }
}

char *dlc_utf8_valid(const char *s) {
  size_t n = strlen(s);
  if (n > (SIZE_MAX - 1) / 3) return NULL;
  char *out = malloc(3 * n + 1); /* an invalid byte becomes U+FFFD, 3 bytes */
  if (!out) return NULL;
  size_t at = 0;
  while (*s) {
    uint32_t cp;
    int len = dlc_utf8_next(s, &cp);
    if (cp == 0xfffd && len == 1) memcpy(out + at, "\xef\xbf\xbd", 3), at += 3;
    else memcpy(out + at, s, (size_t)len), at += (size_t)len;
    s += len;
  }
  out[at] = '\0';
  return out;
}
