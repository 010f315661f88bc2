/* Loading a scenario file: its bytes read and refused when they are not
 * UTF-8 text, parsed by libfyaml into one document, then walked once for
 * what the schema cannot see (tags, duplicate keys, depth). See yaml_util.h. */
#include "scenario/yaml_internal.h"

#include "io/atomic_file.h" /* dl_fopen_regular: the scenario file is opened only if regular */

#include <errno.h>
#include <libfyaml.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ---- loading ----------------------------------------------------------- */

static dl_status read_all(yu_doc *d, size_t max_bytes) {
  FILE *f; /* a regular file only: a FIFO would block (atomic_file.h) */
  DL_TRY(dl_fopen_regular(d->file, NULL, &f));
  char *buf = malloc(max_bytes + 2);
  if (!buf) {
    fclose(f);
    return dl_fail(DL_ERR_NOMEM, "%s: out of memory reading", d->file);
  }
  size_t len = fread(buf, 1, max_bytes + 1, f);
  dl_status s = DL_OK;
  if (ferror(f)) s = dl_fail(DL_ERR_IO, "%s: cannot read: %s", d->file, strerror(errno));
  else if (len > max_bytes)
    s = dl_fail(DL_ERR_FORMAT, "%s: larger than %zu bytes; a scenario file is a few kilobytes",
                d->file, max_bytes);
  fclose(f);
  if (s != DL_OK) {
    free(buf);
    return s;
  }
  buf[len] = '\0';
  d->bytes = buf;
  d->len = len;
  return DL_OK;
}

/* libfyaml's parser stops at a NUL byte as at the end of the file: refuse
 * it rather than read a file half-way. */
static dl_status refuse_nul(const yu_doc *d) {
  const char *nul = memchr(d->bytes, '\0', d->len);
  if (!nul) return DL_OK;
  yu_pos at = {1, 1};
  for (const char *p = d->bytes; p < nul; p++) {
    if (*p == '\n') {
      at.line++;
      at.col = 1;
    } else {
      at.col++;
    }
  }
  return dl_fail(DL_ERR_FORMAT, "%s:%d:%d: a NUL byte; a scenario file is UTF-8 text", d->file,
                 at.line, at.col);
}

/* Length of the well-formed UTF-8 sequence at p (p < end; no overlong
 * forms, no surrogates, at most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t n = c >= 0xc2 && c <= 0xdf   ? 2
             : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4
                                      : 0;
  if (n == 0 || (size_t)(end - p) < n) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  if (c == 0xe0 && p[1] < 0xa0) return 0; /* overlong */
  if (c == 0xed && p[1] > 0x9f) return 0; /* surrogates */
  if (c == 0xf0 && p[1] < 0x90) return 0; /* overlong */
  if (c == 0xf4 && p[1] > 0x8f) return 0; /* above U+10FFFF */
  return n;
}

/* Invalid UTF-8 is refused before libfyaml sees it: its scanner (0.7.12)
 * loops forever on some (a reserved directive "%x" followed by a byte such
 * as 0x96; tests/fuzz/scenario/). NUL bytes first, with their own message. */
static dl_status refuse_bad_text(const yu_doc *d) {
  DL_TRY(refuse_nul(d));
  const unsigned char *p = (const unsigned char *)d->bytes, *end = p + d->len;
  yu_pos at = {1, 1};
  while (p < end) {
    size_t n = utf8_len(p, end);
    if (n == 0)
      return dl_fail(DL_ERR_FORMAT,
                     "%s:%d:%d: a byte 0x%02x that is not UTF-8; a scenario file "
                     "is UTF-8 text",
                     d->file, at.line, at.col, *p);
    if (*p == '\n') {
      at.line++;
      at.col = 1;
    } else {
      at.col++;
    }
    p += n;
  }
  return DL_OK;
}

static void quiet_output(struct fy_diag *diag, void *user, const char *buf, size_t len) {
  (void)diag, (void)user, (void)buf, (void)len;
}

static dl_status syntax_error(const yu_doc *d, struct fy_diag *diag) {
  void *it = NULL;
  struct fy_diag_error *e;
  while ((e = fy_diag_errors_iterate(diag, &it)) != NULL) {
    if (e->type < FYET_ERROR) continue;
    return dl_fail(DL_ERR_FORMAT, "%s:%d:%d: YAML syntax error: %s", d->file,
                   e->line > 0 ? e->line : 1, e->column > 0 ? e->column : 1,
                   e->msg ? e->msg : "(no message)");
  }
  return dl_fail(DL_ERR_FORMAT,
                 "%s:1:1: no YAML document found (the file is empty, holds only "
                 "comments, or is not UTF-8 text)",
                 d->file);
}

