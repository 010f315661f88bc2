/* json.h: jansson with dlcheck's text rules and messages. */
#include "trace/json.h"

#include "trace/utf8.h"

#include <stdlib.h>

json_t *dlc_json_text(const char *s) {
  json_t *j = json_string(s); /* NULL for invalid UTF-8, or out of memory */
  if (j) return j;
  char *valid = dlc_utf8_valid(s);
  if (!valid) return NULL;
  j = json_string(valid);
  free(valid);
  return j;
}

dl_status dlc_json_write_text(FILE *f, const char *s, const char *what) {
  json_t *j = dlc_json_text(s);
  if (!j) return dl_fail(DL_ERR_NOMEM, "%s: out of memory for a JSON string", what);
  int rc = json_dumpf(j, f, JSON_ENCODE_ANY);
  json_decref(j);
  if (rc != 0) return dl_fail(DL_ERR_IO, "%s: writing a JSON string failed", what);
  return DL_OK;
}

dl_status dlc_json_parse(const char *json, const char *what, json_t **out) {
  json_error_t err;
  *out = json_loads(json, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
  if (*out) return DL_OK;
  return dl_fail(DL_ERR_FORMAT, "%s is not valid JSON: %s at line %d, column %d", what, err.text,
                 err.line, err.column);
}
