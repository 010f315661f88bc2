/* Typed, located access to a libfyaml document: messages, positions,
 * control characters, values and field tables. Loading and the checks of
 * the whole document are in yaml_doc.c. See yaml_util.h. */
#include "scenario/yaml_internal.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <libfyaml.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ---------------------------------------------------------- */

static dl_status vfail_at(const yu_doc *d, yu_pos at, const char *path, dl_status s,
                          const char *fmt, va_list ap) {
  char msg[1536];
  vsnprintf(msg, sizeof msg, fmt, ap);
  const char *sep = path[0] ? ": " : "";
  if (at.line > 0) return dl_fail(s, "%s:%d:%d: %s%s%s", d->file, at.line, at.col, path, sep, msg);
  return dl_fail(s, "%s: %s%s%s", d->file, path, sep, msg);
}

dl_status yu_fail(const yu_val *v, dl_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dl_status r = vfail_at(v->doc, v->at, v->path, s, fmt, ap);
  va_end(ap);
  return r;
}

dl_status yu_fail_key(const yu_val *v, dl_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dl_status r = vfail_at(v->doc, v->key_at, v->path, s, fmt, ap);
  va_end(ap);
  return r;
}

/* ---- positions and paths ----------------------------------------------- */

/* A scalar's position is its token's; a collection's is its first entry's
 * (the public API gives marks for scalar tokens only). */
static bool node_pos(struct fy_node *n, yu_pos *p) {
  while (n) {
    if (fy_node_is_scalar(n)) {
      struct fy_token *t = fy_node_get_scalar_token(n);
      const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
      if (!m) return false;
      p->line = m->line + 1;
      p->col = m->column + 1;
      /* Alias and quoted tokens start after their '*' or quote: point at
       * what the user wrote first. */
      enum fy_node_style st = fy_node_get_style(n);
      if ((st == FYNS_ALIAS || st == FYNS_SINGLE_QUOTED || st == FYNS_DOUBLE_QUOTED) && p->col > 1)
        p->col--;
      return true;
    }
    if (fy_node_is_sequence(n)) {
      n = fy_node_sequence_get_by_index(n, 0);
    } else if (fy_node_is_mapping(n)) {
      void *it = NULL;
      struct fy_node_pair *pair = fy_node_mapping_iterate(n, &it);
      if (!pair) return false;
      n = fy_node_pair_key(pair) ? fy_node_pair_key(pair) : fy_node_pair_value(pair);
    } else {
      return false;
    }
  }
  return false;
}

yu_pos yu_pos_or(struct fy_node *n, yu_pos fallback) {
  yu_pos p;
  return node_pos(n, &p) ? p : fallback;
}

/* Paths are for messages only: a path too long to hold ends with "...". */
void yu_join_path(char *dst, const char *base, const char *sep, const char *tail) {
  int n = snprintf(dst, YU_PATH_MAX, "%s%s%s", base, base[0] ? sep : "", tail);
  if (n < 0 || n >= YU_PATH_MAX) memcpy(dst + YU_PATH_MAX - 4, "...", 4);
}

/* ---- control characters ------------------------------------------------ */

/* The first character of t[0..len) that must not reach a report, a
 * terminal or a file name: C0 controls (but those in `allow`), DEL, C1
 * controls (U+0080..U+009F) and the invisible characters that reorder or
 * break a line as a terminal or a browser shows it (U+061C, U+200E,
 * U+200F, U+2028..U+202E, U+2066..U+2069). Its byte offset, or -1; *cp
 * gets its code point. Invalid UTF-8 never gets here: libfyaml refuses it. */
long yu_find_control(const char *t, size_t len, const char *allow, unsigned *cp) {
  const unsigned char *u = (const unsigned char *)t;
  for (size_t i = 0; i < len; i++) {
    unsigned c = u[i];
    if (c < 0x20 || c == 0x7f) {
      if (c != 0 && allow && strchr(allow, (int)c)) continue;
      *cp = c;
      return (long)i;
    }
    if (i + 1 < len && c == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f) {
      *cp = u[i + 1];
      return (long)i;
    }
    if (i + 1 < len && c == 0xd8 && u[i + 1] == 0x9c) {
      *cp = 0x061c;
      return (long)i;
    }
    if (i + 2 < len && c == 0xe2) {
      unsigned c2 = u[i + 1], c3 = u[i + 2];
      unsigned code = ((c & 0x0fu) << 12) | ((c2 & 0x3fu) << 6) | (c3 & 0x3fu);
      if ((c2 & 0xc0) == 0x80 && (c3 & 0xc0) == 0x80 &&
          (code == 0x200e || code == 0x200f || (code >= 0x2028 && code <= 0x202e) ||
           (code >= 0x2066 && code <= 0x2069))) {
        *cp = code;
        return (long)i;
      }
    }
  }
  return -1;
}

