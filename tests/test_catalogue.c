/* The catalogue: stable, unique IDs, and every entry complete (reports
 * quote its mistake, effect, fix and where it is caught). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "judge/catalogue.h"

#include <ctype.h>
#include <string.h>

static void every_entry_is_complete(void **state) {
  (void)state;
  assert_true(dlc_catalogue_count() >= 38);
  for (int i = 0; i < dlc_catalogue_count(); i++) {
    const dlc_pitfall_entry *p = dlc_catalogue_at(i);
    assert_non_null(p);
    /* A capital letter and digits: the form scenario files refuse otherwise. */
    assert_true(isupper((unsigned char)p->id[0]) && isdigit((unsigned char)p->id[1]));
    const char *texts[] = {p->mistake, p->effect, p->fix, p->caught};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++)
      if (!texts[k] || strlen(texts[k]) < 8) fail_msg("%s: text %zu is missing or empty", p->id, k);
  }
}

static void ids_are_unique_and_found(void **state) {
  (void)state;
  for (int i = 0; i < dlc_catalogue_count(); i++) {
    const dlc_pitfall_entry *p = dlc_catalogue_at(i);
    assert_ptr_equal(dlc_catalogue_find(p->id), p);
    for (int j = 0; j < i; j++) assert_string_not_equal(dlc_catalogue_at(j)->id, p->id);
  }
  assert_null(dlc_catalogue_find("Z9"));
  assert_null(dlc_catalogue_at(-1));
  assert_null(dlc_catalogue_at(dlc_catalogue_count()));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_entry_is_complete),
      cmocka_unit_test(ids_are_unique_and_found),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
