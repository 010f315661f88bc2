/* UTF-8 text as dlcheck writes it: names, reasons and messages come from
 * files and from the team's code, so any byte string is decoded with
 * invalid sequences as U+FFFD rather than refused or passed on. */
#ifndef DLC_UTF8_H
#define DLC_UTF8_H

#include <stdint.h>
#include <stdio.h>

/* Decodes one UTF-8 character at s (s[0] != 0): its code point in *cp and
 * the bytes it takes. Invalid or truncated sequences give U+FFFD and 1. */
int dlc_utf8_next(const char *s, uint32_t *cp);
/* Writes code point cp as UTF-8. */
void dlc_utf8_put(FILE *f, uint32_t cp);
/* A malloc'd copy of s that is valid UTF-8 (each invalid byte as U+FFFD);
 * NULL only when memory runs out. */
char *dlc_utf8_valid(const char *s);

#endif