/* ---- kinds of values --------------------------------------------------- */

bool yu_is_alias(struct fy_node *n) {
  return n && fy_node_is_scalar(n) && fy_node_get_style(n) == FYNS_ALIAS;
}

bool yu_is_null(const yu_val *v) {
  if (!v->node) return true;
  if (!fy_node_is_scalar(v->node) || fy_node_get_style(v->node) != FYNS_PLAIN) return false;
  size_t len;
  const char *t = fy_node_get_scalar(v->node, &len);
  if (!t || len == 0) return true;
  return (len == 1 && t[0] == '~') ||
         (len == 4 && (!memcmp(t, "null", 4) || !memcmp(t, "Null", 4) || !memcmp(t, "NULL", 4)));
}

bool yu_is_mapping(const yu_val *v) { return v->node && fy_node_is_mapping(v->node); }

static const char *kind_of(const yu_val *v) {
  if (yu_is_null(v)) return "nothing";
  if (fy_node_is_mapping(v->node)) return "a mapping";
  if (fy_node_is_sequence(v->node)) return "a list";
  return "a scalar";
}

static dl_status refuse_alias(const yu_val *v) {
  if (!yu_is_alias(v->node)) return DL_OK;
  size_t len;
  const char *t = fy_node_get_scalar(v->node, &len);
  return yu_fail(v, DL_ERR_FORMAT, "aliases (*%.*s) are not supported; write the value out",
                 (int)(len > 64 ? 64 : len), t ? t : "");
}

dl_status yu_expect_mapping(const yu_val *v) {
  DL_TRY(refuse_alias(v));
  if (yu_is_mapping(v)) return DL_OK;
  return yu_fail(v, DL_ERR_FORMAT, "expected a mapping (key: value, ...), got %s", kind_of(v));
}

/* A scalar's text, NUL-terminated in buf; `what` names the expected type.
 * `plain`: numbers and true/false, which a quoted or block scalar is not
 * ('5' is a string, as YAML and PyYAML read it). Text with a control
 * character is refused before any message quotes it. */
static dl_status scalar_text(const yu_val *v, const char *what, bool plain, char *buf,
                             size_t size) {
  DL_TRY(refuse_alias(v));
  if (yu_is_null(v) || !fy_node_is_scalar(v->node))
    return yu_fail(v, DL_ERR_FORMAT, "expected %s, got %s", what, kind_of(v));
  size_t len;
  const char *t = fy_node_get_scalar(v->node, &len);
  if (!t) t = "";
  if (memchr(t, '\0', len))
    return yu_fail(v, DL_ERR_FORMAT, "expected %s, got text with a NUL character", what);
  unsigned cp;
  long bad = yu_find_control(t, len, NULL, &cp);
  enum fy_node_style st = fy_node_get_style(v->node);
  if (plain && st != FYNS_PLAIN) {
    bool block = st == FYNS_LITERAL || st == FYNS_FOLDED;
    if (block || bad >= 0)
      return yu_fail(v, DL_ERR_FORMAT, "expected %s, got %s; write it without quotes", what,
                     block ? "a text block (| or >)" : "a quoted string");
    if (len >= size)
      return yu_fail(v, DL_ERR_FORMAT,
                     "expected %s, got the quoted string '%.40s...'; write it "
                     "without quotes",
                     what, t);
    return yu_fail(v, DL_ERR_FORMAT,
                   "expected %s, got the quoted string '%.*s'; write it "
                   "without quotes",
                   what, (int)len, t);
  }
  if (bad >= 0)
    return yu_fail(v, DL_ERR_FORMAT, "expected %s, got text with a control character (U+%04X)",
                   what, cp);
  if (len >= size)
    return yu_fail(v, DL_ERR_FORMAT, "expected %s, got '%.40s...' (%zu characters)", what, t, len);
  memcpy(buf, t, len);
  buf[len] = '\0';
  return DL_OK;
}

/* ---- scalars ----------------------------------------------------------- */