/* ---- checks of the whole document -------------------------------------- */

/* Run once after parsing, over every node, so that nothing the schema reads
 * later (or skips) escapes them: tags are refused, and duplicate keys, which
 * libfyaml is told not to look for (its check compares each new key with
 * every earlier one: quadratic in the keys of a mapping), are found here
 * with a hash table, linear in the size of the file. */

enum { WALK_MAX_DEPTH = 256 };

typedef struct key_slot {
  const char *text; /* NULL: empty slot */
  size_t len;
  int line;
} key_slot;

static uint64_t hash_text(const char *t, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
  return h;
}

/* A tag as written (!!python/object:os.system), for the message: the
 * source bytes at the tag token, up to a space, at most 60 of them, with
 * anything unprintable replaced by '?'. */
static void tag_as_written(const yu_doc *d, struct fy_token *tag, char *buf, size_t size) {
  const struct fy_mark *m = fy_token_start_mark(tag);
  size_t n = 0;
  if (m && (size_t)m->input_pos < d->len) {
    const unsigned char *p = (const unsigned char *)d->bytes + m->input_pos;
    const unsigned char *end = (const unsigned char *)d->bytes + d->len;
    while (p < end && n + 1 < size && n < 60 && *p > ' ' && *p != 0x7f) {
      buf[n++] = *p < 0x80 ? (char)*p : '?';
      p++;
    }
  }
  if (n == 0 && size > 1) buf[n++] = '!';
  buf[n] = '\0';
}

static dl_status walk(const yu_doc *d, struct fy_node *n, const char *path, yu_pos at, int depth);

static dl_status refuse_tag(const yu_doc *d, struct fy_node *n, const char *path, yu_pos at) {
  struct fy_token *tag = fy_node_get_tag_token(n);
  if (!tag) return DL_OK;
  const struct fy_mark *m = fy_token_start_mark(tag);
  if (m) at = (yu_pos){m->line + 1, m->column + 1};
  char written[64];
  tag_as_written(d, tag, written, sizeof written);
  return dl_fail(DL_ERR_FORMAT,
                 "%s:%d:%d: %s%sYAML tags (%s) are not supported; a scenario "
                 "holds plain values, never typed objects",
                 d->file, at.line, at.col, path, path[0] ? ": " : "", written);
}

static dl_status walk_mapping(const yu_doc *d, struct fy_node *n, const char *path, yu_pos at,
                              int depth) {
  int count = fy_node_mapping_item_count(n);
  size_t cap = 16;
  while (count > 0 && cap < (size_t)count * 2) cap *= 2;
  key_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return dl_fail(DL_ERR_NOMEM, "%s: out of memory checking keys", d->file);
  dl_status s = DL_OK;
  void *it = NULL;
  struct fy_node_pair *pair;
  while (s == DL_OK && (pair = fy_node_mapping_iterate(n, &it)) != NULL) {
    struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
    yu_pos key_at = yu_pos_or(k, at);
    char sub[YU_PATH_MAX];
    snprintf(sub, sizeof sub, "%s", path);
    size_t len = 0;
    const char *t = k && fy_node_is_scalar(k) && !yu_is_alias(k) ? fy_node_get_scalar(k, &len)
                                                                 : NULL;
    unsigned cp;
    if (t && len > 0 && len < YU_KEY_MAX && yu_find_control(t, len, NULL, &cp) < 0) {
      char key[YU_KEY_MAX];
      memcpy(key, t, len);
      key[len] = '\0';
      yu_join_path(sub, path, ".", key);
      /* Duplicates: keys compare by their text ('a' and a are one key). */
      size_t i = (size_t)hash_text(t, len) & (cap - 1);
      while (slots[i].text && !(slots[i].len == len && !memcmp(slots[i].text, t, len)))
        i = (i + 1) & (cap - 1);
      if (slots[i].text) {
        s = dl_fail(DL_ERR_FORMAT,
                    "%s:%d:%d: %s: duplicate key '%s' (first at line %d); each key "
                    "may appear once in a mapping",
                    d->file, key_at.line, key_at.col, sub, key, slots[i].line);
        break;
      }
      slots[i] = (key_slot){t, len, key_at.line};
    }
    /* Other keys (not plain, too long, with control characters) are
     * refused, with their reason, when the schema reads the mapping; their
     * tags are refused here. */
    if (k) s = walk(d, k, sub, key_at, depth + 1);
    if (s == DL_OK && v) s = walk(d, v, sub, yu_pos_or(v, key_at), depth + 1);
  }
  free(slots);
  return s;
}

