/* yaml_util, the scenario loader's typed and located access to YAML, at
 * unit level: loading (I/O, size, NUL bytes, syntax, second documents),
 * values with their positions and paths, mappings and sequences, scalars of
 * every type with their ranges, field tables; and the hardening of issue 16:
 * duplicate keys found by dlcheck (linear; libfyaml's own check is
 * quadratic), quoted scalars refused where a number or true/false is
 * required, tagged nodes refused, control characters refused in strings
 * and keys. Every error is checked for its "FILE:LINE:COL: path: message". */
#define _XOPEN_SOURCE 700 /* mkdtemp */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "scenario/yaml_util.h"
#include "tmpdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------- */

static const char *write_text(const char *name, const char *text, size_t len) {
  const char *path = path_in_tmp(name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
  return path;
}

/* Loads `text` as t.yaml; fails the test if it does not load. */
static void load(yu_doc *d, const char *text) {
  const char *path = write_text("t.yaml", text, strlen(text));
  dl_status s = yu_doc_load(d, path, 1 << 20);
  if (s != DL_OK) fail_msg("loading '%s': %s", text, dl_last_error());
}

/* The error message contains `want`. */
static void expect_msg(const char *want) {
  if (!strstr(dl_last_error(), want))
    fail_msg("message '%s' does not contain '%s'", dl_last_error(), want);
}

/* Loading `text` fails with status s and a message containing `want`. */
static void load_fails(const char *text, size_t len, dl_status s, const char *want) {
  yu_doc d;
  const char *path = write_text("t.yaml", text, len);
  dl_status got = yu_doc_load(&d, path, 1 << 20);
  if (got != s) fail_msg("loading '%s': status %d, want %d (%s)", text, got, s, dl_last_error());
  expect_msg(want);
  expect_msg("t.yaml:");
  assert_null(d.doc); /* freed on failure */
  assert_null(d.bytes);
}

/* The same for a string literal (which may hold NUL bytes). */
#define LOAD_FAILS(literal, s, want) load_fails(literal, sizeof literal - 1, s, want)

static yu_val get(const yu_val *map, const char *key) {
  yu_val v;
  if (!yu_map_find(map, key, &v)) fail_msg("no key '%s'", key);
  return v;
}

/* ---- loading ----------------------------------------------------------- */

static void test_load_ok(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "a: 1\nb: [x, y]\n");
  assert_int_equal(d.len, 15);
  assert_memory_equal(d.bytes, "a: 1\nb: [x, y]\n", 15);
  assert_non_null(strstr(d.file, "t.yaml"));
  yu_val root = yu_doc_root(&d);
  assert_true(yu_is_mapping(&root));
  assert_string_equal(root.path, "");
  assert_int_equal(root.at.line, 1);
  assert_int_equal(root.at.col, 1);
  yu_doc_free(&d);
  yu_doc_free(&d); /* twice is harmless */
}

