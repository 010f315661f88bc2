/* trace/utf8.h: decoding, and the valid copy JSON and reports are made of. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "trace/utf8.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

static void decodes_one_to_four_bytes(void **state) {
  (void)state;
  uint32_t cp;
  assert_int_equal(dlc_utf8_next("A", &cp), 1);
  assert_int_equal(cp, 'A');
  assert_int_equal(dlc_utf8_next("\xc2\xb5", &cp), 2);
  assert_int_equal(cp, 0xb5);
  assert_int_equal(dlc_utf8_next("\xe6\x97\xa5", &cp), 3);
  assert_int_equal(cp, 0x65e5);
  assert_int_equal(dlc_utf8_next("\xf0\x9f\x98\x80", &cp), 4);
  assert_int_equal(cp, 0x1f600);
}

/* Overlong, surrogate, above U+10FFFF, truncated, a lone continuation byte,
 * a byte UTF-8 never uses. */
static const char *const invalid[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe6\x97",
                                      "\x80",     "\xff",         "\xe0\x80\x80"};

static void invalid_sequences_are_replacement_characters(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    uint32_t cp;
    assert_int_equal(dlc_utf8_next(invalid[i], &cp), 1);
    assert_int_equal(cp, 0xfffd);
  }
}

static void valid_copy_replaces_each_invalid_byte(void **state) {
  (void)state;
  char *s = dlc_utf8_valid("a\xff"
                           "b\xe6\x97"
                           "c \xe6\x97\xa5 \xef\xbf\xbd");
  assert_non_null(s);
  /* \xe6\x97 is two bytes that start no character: two U+FFFD; a real
   * U+FFFD and the valid 3-byte character stay as they are */
  assert_string_equal(s, "a\xef\xbf\xbd"
                         "b\xef\xbf\xbd\xef\xbf\xbd"
                         "c \xe6\x97\xa5 \xef\xbf\xbd");
  free(s);
  s = dlc_utf8_valid("");
  assert_non_null(s);
  assert_string_equal(s, "");
  free(s);
}

static void put_writes_what_next_reads(void **state) {
  (void)state;
  static const uint32_t cps[] = {0x41, 0xb5, 0x7ff, 0x800, 0x65e5, 0xfffd, 0x10000, 0x10ffff};
  for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    dlc_utf8_put(f, cps[i]);
    fclose(f);
    uint32_t back;
    assert_int_equal(dlc_utf8_next(buf, &back), (int)len);
    assert_int_equal(back, cps[i]);
    free(buf);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(decodes_one_to_four_bytes),
      cmocka_unit_test(invalid_sequences_are_replacement_characters),
      cmocka_unit_test(valid_copy_replaces_each_invalid_byte),
      cmocka_unit_test(put_writes_what_next_reads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
