/* The fingerprint as JSON (jansson): written in dlc_env_keys' order, read
 * back as one flat object of string values, and two of them compared. */
#include "store/env.h"

#include "trace/json.h"

#include <string.h>

/* Key k of e into obj; -1 when memory runs out. */
static int set_value(json_t *obj, const dlc_env *e, const char *key) {
  char v[DLC_ENV_VALUE_MAX];
  if (dlc_env_value(e, key, v, sizeof v) != DL_OK) return -1; /* every key fits: a bug */
  return json_object_set_new(obj, key, dlc_json_text(v));
}

dl_status dlc_env_to_json(const dlc_env *e, char *buf, size_t len) {
  json_t *obj = json_object();
  int rc = obj ? 0 : -1;
  for (int k = 0; dlc_env_keys[k] && rc == 0; k++) rc = set_value(obj, e, dlc_env_keys[k]);
  size_t need = rc == 0 ? json_dumpb(obj, NULL, 0, JSON_INDENT(2)) : 0;
  dl_status s = DL_OK;
  if (need == 0) s = dl_fail(DL_ERR_NOMEM, "out of memory writing the environment fingerprint");
  else if (need >= len)
    s = dl_fail(DL_ERR_INVALID,
                "the environment fingerprint needs %zu bytes of JSON, the buffer has %zu", need + 1,
                len);
  else buf[json_dumpb(obj, buf, len, JSON_INDENT(2))] = '\0';
  json_decref(obj);
  return s;
}

/* json parsed as a fingerprint (one object of string values) into *obj. */
static dl_status parse_fingerprint(const char *json, json_t **obj) {
  DL_TRY(dlc_json_parse(json, "the environment fingerprint", obj));
  const char *key, *bad = NULL;
  json_t *value;
  if (json_is_object(*obj))
    json_object_foreach(*obj, key, value) if (!bad && !json_is_string(value)) bad = key;
  if (json_is_object(*obj) && !bad) return DL_OK;
  dl_status s = bad ? dl_fail(DL_ERR_FORMAT,
                              "the environment fingerprint's value of '%s' is not a string", bad)
                    : dl_fail(DL_ERR_FORMAT, "the environment fingerprint is not a JSON object");
  json_decref(*obj);
  *obj = NULL;
  return s;
}

dl_status dlc_env_json_get(const char *json, const char *key, char *val, size_t len, bool *found) {
  json_t *obj;
  *found = false;
  DL_TRY(parse_fingerprint(json, &obj));
  const char *v = json_string_value(json_object_get(obj, key));
  dl_status s = DL_OK;
  if (v && strlen(v) >= len)
    s = dl_fail(DL_ERR_INVALID, "environment value %s needs %zu bytes, the buffer has %zu", key,
                strlen(v) + 1, len);
  else if (v) {
    memcpy(val, v, strlen(v) + 1);
    *found = true;
  }
  json_decref(obj);
  return s;
}

static void print_difference(FILE *out, const char *key, const char *a, const char *b) {
  if (out) fprintf(out, "  %-24s %s  ->  %s\n", key, a ? a : "(absent)", b ? b : "(absent)");
}

dl_status dlc_env_diff(const char *a_json, const char *b_json, FILE *out, int *ndiff) {
  json_t *a, *b;
  *ndiff = 0;
  dl_status s = parse_fingerprint(a_json, &a);
  if (s != DL_OK) return dl_fail_context(s, "first fingerprint: ");
  s = parse_fingerprint(b_json, &b);
  if (s != DL_OK) {
    json_decref(a);
    return dl_fail_context(s, "second fingerprint: ");
  }
  const char *key;
  json_t *value;
  json_object_foreach(a, key, value) { /* a's keys in a's order, then b's extra ones */
    const char *va = json_string_value(value), *vb = json_string_value(json_object_get(b, key));
    if (vb && strcmp(va, vb) == 0) continue;
    print_difference(out, key, va, vb);
    (*ndiff)++;
  }
  json_object_foreach(b, key, value) if (!json_object_get(a, key)) {
    print_difference(out, key, NULL, json_string_value(value));
    (*ndiff)++;
  }
  json_decref(a);
  json_decref(b);
  return DL_OK;
}