static void test_load_errors(void **state) {
  (void)state;
  yu_doc d;
  assert_int_equal(yu_doc_load(&d, path_in_tmp("missing.yaml"), 1024), DL_ERR_IO);
  expect_msg("missing.yaml: cannot open");
  char long_path[YU_FILE_MAX + 10];
  memset(long_path, 'x', sizeof long_path - 1);
  long_path[sizeof long_path - 1] = '\0';
  assert_int_equal(yu_doc_load(&d, long_path, 1024), DL_ERR_INVALID);
  expect_msg("too long");
  /* the size limit */
  const char *big = write_text("big.yaml", "a: 12345\n", 9);
  assert_int_equal(yu_doc_load(&d, big, 8), DL_ERR_FORMAT);
  expect_msg("larger than 8 bytes");
  assert_int_equal(yu_doc_load(&d, big, 9), DL_OK);
  yu_doc_free(&d);
  /* a NUL byte, located */
  LOAD_FAILS("a: 1\nbc\0: 2\n", DL_ERR_FORMAT, "t.yaml:2:3: a NUL byte");
  /* invalid UTF-8, located; libfyaml 0.7.12 loops forever on the first */
  LOAD_FAILS("%x \x96\n", DL_ERR_FORMAT, "t.yaml:1:4: a byte 0x96 that is not UTF-8");
  LOAD_FAILS("a: caf\xc3\xa9 \xc3(\n", DL_ERR_FORMAT, "t.yaml:1:9: a byte 0xc3 that is not UTF-8");
  LOAD_FAILS("a: \xc0\xaf\n", DL_ERR_FORMAT, "a byte 0xc0 that is not UTF-8");     /* overlong */
  LOAD_FAILS("a: \xed\xa0\x80\n", DL_ERR_FORMAT, "a byte 0xed that is not UTF-8"); /* surrogate */
  LOAD_FAILS("a: \xf4\x90\x80\x80\n", DL_ERR_FORMAT, "a byte 0xf4");               /* > U+10FFFF */
  LOAD_FAILS("a: \xe2\x82\n", DL_ERR_FORMAT, "a byte 0xe2");                       /* cut short */
  yu_doc ok;
  load(&ok, "a: \xf0\x9f\x98\x80 \xe2\x82\xac\n"); /* 4- and 3-byte characters */
  yu_doc_free(&ok);
  LOAD_FAILS("a: [1\n", DL_ERR_FORMAT, "YAML syntax error");
  LOAD_FAILS("", DL_ERR_FORMAT, "t.yaml:1:1: no YAML document found");
  LOAD_FAILS("# only a comment\n", DL_ERR_FORMAT, "no YAML document found");
  LOAD_FAILS("a: 1\n---\nb: 2\n", DL_ERR_FORMAT, "t.yaml:3:1: a second YAML document");
}

/* ---- values, positions, paths ------------------------------------------ */

static void test_paths_and_positions(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "top:\n  inner: {k: 5}\nlist:\n  - a\n  - {x: 1}\n");
  yu_val root = yu_doc_root(&d);
  yu_val top = get(&root, "top");
  assert_string_equal(top.path, "top");
  assert_string_equal(top.key, "top");
  assert_int_equal(top.key_at.line, 1);
  assert_int_equal(top.key_at.col, 1);
  assert_int_equal(top.at.line, 2); /* a mapping is where its first key is */
  assert_int_equal(top.at.col, 3);
  yu_val inner = get(&top, "inner");
  yu_val k = get(&inner, "k");
  assert_string_equal(k.path, "top.inner.k");
  assert_int_equal(k.at.line, 2);
  assert_int_equal(k.at.col, 14);
  yu_val list = get(&root, "list");
  int n = 0;
  assert_int_equal(yu_seq_count(&list, 1, 5, &n), DL_OK);
  assert_int_equal(n, 2);
  yu_val item = yu_seq_at(&list, 1);
  assert_string_equal(item.path, "list[1]");
  yu_val x = get(&item, "x");
  assert_string_equal(x.path, "list[1].x");
  assert_int_equal(x.at.line, 5);
  assert_int_equal(x.at.col, 9);
  /* messages: FILE:LINE:COL: path: text, at the value or at its key */
  assert_int_equal(yu_fail(&x, DL_ERR_INVALID, "bad %d", 7), DL_ERR_INVALID);
  expect_msg("t.yaml:5:9: list[1].x: bad 7");
  assert_int_equal(yu_fail_key(&x, DL_ERR_FORMAT, "key"), DL_ERR_FORMAT);
  expect_msg("t.yaml:5:6: list[1].x: key");
  assert_int_equal(yu_fail(&root, DL_ERR_FORMAT, "at the root"), DL_ERR_FORMAT);
  expect_msg("t.yaml:1:1: at the root");
  /* counts */
  assert_int_equal(yu_seq_count(&list, 3, 5, &n), DL_ERR_INVALID);
  expect_msg("list: expected at least 3 items, got 2");
  assert_int_equal(yu_seq_count(&list, 0, 1, &n), DL_ERR_INVALID);
  expect_msg("too many items: 2, at most 1");
  assert_int_equal(yu_seq_count(&top, 0, 1, &n), DL_ERR_FORMAT);
  expect_msg("top: expected a list");
  yu_doc_free(&d);
}