static dl_status walk(const yu_doc *d, struct fy_node *n, const char *path, yu_pos at, int depth) {
  if (depth > WALK_MAX_DEPTH)
    return dl_fail(DL_ERR_FORMAT, "%s:%d:%d: %s%svalues nest deeper than %d levels", d->file,
                   at.line, at.col, path, path[0] ? ": " : "", WALK_MAX_DEPTH);
  DL_TRY(refuse_tag(d, n, path, at));
  if (fy_node_is_mapping(n)) return walk_mapping(d, n, path, at, depth);
  if (!fy_node_is_sequence(n)) return DL_OK;
  void *it = NULL;
  struct fy_node *item;
  for (int i = 0; (item = fy_node_sequence_iterate(n, &it)) != NULL; i++) {
    char index[24], sub[YU_PATH_MAX];
    snprintf(index, sizeof index, "[%d]", i);
    yu_join_path(sub, path, "", index);
    DL_TRY(walk(d, item, sub, yu_pos_or(item, at), depth + 1));
  }
  return DL_OK;
}

/* Parses the bytes into the first document; a second document in the
 * stream is refused, so that no part of the file is silently ignored.
 * Duplicate keys are looked for by walk(), not by libfyaml (see there). */
static dl_status parse(yu_doc *d, struct fy_diag *diag) {
  struct fy_parse_cfg pc;
  memset(&pc, 0, sizeof pc);
  pc.flags = FYPCF_QUIET | FYPCF_ALLOW_DUPLICATE_KEYS;
  pc.diag = diag;
  d->parser = fy_parser_create(&pc);
  if (!d->parser || fy_parser_set_string(d->parser, d->bytes, d->len) != 0)
    return dl_fail(DL_ERR_NOMEM, "%s: out of memory creating the YAML parser", d->file);
  d->doc = fy_parse_load_document(d->parser);
  if (!d->doc || fy_diag_got_error(diag)) return syntax_error(d, diag);
  struct fy_document *second = fy_parse_load_document(d->parser);
  if (second) {
    yu_pos at = yu_pos_or(fy_document_root(second), (yu_pos){1, 1});
    fy_parse_document_destroy(d->parser, second);
    return dl_fail(DL_ERR_FORMAT,
                   "%s:%d:%d: a second YAML document ('---'); a scenario file "
                   "holds exactly one",
                   d->file, at.line, at.col);
  }
  if (fy_diag_got_error(diag)) return syntax_error(d, diag);
  struct fy_node *root = fy_document_root(d->doc);
  return root ? walk(d, root, "", yu_pos_or(root, (yu_pos){1, 1}), 0) : DL_OK;
}

dl_status yu_doc_load(yu_doc *d, const char *file, size_t max_bytes) {
  memset(d, 0, sizeof *d);
  size_t n = strlen(file);
  if (n >= sizeof d->file)
    return dl_fail(DL_ERR_INVALID, "scenario path of %zu characters is too long (at most %zu)", n,
                   sizeof d->file - 1);
  memcpy(d->file, file, n + 1);
  DL_TRY(read_all(d, max_bytes));
  dl_status s = refuse_bad_text(d);
  struct fy_diag_cfg dc;
  fy_diag_cfg_default(&dc);
  dc.fp = NULL;
  dc.output_fn = quiet_output;
  dc.colorize = false;
  struct fy_diag *diag = s == DL_OK ? fy_diag_create(&dc) : NULL;
  if (s == DL_OK && !diag)
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory for YAML diagnostics", file);
  if (diag) fy_diag_set_collect_errors(diag, true);
  if (s == DL_OK) s = parse(d, diag);
  if (diag) fy_diag_destroy(diag);
  if (s != DL_OK) yu_doc_free(d);
  return s;
}

void yu_doc_free(yu_doc *d) {
  if (d->doc) fy_parse_document_destroy(d->parser, d->doc);
  if (d->parser) fy_parser_destroy(d->parser);
  free(d->bytes);
  d->doc = NULL;
  d->parser = NULL;
  d->bytes = NULL;
  d->len = 0;
}

yu_val yu_doc_root(const yu_doc *d) {
  yu_val v;
  memset(&v, 0, sizeof v);
  v.doc = d;
  v.node = fy_document_root(d->doc);
  v.at = yu_pos_or(v.node, (yu_pos){1, 1});
  v.key_at = v.at;
  return v;
}