dl_status yu_bool(const yu_val *v, bool *out) {
  char t[64];
  DL_TRY(scalar_text(v, "true or false", true, t, sizeof t));
  if (!strcmp(t, "true") || !strcmp(t, "True") || !strcmp(t, "TRUE")) {
    *out = true;
  } else if (!strcmp(t, "false") || !strcmp(t, "False") || !strcmp(t, "FALSE")) {
    *out = false;
  } else {
    return yu_fail(v, DL_ERR_FORMAT, "expected true or false, got '%s'", t);
  }
  return DL_OK;
}

static void describe_range(yu_range r, char *buf, size_t size) {
  if (isinf(r.hi)) snprintf(buf, size, "%s %g", r.lo_open ? ">" : ">=", r.lo);
  else if (isinf(r.lo)) snprintf(buf, size, "%s %g", r.hi_open ? "<" : "<=", r.hi);
  else
    snprintf(buf, size, "in %c%g, %g%c", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
}

static bool in_range(yu_range r, double x) {
  if (r.lo_open ? !(x > r.lo) : !(x >= r.lo)) return false;
  if (r.hi_open ? !(x < r.hi) : !(x <= r.hi)) return false;
  return true;
}

static dl_status check_range(const yu_val *v, yu_range r, double x, const char *text) {
  if (in_range(r, x)) return DL_OK;
  char want[96];
  describe_range(r, want, sizeof want);
  return yu_fail(v, DL_ERR_INVALID, "must be %s, got %s", want, text);
}

dl_status yu_i64(const yu_val *v, yu_range r, int64_t *out) {
  char t[64];
  DL_TRY(scalar_text(v, "an integer", true, t, sizeof t));
  char *end;
  errno = 0;
  long long x = strtoll(t, &end, 10);
  if (end == t || *end != '\0' || t[0] == ' ')
    return yu_fail(v, DL_ERR_FORMAT, "expected an integer, got '%s'", t);
  if (errno == ERANGE) return yu_fail(v, DL_ERR_INVALID, "integer '%s' is out of range", t);
  DL_TRY(check_range(v, r, (double)x, t));
  *out = (int64_t)x;
  return DL_OK;
}

dl_status yu_u64(const yu_val *v, uint64_t *out) {
  char t[64];
  DL_TRY(scalar_text(v, "a non-negative integer", true, t, sizeof t));
  char *end;
  errno = 0;
  unsigned long long x = strtoull(t, &end, 10);
  if (end == t || *end != '\0' || t[0] == '-' || t[0] == ' ')
    return yu_fail(v, DL_ERR_FORMAT, "expected a non-negative integer, got '%s'", t);
  if (errno == ERANGE)
    return yu_fail(v, DL_ERR_INVALID, "integer '%s' is out of range (at most %" PRIu64 ")", t,
                   UINT64_MAX);
  *out = (uint64_t)x;
  return DL_OK;
}

dl_status yu_f64(const yu_val *v, yu_range r, double *out) {
  char t[64];
  DL_TRY(scalar_text(v, "a number", true, t, sizeof t));
  char *end;
  double x = strtod(t, &end);
  if (end == t || *end != '\0' || t[0] == ' ')
    return yu_fail(v, DL_ERR_FORMAT, "expected a number, got '%s'", t);
  if (!isfinite(x)) return yu_fail(v, DL_ERR_INVALID, "expected a finite number, got '%s'", t);
  DL_TRY(check_range(v, r, x, t));
  *out = x;
  return DL_OK;
}

/* yu_str, allowing the control characters in `allow` (NULL: none). */
static dl_status copy_str(const yu_val *v, char *buf, size_t size, bool allow_empty,
                          const char *allow) {
  DL_TRY(refuse_alias(v));
  if (v->node && fy_node_is_scalar(v->node) && fy_node_get_style(v->node) != FYNS_PLAIN) {
    /* quoted: "" is an empty string, not a missing value */
  } else if (yu_is_null(v) || !fy_node_is_scalar(v->node)) {
    return yu_fail(v, DL_ERR_FORMAT, "expected a string, got %s", kind_of(v));
  }
  size_t len;
  const char *t = fy_node_get_scalar(v->node, &len);
  if (!t) t = "";
  if (memchr(t, '\0', len)) return yu_fail(v, DL_ERR_FORMAT, "the string holds a NUL character");
  if (len >= size)
    return yu_fail(v, DL_ERR_INVALID, "too long: %zu characters, at most %zu", len, size - 1);
  if (len == 0 && !allow_empty) return yu_fail(v, DL_ERR_INVALID, "must not be empty");
  unsigned cp;
  long bad = yu_find_control(t, len, allow, &cp);
  if (bad >= 0)
    return yu_fail(v, DL_ERR_FORMAT,
                   "holds a control character (U+%04X) at character %ld; "
                   "names and text end up in reports and file names",
                   cp, bad + 1);
  memcpy(buf, t, len);
  buf[len] = '\0';
  return DL_OK;
}

dl_status yu_str(const yu_val *v, char *buf, size_t size, bool allow_empty) {
  return copy_str(v, buf, size, allow_empty, NULL);
}

/* Text may hold line breaks and tabs, nothing else below a space. */
dl_status yu_text(const yu_val *v, char *buf, size_t size) {
  DL_TRY(copy_str(v, buf, size, false, "\n\t"));
  size_t n = strlen(buf);
  while (n > 0 &&
         (buf[n - 1] == ' ' || buf[n - 1] == '\n' || buf[n - 1] == '\t' || buf[n - 1] == '\r'))
    buf[--n] = '\0';
  return DL_OK;
}

static void list_names(char *buf, size_t size, const char *const *names, int n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; (n < 0 ? names[i] != NULL : i < n) && used < size; i++) {
    int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
}

dl_status yu_choice(const yu_val *v, const char *const *names, int *out) {
  char t[64];
  char known[512];
  list_names(known, sizeof known, names, -1);
  DL_TRY(scalar_text(v, "a name", false, t, sizeof t));
  for (int i = 0; names[i]; i++) {
    if (!strcmp(t, names[i])) {
      *out = i;
      return DL_OK;
    }
  }
  return yu_fail(v, DL_ERR_INVALID, "expected one of: %s; got '%s'", known, t);
}

/* ---- collections ------------------------------------------------------- */

dl_status yu_map_next(const yu_val *map, void **iter, yu_val *item, bool *got) {
  *got = false;
  struct fy_node_pair *pair = fy_node_mapping_iterate(map->node, iter);
  if (!pair) return DL_OK;
  memset(item, 0, sizeof *item);
  item->doc = map->doc;
  struct fy_node *k = fy_node_pair_key(pair);
  item->key_at = yu_pos_or(k, map->at);
  item->node = fy_node_pair_value(pair);
  item->at = yu_pos_or(item->node, item->key_at);
  snprintf(item->path, sizeof item->path, "%s", map->path);
  if (!k || !fy_node_is_scalar(k) || yu_is_alias(k))
    return yu_fail_key(item, DL_ERR_FORMAT, "keys must be plain names");
  size_t len;
  const char *t = fy_node_get_scalar(k, &len);
  if (!t || len == 0 || memchr(t, '\0', len))
    return yu_fail_key(item, DL_ERR_FORMAT, "keys must be plain names");
  unsigned cp;
  if (yu_find_control(t, len, NULL, &cp) >= 0)
    return yu_fail_key(item, DL_ERR_FORMAT,
                       "keys must be plain names; this one holds a control "
                       "character (U+%04X)",
                       cp);
  if (len >= sizeof item->key)
    return yu_fail_key(item, DL_ERR_INVALID,
                       "key '%.40s...' is too long (%zu characters, at "
                       "most %zu)",
                       t, len, sizeof item->key - 1);
  memcpy(item->key, t, len);
  item->key[len] = '\0';
  yu_join_path(item->path, map->path, ".", item->key);
  *got = true;
  return DL_OK;
}

bool yu_map_find(const yu_val *map, const char *key, yu_val *item) {
  if (!yu_is_mapping(map)) return false;
  void *it = NULL;
  bool got;
  while (yu_map_next(map, &it, item, &got) == DL_OK && got) {
    if (!key || !strcmp(item->key, key)) return true;
  }
  return false;
}

dl_status yu_seq_count(const yu_val *v, int min, int max, int *n) {
  DL_TRY(refuse_alias(v));
  if (!v->node || !fy_node_is_sequence(v->node))
    return yu_fail(v, DL_ERR_FORMAT, "expected a list ([a, b] or - items), got %s", kind_of(v));
  int count = fy_node_sequence_item_count(v->node);
  if (count < min)
    return yu_fail(v, DL_ERR_INVALID, "expected at least %d item%s, got %d", min,
                   min == 1 ? "" : "s", count);
  if (count > max) return yu_fail(v, DL_ERR_INVALID, "too many items: %d, at most %d", count, max);
  *n = count;
  return DL_OK;
}

yu_val yu_seq_at(const yu_val *seq, int i) {
  yu_val item;
  memset(&item, 0, sizeof item);
  item.doc = seq->doc;
  item.node = fy_node_sequence_get_by_index(seq->node, i);
  item.at = yu_pos_or(item.node, seq->at);
  item.key_at = item.at;
  char index[24];
  snprintf(index, sizeof index, "[%d]", i);
  yu_join_path(item.path, seq->path, "", index);
  return item;
}

/* ---- field tables ------------------------------------------------------ */

static dl_status unknown_key(const yu_val *item, const yu_field *fields, int nfields) {
  const char *names[YU_MAX_FIELDS];
  int n = 0;
  for (int i = 0; i < nfields && n < YU_MAX_FIELDS; i++) names[n++] = fields[i].key;
  char known[1024];
  list_names(known, sizeof known, names, n);
  return yu_fail_key(item, DL_ERR_FORMAT, "unknown key '%s'; expected one of: %s", item->key,
                     known);
}

static yu_range field_range(const yu_field *f) {
  yu_range r = f->range;
  if (r.lo == 0 && r.hi == 0 && !r.lo_open && !r.hi_open) r = (yu_range)YU_ANY;
  return r;
}

static dl_status set_number(const yu_val *v, const yu_field *f, void *dst) {
  yu_range r = field_range(f);
  int64_t i;
  double x;
  switch (f->type) {
  case YU_INT:
    DL_TRY(yu_i64(v, r, &i));
    if (i < INT_MIN || i > INT_MAX)
      return yu_fail(v, DL_ERR_INVALID, "integer %" PRId64 " is out of range", i);
    *(int *)dst = (int)i;
    return DL_OK;
  case YU_I64: return yu_i64(v, r, (int64_t *)dst);
  case YU_U64: return yu_u64(v, (uint64_t *)dst);
  case YU_F32:
    DL_TRY(yu_f64(v, r, &x));
    if (fabs(x) > FLT_MAX) return yu_fail(v, DL_ERR_INVALID, "%g is too large for a float32", x);
    *(float *)dst = (float)x;
    return DL_OK;
  default:
    DL_TRY(yu_f64(v, r, &x));
    *(double *)dst = x;
    return DL_OK;
  }
}

static dl_status apply_field(const yu_val *v, const yu_field *f, void *base, void *ctx,
                             bool check_required) {
  char *dst = (char *)base + f->offset;
  switch (f->type) {
  case YU_BOOL: return yu_bool(v, (bool *)dst);
  case YU_STR: return yu_str(v, dst, f->size, false);
  case YU_STR0: return yu_str(v, dst, f->size, true);
  case YU_TEXT: return yu_text(v, dst, f->size);
  case YU_CHOICE: return yu_choice(v, f->choices, (int *)dst);
  case YU_MAP:
    DL_TRY(yu_expect_mapping(v));
    return yu_apply(v, f->sub, f->nsub, base, ctx, check_required, NULL);
  case YU_CUSTOM: return f->parse(ctx, v, f, base);
  case YU_SKIP: return DL_OK;
  default: return set_number(v, f, dst);
  }
}

dl_status yu_apply(const yu_val *map, const yu_field *fields, int nfields, void *base, void *ctx,
                   bool check_required, uint64_t *seen) {
  DL_TRY(yu_expect_mapping(map));
  uint64_t found = 0;
  void *it = NULL;
  yu_val item;
  for (;;) {
    bool got;
    DL_TRY(yu_map_next(map, &it, &item, &got));
    if (!got) break;
    int i = 0;
    while (i < nfields && strcmp(fields[i].key, item.key) != 0) i++;
    if (i == nfields) return unknown_key(&item, fields, nfields);
    DL_TRY(apply_field(&item, &fields[i], base, ctx, check_required));
    if (i < 64) found |= (uint64_t)1 << i;
  }
  for (int i = 0; check_required && i < nfields && i < 64; i++) {
    if (fields[i].required && !(found >> i & 1))
      return yu_fail(map, DL_ERR_FORMAT, "missing required key '%s'", fields[i].key);
  }
  if (seen) *seen = found;
  return DL_OK;
}