static void test_map_iteration(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "b: 1\na: 2\nc:\n");
  yu_val root = yu_doc_root(&d), item;
  const char *order[] = {"b", "a", "c"};
  void *it = NULL;
  bool got;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(yu_map_next(&root, &it, &item, &got), DL_OK);
    assert_true(got);
    assert_string_equal(item.key, order[i]); /* file order */
  }
  assert_true(yu_is_null(&item));
  assert_int_equal(yu_map_next(&root, &it, &item, &got), DL_OK);
  assert_false(got);
  assert_true(yu_map_find(&root, NULL, &item)); /* any key */
  assert_string_equal(item.key, "b");
  assert_false(yu_map_find(&root, "z", &item));
  yu_val b = get(&root, "b");
  assert_false(yu_map_find(&b, NULL, &item)); /* not a mapping */
  assert_int_equal(yu_expect_mapping(&b), DL_ERR_FORMAT);
  expect_msg("b: expected a mapping (key: value, ...), got a scalar");
  yu_doc_free(&d);
  load(&d, "{}\n");
  root = yu_doc_root(&d);
  assert_false(yu_map_find(&root, NULL, &item));
  yu_doc_free(&d);
}

static void test_nulls_and_aliases(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "a:\nb: ~\nc: null\nd: NULL\ne: ''\nf: &x 3\ng: *x\n");
  yu_val root = yu_doc_root(&d);
  const char *nulls[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++) {
    yu_val v = get(&root, nulls[i]);
    assert_true(yu_is_null(&v));
  }
  yu_val e = get(&root, "e");
  assert_false(yu_is_null(&e)); /* quoted: an empty string */
  char buf[8];
  assert_int_equal(yu_str(&e, buf, sizeof buf, true), DL_OK);
  assert_string_equal(buf, "");
  assert_int_equal(yu_str(&e, buf, sizeof buf, false), DL_ERR_INVALID);
  expect_msg("e: must not be empty");
  yu_val c = get(&root, "c");
  assert_int_equal(yu_str(&c, buf, sizeof buf, true), DL_ERR_FORMAT);
  expect_msg("c: expected a string, got nothing");
  yu_val g = get(&root, "g");
  int64_t i64;
  assert_int_equal(yu_i64(&g, (yu_range)YU_ANY, &i64), DL_ERR_FORMAT);
  expect_msg("t.yaml:7:4: g: aliases (*x) are not supported");
  yu_doc_free(&d);
}

/* ---- scalars ----------------------------------------------------------- */

