/* What yaml_doc.c (loading) and yaml_util.c (values) share; not for the
 * schema's users, who include yaml_util.h. */
#ifndef DLC_YAML_INTERNAL_H
#define DLC_YAML_INTERNAL_H

#include "scenario/yaml_util.h"

#include <stdbool.h>
#include <stddef.h>

struct fy_node;

/* n's position (a collection's is its first entry's), or fallback. */
yu_pos yu_pos_or(struct fy_node *n, yu_pos fallback);

/* dst = base + sep + tail (no sep when base is empty), YU_PATH_MAX bytes;
 * paths are for messages only: one too long to hold ends with "...". */
void yu_join_path(char *dst, const char *base, const char *sep, const char *tail);

/* Whether n is an alias (*name), which the loader refuses. */
bool yu_is_alias(struct fy_node *n);

/* The byte offset of the first character of t[0..len) that must not reach a
 * report, a terminal or a file name (see yaml_util.c), or -1; *cp gets its
 * code point. */
long yu_find_control(const char *t, size_t len, const char *allow, unsigned *cp);

#endif
