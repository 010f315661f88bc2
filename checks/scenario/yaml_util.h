/* Typed, located access to a YAML document (libfyaml) for the scenario
 * loader: every value knows where it is in the file and the dotted path of
 * keys that led to it, so that every error reads
 *   FILE:LINE:COL: optimizer.lr: must be > 0, got -0.1
 * Plain mappings are read through field tables (yu_field) that say each
 * key's type, range and place in a C struct; applying a table to a mapping
 * sets only the keys present, which is what makes overrides merge key by
 * key. */
#ifndef DLC_YAML_UTIL_H
#define DLC_YAML_UTIL_H

#include "core/status.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fy_document;
struct fy_node;
struct fy_parser;

enum { YU_PATH_MAX = 256, YU_KEY_MAX = 128, YU_FILE_MAX = 600, YU_MAX_FIELDS = 64 };

/* A parsed file: its bytes (for hashing) and the document built from them. */
typedef struct yu_doc {
  char file[YU_FILE_MAX]; /* as given, for messages */
  char *bytes;            /* the file's content, NUL-terminated */
  size_t len;
  struct fy_parser *parser; /* owns doc */
  struct fy_document *doc;
} yu_doc;

/* 1-based line and column; 0 when unknown. */
typedef struct yu_pos {
  int line, col;
} yu_pos;

/* A value in the document: a node (NULL when a key has no value at all) and
 * where to point when it is wrong. */
typedef struct yu_val {
  const yu_doc *doc;
  struct fy_node *node;
  yu_pos at;              /* the value's position (or its key's) */
  yu_pos key_at;          /* the key's position (mapping values) */
  char key[YU_KEY_MAX];   /* the key it was found under ("" for items) */
  char path[YU_PATH_MAX]; /* "optimizer.lr", "model[2].type" */
} yu_val;

/* Reads and parses `file` (at most `max_bytes`). DL_ERR_IO when it cannot be
 * read ("FILE: cannot open: No such file or directory"), DL_ERR_FORMAT with
 * "FILE:LINE:COL: YAML syntax error: ..." when it is not YAML, or when it
 * holds no document at all. Also DL_ERR_FORMAT, located, before the schema
 * reads anything: a NUL byte or invalid UTF-8, a second document, a tagged
 * node anywhere (!!python/object, !!str, !local: "YAML tags (...) are not
 * supported"), a key repeated in a mapping. Time and memory are linear in
 * the file's size. */
dl_status yu_doc_load(yu_doc *d, const char *file, size_t max_bytes);
void yu_doc_free(yu_doc *d);
/* The document's root value (path ""). */
yu_val yu_doc_root(const yu_doc *d);

/* Fails with "FILE:LINE:COL: PATH: message" pointing at v->at. */
dl_status yu_fail(const yu_val *v, dl_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same, pointing at the key of v. */
dl_status yu_fail_key(const yu_val *v, dl_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A key with nothing after it, or an explicit null (~, null). */
bool yu_is_null(const yu_val *v);
bool yu_is_mapping(const yu_val *v);

/* Mappings and sequences. Iteration starts with *iter = NULL; *got is false
 * at the end. Keys must be plain scalars of at most YU_KEY_MAX - 1 bytes,
 * without control characters. */
dl_status yu_expect_mapping(const yu_val *v);
dl_status yu_map_next(const yu_val *map, void **iter, yu_val *item, bool *got);
/* true and *item set if `key` is in the mapping (NULL: any key, so false
 * means the mapping is empty or not a mapping). */
bool yu_map_find(const yu_val *map, const char *key, yu_val *item);
/* Checks v is a sequence of min..max items and sets *n. */
dl_status yu_seq_count(const yu_val *v, int min, int max, int *n);
yu_val yu_seq_at(const yu_val *seq, int i); /* path "seq[i]" */

/* Scalars. Numbers and true/false must be plain scalars ('5' and "true"
 * are strings, refused with "got the quoted string '5'"); numbers must be
 * finite and are checked against `r`. Text holding a control character is
 * refused without being quoted in the message. */
typedef struct yu_range {
  double lo, hi;
  bool lo_open, hi_open; /* exclusive bounds */
} yu_range;

dl_status yu_bool(const yu_val *v, bool *out);
dl_status yu_i64(const yu_val *v, yu_range r, int64_t *out);
dl_status yu_u64(const yu_val *v, uint64_t *out);
dl_status yu_f64(const yu_val *v, yu_range r, double *out);
/* Copies a string scalar into buf; too long is an error, never truncated.
 * Control characters are refused (C0, DEL, C1, and the invisible ones that
 * reorder or break a line: U+061C, U+200E/F, U+2028..202E, U+2066..2069):
 * names end up in reports, terminals and file names. */
dl_status yu_str(const yu_val *v, char *buf, size_t size, bool allow_empty);
/* yu_str (non-empty) without trailing whitespace: for folded text (>).
 * Line breaks and tabs are allowed in it, no other control character. */
dl_status yu_text(const yu_val *v, char *buf, size_t size);
/* Index of the scalar in the NULL-terminated `names`. */
dl_status yu_choice(const yu_val *v, const char *const *names, int *out);

/* Field tables. */
typedef enum {
  YU_BOOL,
  YU_INT,
  YU_I64,
  YU_U64,
  YU_F32,
  YU_F64,
  YU_STR,    /* char[size]; non-empty */
  YU_STR0,   /* char[size]; may be empty */
  YU_TEXT,   /* char[size]; non-empty, trailing whitespace trimmed */
  YU_CHOICE, /* an int (or int-sized enum) set to the index in `choices` */
  YU_MAP,    /* a nested mapping read with the table `sub` at the same base */
  YU_CUSTOM, /* read by `parse` */
  YU_SKIP    /* allowed here, read elsewhere */
} yu_type;

typedef struct yu_field yu_field;
typedef dl_status (*yu_parse_fn)(void *ctx, const yu_val *v, const yu_field *f, void *base);

struct yu_field {
  const char *key;
  yu_type type;
  size_t offset;              /* into the base struct */
  size_t size;                /* strings: buffer size */
  yu_range range;             /* numbers; all zero (unset) = any value */
  const char *const *choices; /* YU_CHOICE: NULL-terminated */
  const yu_field *sub;        /* YU_MAP */
  int nsub;
  yu_parse_fn parse; /* YU_CUSTOM */
  bool required;
};

/* Applies the keys present in `map` to `base`: unknown keys fail with the
 * list of expected ones; with `check_required`, missing required keys fail.
 * *seen (may be NULL) gets bit i for each field i found. ctx goes to custom
 * parsers. */
dl_status yu_apply(const yu_val *map, const yu_field *fields, int nfields, void *base, void *ctx,
                   bool check_required, uint64_t *seen);

/* Ranges as initialisers (in calls: (yu_range)YU_GE1). */
#define YU_RANGE(lo, hi, lo_open, hi_open) \
  { (lo), (hi), (lo_open), (hi_open) }
#define YU_ANY YU_RANGE(-INFINITY, INFINITY, false, false)
#define YU_GT0 YU_RANGE(0, INFINITY, true, false)
#define YU_GE0 YU_RANGE(0, INFINITY, false, false)
#define YU_GE1 YU_RANGE(1, INFINITY, false, false)
#define YU_UNIT YU_RANGE(0, 1, false, false)     /* [0, 1] */
#define YU_UNIT_OPEN YU_RANGE(0, 1, false, true) /* [0, 1) */
#define YU_INTS(lo, hi) YU_RANGE((lo), (hi), false, false)

#endif