static void test_scalars(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "t: true\nf: False\ny: yes\ni: -12\nbig: 99999999999999999999\nu: 18446744073709551615\n"
           "neg: -1\nx: 2.5e-3\nnan: .nan\ninf: 1e999\ns: hello world\nlist: [1]\n"
           "text: >\n  folded\n  text\n\n");
  yu_val root = yu_doc_root(&d), v;
  bool b = false;
  v = get(&root, "t");
  assert_int_equal(yu_bool(&v, &b), DL_OK);
  assert_true(b);
  v = get(&root, "f");
  assert_int_equal(yu_bool(&v, &b), DL_OK);
  assert_false(b);
  v = get(&root, "y");
  assert_int_equal(yu_bool(&v, &b), DL_ERR_FORMAT);
  expect_msg("t.yaml:3:4: y: expected true or false, got 'yes'");
  int64_t i = 0;
  v = get(&root, "i");
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i), DL_OK);
  assert_int_equal(i, -12);
  assert_int_equal(yu_i64(&v, (yu_range)YU_GE0, &i), DL_ERR_INVALID);
  expect_msg("i: must be >= 0, got -12");
  assert_int_equal(yu_i64(&v, (yu_range)YU_INTS(-5, 5), &i), DL_ERR_INVALID);
  expect_msg("i: must be in [-5, 5], got -12");
  v = get(&root, "big");
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i), DL_ERR_INVALID);
  expect_msg("out of range");
  uint64_t u = 0;
  v = get(&root, "u");
  assert_int_equal(yu_u64(&v, &u), DL_OK);
  assert_true(u == UINT64_MAX);
  v = get(&root, "neg");
  assert_int_equal(yu_u64(&v, &u), DL_ERR_FORMAT);
  expect_msg("neg: expected a non-negative integer, got '-1'");
  double x = 0;
  v = get(&root, "x");
  assert_int_equal(yu_f64(&v, (yu_range)YU_GT0, &x), DL_OK);
  assert_true(x == 2.5e-3);
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i), DL_ERR_FORMAT);
  expect_msg("x: expected an integer, got '2.5e-3'");
  assert_int_equal(yu_f64(&v, (yu_range)YU_RANGE(0, 1e-3, false, true), &x), DL_ERR_INVALID);
  expect_msg("must be in [0, 0.001), got 2.5e-3");
  v = get(&root, "nan");
  assert_int_equal(yu_f64(&v, (yu_range)YU_ANY, &x), DL_ERR_FORMAT);
  v = get(&root, "inf");
  assert_int_equal(yu_f64(&v, (yu_range)YU_ANY, &x), DL_ERR_INVALID);
  expect_msg("expected a finite number");
  char s[16];
  v = get(&root, "s");
  assert_int_equal(yu_str(&v, s, sizeof s, false), DL_OK);
  assert_string_equal(s, "hello world");
  assert_int_equal(yu_str(&v, s, 5, false), DL_ERR_INVALID);
  expect_msg("s: too long: 11 characters, at most 4");
  v = get(&root, "list");
  assert_int_equal(yu_str(&v, s, sizeof s, false), DL_ERR_FORMAT);
  expect_msg("list: expected a string, got a list");
  assert_int_equal(yu_f64(&v, (yu_range)YU_ANY, &x), DL_ERR_FORMAT);
  expect_msg("list: expected a number, got a list");
  v = get(&root, "text");
  assert_int_equal(yu_text(&v, s, sizeof s), DL_OK);
  assert_string_equal(s, "folded text"); /* trailing newline trimmed */
  yu_doc_free(&d);
}

static void test_choice(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "a: adam\nb: \"sgd\"\nc: nadam\n");
  static const char *const names[] = {"sgd", "adam", "adamw", NULL};
  yu_val root = yu_doc_root(&d);
  int i = -1;
  yu_val v = get(&root, "a");
  assert_int_equal(yu_choice(&v, names, &i), DL_OK);
  assert_int_equal(i, 1);
  v = get(&root, "b"); /* a name is a string: quoting it is fine */
  assert_int_equal(yu_choice(&v, names, &i), DL_OK);
  assert_int_equal(i, 0);
  v = get(&root, "c");
  assert_int_equal(yu_choice(&v, names, &i), DL_ERR_INVALID);
  expect_msg("c: expected one of: sgd, adam, adamw; got 'nadam'");
  yu_doc_free(&d);
}

/* Issue 16: '5' is a string. Where a number or true/false is required a
 * quoted (or block) scalar is refused, naming the key, file and line. */
static void test_quoted_numbers_refused(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "steps: '5'\nlr: \"0.1\"\nflag: 'true'\nseed: \"7\"\nblock: |\n  5\nok: 5\n");
  yu_val root = yu_doc_root(&d), v;
  int64_t i;
  double x;
  bool b;
  uint64_t u;
  v = get(&root, "steps");
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i), DL_ERR_FORMAT);
  expect_msg("t.yaml:1:8: steps: expected an integer, got the quoted string '5'; write it "
             "without quotes");
  v = get(&root, "lr");
  assert_int_equal(yu_f64(&v, (yu_range)YU_ANY, &x), DL_ERR_FORMAT);
  expect_msg("t.yaml:2:5: lr: expected a number, got the quoted string '0.1'");
  v = get(&root, "flag");
  assert_int_equal(yu_bool(&v, &b), DL_ERR_FORMAT);
  expect_msg("t.yaml:3:7: flag: expected true or false, got the quoted string 'true'");
  v = get(&root, "seed");
  assert_int_equal(yu_u64(&v, &u), DL_ERR_FORMAT);
  expect_msg("t.yaml:4:7: seed: expected a non-negative integer, got the quoted string '7'");
  v = get(&root, "block");
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i), DL_ERR_FORMAT);
  expect_msg("block: expected an integer, got a text block (| or >); write it without quotes");
  v = get(&root, "ok");
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i), DL_OK);
  assert_int_equal(i, 5);
  yu_doc_free(&d);
  /* through a field table too */
  typedef struct {
    int steps;
  } cfg;
  static const yu_field fields[] = {{.key = "steps", .type = YU_INT, .offset = 0}};
  cfg c = {0};
  load(&d, "steps: '5'\n");
  root = yu_doc_root(&d);
  assert_int_equal(yu_apply(&root, fields, 1, &c, NULL, true, NULL), DL_ERR_FORMAT);
  expect_msg("t.yaml:1:8: steps: expected an integer, got the quoted string '5'");
  assert_int_equal(c.steps, 0);
  yu_doc_free(&d);
}

