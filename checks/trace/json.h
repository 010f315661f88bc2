/* JSON through jansson (Debian's libjansson): the fingerprint is read and
 * written with it, and the JSON report escapes its strings with it. What
 * dlcheck puts into JSON may be any bytes (names from files, messages from
 * the team's code), so text goes in as valid UTF-8, invalid bytes as
 * U+FFFD, where jansson would refuse it. */
#ifndef DLC_JSON_H
#define DLC_JSON_H

#include "core/status.h"

#include <jansson.h>
#include <stdio.h>

/* A JSON string of s (invalid UTF-8 as U+FFFD); NULL only when memory runs out. */
json_t *dlc_json_text(const char *s);

/* Writes s to f as one JSON string, quoted and escaped. DL_ERR_NOMEM or
 * DL_ERR_IO (naming `what`, the file being written) when that fails. */
dl_status dlc_json_write_text(FILE *f, const char *s, const char *what);

/* Parses `json` (NUL-terminated; any JSON value) into *out (the caller json_decref's it);
 * duplicate keys are refused. DL_ERR_FORMAT naming `what`, the line and
 * column and jansson's reason when it is not JSON. */
dl_status dlc_json_parse(const char *json, const char *what, json_t **out);

#endif
