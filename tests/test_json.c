/* store/json.h: jansson with dlcheck's text rules. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "trace/json.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* dlc_json_write_text into a string (caller frees). */
static char *written(const char *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(dlc_json_write_text(f, s, "test"), DL_OK);
  fclose(f);
  return buf;
}

static void text_is_quoted_and_escaped(void **state) {
  (void)state;
  char *j = written("a \"q\" \\ /\n\t\r\b\f\x01\x1f \xe6\x97\xa5");
  /* JSON's short escapes, \u for other control characters, UTF-8 as is */
  assert_string_equal(j, "\"a \\\"q\\\" \\\\ /\\n\\t\\r\\b\\f\\u0001\\u001F \xe6\x97\xa5\"");
  free(j);
}

static void invalid_utf8_becomes_replacement_characters(void **state) {
  (void)state;
  char *j = written("cut \xff\xe6\x97");
  assert_string_equal(j, "\"cut \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  free(j);
  json_t *t = dlc_json_text("x\x80y");
  assert_non_null(t);
  assert_string_equal(json_string_value(t), "x\xef\xbf\xbdy");
  json_decref(t);
}

static void what_is_written_parses_back(void **state) {
  (void)state;
  char *j = written("line\none \"two\" \xe6\x97\xa5");
  json_t *back;
  assert_int_equal(dlc_json_parse(j, "written", &back), DL_OK);
  assert_string_equal(json_string_value(back), "line\none \"two\" \xe6\x97\xa5");
  json_decref(back);
  free(j);
}

static void parse_errors_say_where(void **state) {
  (void)state;
  json_t *j = (json_t *)&j; /* set to NULL on failure */
  assert_int_equal(dlc_json_parse("{\"a\": 1,\n \"b\" 2}", "the file x.json", &j), DL_ERR_FORMAT);
  assert_null(j);
  const char *msg = dl_last_error();
  assert_non_null(strstr(msg, "the file x.json is not valid JSON"));
  assert_non_null(strstr(msg, "line 2, column"));
  assert_int_equal(dlc_json_parse("{\"a\": 1, \"a\": 2}", "dup", &j), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "duplicate"));
  assert_int_equal(dlc_json_parse("\"\\u0000\"", "nul", &j), DL_ERR_FORMAT);
  assert_int_equal(dlc_json_parse("\"\xff\"", "bytes", &j), DL_ERR_FORMAT);
  assert_int_equal(dlc_json_parse("", "empty", &j), DL_ERR_FORMAT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(text_is_quoted_and_escaped),
      cmocka_unit_test(invalid_utf8_becomes_replacement_characters),
      cmocka_unit_test(what_is_written_parses_back),
      cmocka_unit_test(parse_errors_say_where),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