/* Issue 16: tags (!!python/object, !!str, !local) are refused when the
 * file is loaded, wherever they are, even where the schema would never
 * look. */
static void test_tags_refused(void **state) {
  (void)state;
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"cmd: !!python/object/apply:os.system [\"ls\"]\n",
       "t.yaml:1:6: cmd: YAML tags (!!python/object/apply:os.system) are not supported"},
      {"a:\n  b: [1, !!str 2]\n", "t.yaml:2:10: a.b[1]: YAML tags (!!str) are not supported"},
      {"steps: !!int 5\n", "t.yaml:1:8: steps: YAML tags (!!int)"},
      {"x: !local {}\n", "t.yaml:1:4: x: YAML tags (!local)"},
      {"!!str k: 1\n", "t.yaml:1:1: k: YAML tags (!!str)"},
      {"--- !!map\na: 1\n", "t.yaml:1:5: YAML tags (!!map)"},
      {"%TAG !e! tag:example.com,2000:\n---\na: !e!thing 1\n",
       "t.yaml:3:4: a: YAML tags (!e!thing)"},
      {"a: !<tag:yaml.org,2002:str> x\n", "a: YAML tags (!<tag:yaml.org,2002:str>)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    load_fails(cases[i].text, strlen(cases[i].text), DL_ERR_FORMAT, cases[i].want);
  /* an anchor is no tag (its aliases are refused where used) */
  yu_doc d;
  load(&d, "a: &x 1\n");
  yu_doc_free(&d);
}

/* Duplicate keys: found by dlcheck, by text ('a' and a are one key), in
 * any mapping. */
static void test_duplicate_keys(void **state) {
  (void)state;
  LOAD_FAILS("steps: 4\nseed: 1\nsteps: 5\n", DL_ERR_FORMAT,
             "t.yaml:3:1: steps: duplicate key 'steps' (first at line 1)");
  LOAD_FAILS("a: {x: 1, 'x': 2}\n", DL_ERR_FORMAT, "t.yaml:1:11: a.x: duplicate key 'x'");
  LOAD_FAILS("l:\n  - {k: 1}\n  - {k: 1, k: 2}\n", DL_ERR_FORMAT,
             "t.yaml:3:12: l[1].k: duplicate key 'k' (first at line 3)");
  /* the same key in two mappings is fine */
  yu_doc d;
  load(&d, "a: {x: 1}\nb: {x: 1}\n");
  yu_doc_free(&d);
}

/* Many keys load, and a duplicate at the end of them is found. (How fast:
 * fuzz/bench_yaml.sh; a timed unit test would be flaky on a busy CI.) */
static void test_many_keys(void **state) {
  (void)state;
  enum { N = 50000 };
  size_t cap = (size_t)N * 16 + 64, len = 0;
  char *text = malloc(cap);
  assert_non_null(text);
  for (int i = 0; i < N; i++) len += (size_t)snprintf(text + len, cap - len, "key%d: %d\n", i, i);
  yu_doc d;
  const char *path = write_text("many.yaml", text, len);
  assert_int_equal(yu_doc_load(&d, path, 1 << 20), DL_OK);
  yu_val root = yu_doc_root(&d), item;
  void *it = NULL;
  bool got;
  int n = 0;
  while (yu_map_next(&root, &it, &item, &got) == DL_OK && got) n++;
  assert_int_equal(n, N);
  yu_val last = get(&root, "key49999");
  assert_int_equal(last.at.line, N);
  yu_doc_free(&d);
  len += (size_t)snprintf(text + len, cap - len, "key17: 0\n");
  path = write_text("many.yaml", text, len);
  assert_int_equal(yu_doc_load(&d, path, 1 << 20), DL_ERR_FORMAT);
  expect_msg("many.yaml:50001:1: key17: duplicate key 'key17' (first at line 18)");
  free(text);
}

/* Issue 16: control characters in strings (names end up in reports and
 * file names) and keys; messages never quote them. */
static void test_control_characters(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "esc: \"run\\e[31m\"\ntab: \"a\\tb\"\nbell: \"x\\a\"\nc1: \"x\\u0085\"\n"
           "bidi: \"x\\u202Ey\"\nlsep: \"x\\u2028\"\ndel: \"x\\x7f\"\nok: \"caf\\u00e9\"\n"
           "text: \"two\\nlines\\tand a tab\"\nbadtext: \"x\\by\"\nnum: \"1\\e\"\n"
           "plaintab: 1\t2\n");
  yu_val root = yu_doc_root(&d), v;
  char buf[64];
  static const struct {
    const char *key;
    unsigned cp;
    int at;
  } bad[] = {{"esc", 0x1b, 4},    {"tab", 0x09, 2},    {"bell", 0x07, 2}, {"c1", 0x85, 2},
             {"bidi", 0x202e, 2}, {"lsep", 0x2028, 2}, {"del", 0x7f, 2}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = get(&root, bad[i].key);
    assert_int_equal(yu_str(&v, buf, sizeof buf, false), DL_ERR_FORMAT);
    char want[128];
    snprintf(want, sizeof want, "%s: holds a control character (U+%04X) at character %d",
             bad[i].key, bad[i].cp, bad[i].at);
    expect_msg(want);
  }
  v = get(&root, "ok");
  assert_int_equal(yu_str(&v, buf, sizeof buf, false), DL_OK);
  assert_string_equal(buf, "caf\xc3\xa9");
  /* text (descriptions) may hold line breaks and tabs, nothing else */
  v = get(&root, "text");
  assert_int_equal(yu_text(&v, buf, sizeof buf), DL_OK);
  assert_string_equal(buf, "two\nlines\tand a tab");
  assert_int_equal(yu_str(&v, buf, sizeof buf, false), DL_ERR_FORMAT);
  v = get(&root, "badtext");
  assert_int_equal(yu_text(&v, buf, sizeof buf), DL_ERR_FORMAT);
  expect_msg("badtext: holds a control character (U+0008)");
  /* numbers, booleans and names say so without echoing the text */
  v = get(&root, "num");
  int64_t i64;
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i64), DL_ERR_FORMAT);
  expect_msg("num: expected an integer, got a quoted string; write it without quotes");
  assert_null(strchr(dl_last_error(), '\x1b'));
  v = get(&root, "plaintab"); /* a plain scalar may hold a tab */
  assert_int_equal(yu_i64(&v, (yu_range)YU_ANY, &i64), DL_ERR_FORMAT);
  expect_msg("plaintab: expected an integer, got text with a control character (U+0009)");
  static const char *const names[] = {"a", NULL};
  int choice;
  assert_int_equal(yu_choice(&v, names, &choice), DL_ERR_FORMAT);
  assert_null(strchr(dl_last_error(), '\x1b'));
  yu_doc_free(&d);
  /* keys */
  load(&d, "\"run\\e]0;title\\a\": 1\n");
  root = yu_doc_root(&d);
  void *it = NULL;
  bool got;
  assert_int_equal(yu_map_next(&root, &it, &v, &got), DL_ERR_FORMAT);
  expect_msg("t.yaml:1:1: keys must be plain names; this one holds a control character (U+001B)");
  assert_null(strchr(dl_last_error(), '\x1b'));
  yu_doc_free(&d);
}

static void test_bad_keys(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "? [x]\n: 1\n");
  yu_val root = yu_doc_root(&d), v;
  void *it = NULL;
  bool got;
  assert_int_equal(yu_map_next(&root, &it, &v, &got), DL_ERR_FORMAT);
  expect_msg("keys must be plain names");
  yu_doc_free(&d);
  char text[YU_KEY_MAX + 16];
  memset(text, 'k', YU_KEY_MAX);
  snprintf(text + YU_KEY_MAX, sizeof text - YU_KEY_MAX, ": 1\n");
  load(&d, text);
  root = yu_doc_root(&d);
  it = NULL;
  assert_int_equal(yu_map_next(&root, &it, &v, &got), DL_ERR_INVALID);
  expect_msg("is too long (128 characters, at most 127)");
  yu_doc_free(&d);
}

static void test_deep_nesting(void **state) {
  (void)state;
  enum { DEPTH = 5000 };
  char *text = malloc(2 * DEPTH + 2);
  assert_non_null(text);
  memset(text, '[', DEPTH);
  memset(text + DEPTH, ']', DEPTH);
  text[2 * DEPTH] = '\n';
  text[2 * DEPTH + 1] = '\0';
  yu_doc d;
  const char *path = write_text("deep.yaml", text, 2 * DEPTH + 1);
  assert_int_equal(yu_doc_load(&d, path, 1 << 20), DL_ERR_FORMAT); /* no stack overflow */
  free(text);
}

/* ---- field tables ------------------------------------------------------ */

typedef struct settings {
  bool on;
  int n;
  int64_t big;
  uint64_t seed;
  float f;
  double lr;
  char name[8];
  char opt[8];
  char text[32];
  int kind;
  int custom;
  int inner_x;
} settings;

static dl_status parse_twice(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  (void)f;
  int64_t x;
  DL_TRY(yu_i64(v, (yu_range)YU_ANY, &x));
  ((settings *)base)->custom = (int)(2 * x);
  (*(int *)ctx)++;
  return DL_OK;
}

static const char *const kinds[] = {"relu", "gelu", NULL};
#define SF(k, t, m) .key = k, .type = t, .offset = offsetof(settings, m)
static const yu_field inner_fields[] = {{SF("x", YU_INT, inner_x), .required = true}};
static const yu_field fields[] = {
    {SF("on", YU_BOOL, on)},
    {SF("n", YU_INT, n), .range = YU_GE1, .required = true},
    {SF("big", YU_I64, big)},
    {SF("seed", YU_U64, seed)},
    {SF("f", YU_F32, f)},
    {SF("lr", YU_F64, lr), .range = YU_GT0},
    {SF("name", YU_STR, name), .size = 8},
    {SF("opt", YU_STR0, opt), .size = 8},
    {SF("text", YU_TEXT, text), .size = 32},
    {SF("kind", YU_CHOICE, kind), .choices = kinds},
    {.key = "twice", .type = YU_CUSTOM, .parse = parse_twice},
    {.key = "inner", .type = YU_MAP, .sub = inner_fields, .nsub = 1},
    {.key = "later", .type = YU_SKIP},
};
enum { NFIELDS = sizeof fields / sizeof fields[0] };

static void test_apply(void **state) {
  (void)state;
  yu_doc d;
  load(&d, "on: true\nn: 3\nbig: -5000000000\nseed: 9\nf: 0.5\nlr: 0.25\nname: abc\nopt: ''\n"
           "text: |\n  hi\nkind: gelu\ntwice: 21\ninner: {x: 4}\nlater: [whatever]\n");
  settings s;
  memset(&s, 0, sizeof s);
  int calls = 0;
  uint64_t seen = 0;
  yu_val root = yu_doc_root(&d);
  assert_int_equal(yu_apply(&root, fields, NFIELDS, &s, &calls, true, &seen), DL_OK);
  assert_true(s.on);
  assert_int_equal(s.n, 3);
  assert_true(s.big == -5000000000LL);
  assert_true(s.seed == 9);
  assert_true(s.f == 0.5f);
  assert_true(s.lr == 0.25);
  assert_string_equal(s.name, "abc");
  assert_string_equal(s.opt, "");
  assert_string_equal(s.text, "hi");
  assert_int_equal(s.kind, 1);
  assert_int_equal(s.custom, 42);
  assert_int_equal(calls, 1);
  assert_int_equal(s.inner_x, 4);
  assert_true(seen == ((uint64_t)1 << NFIELDS) - 1);
  yu_doc_free(&d);
  /* only the keys present are set (overrides merge key by key) */
  load(&d, "lr: 0.5\n");
  root = yu_doc_root(&d);
  assert_int_equal(yu_apply(&root, fields, NFIELDS, &s, &calls, false, &seen), DL_OK);
  assert_true(s.lr == 0.5);
  assert_int_equal(s.n, 3);
  assert_true(seen == (uint64_t)1 << 5);
  /* ... but a required key must be there when asked */
  assert_int_equal(yu_apply(&root, fields, NFIELDS, &s, &calls, true, NULL), DL_ERR_FORMAT);
  expect_msg("t.yaml:1:1: missing required key 'n'");
  yu_doc_free(&d);
}

static void test_apply_errors(void **state) {
  (void)state;
  static const struct {
    const char *text;
    dl_status s;
    const char *want;
  } cases[] = {
      {"n: 1\nbogus: 2\n", DL_ERR_FORMAT,
       "t.yaml:2:1: bogus: unknown key 'bogus'; expected one of: on, n, big, seed, f, lr, name"},
      {"n: 0\n", DL_ERR_INVALID, "t.yaml:1:4: n: must be >= 1, got 0"},
      {"n: 3000000000\n", DL_ERR_INVALID, "n: integer 3000000000 is out of range"},
      {"n: 1\nf: 1e39\n", DL_ERR_INVALID, "f: 1e+39 is too large for a float32"},
      {"n: 1\nlr: 0\n", DL_ERR_INVALID, "lr: must be > 0, got 0"},
      {"n: 1\nname: toolongg\n", DL_ERR_INVALID, "name: too long: 8 characters, at most 7"},
      {"n: 1\nname: \"a\\x01\"\n", DL_ERR_FORMAT, "name: holds a control character (U+0001)"},
      {"n: 1\nkind: tanh\n", DL_ERR_INVALID, "kind: expected one of: relu, gelu; got 'tanh'"},
      {"n: 1\ninner: {}\n", DL_ERR_FORMAT, "inner: missing required key 'x'"},
      {"n: 1\ninner: 3\n", DL_ERR_FORMAT, "inner: expected a mapping"},
      {"n: 1\ninner: {x: 1, y: 2}\n", DL_ERR_FORMAT,
       "inner.y: unknown key 'y'; expected one of: x"},
      {"n: 1\ntwice: '3'\n", DL_ERR_FORMAT, "twice: expected an integer, got the quoted string"},
      {"[1, 2]\n", DL_ERR_FORMAT, "expected a mapping (key: value, ...), got a list"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    yu_doc d;
    load(&d, cases[i].text);
    settings s;
    memset(&s, 0, sizeof s);
    int calls = 0;
    yu_val root = yu_doc_root(&d);
    dl_status got = yu_apply(&root, fields, NFIELDS, &s, &calls, true, NULL);
    if (got != cases[i].s)
      fail_msg("'%s': status %d, want %d (%s)", cases[i].text, got, cases[i].s, dl_last_error());
    expect_msg(cases[i].want);
    yu_doc_free(&d);
  }
}

static int setup(void **state) {
  (void)state;
  return tmpdir_make("dlc_yaml_util");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_ok),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_paths_and_positions),
      cmocka_unit_test(test_map_iteration),
      cmocka_unit_test(test_nulls_and_aliases),
      cmocka_unit_test(test_scalars),
      cmocka_unit_test(test_choice),
      cmocka_unit_test(test_quoted_numbers_refused),
      cmocka_unit_test(test_tags_refused),
      cmocka_unit_test(test_duplicate_keys),
      cmocka_unit_test(test_many_keys),
      cmocka_unit_test(test_control_characters),
      cmocka_unit_test(test_bad_keys),
      cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_apply),
      cmocka_unit_test(test_apply_errors),
  };
  return cmocka_run_group_tests(tests, setup, remove_tmpdir);
}
