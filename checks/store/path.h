/* Building file paths without silent truncation. */
#ifndef DLC_PATH_H
#define DLC_PATH_H

#include "core/status.h"

#include <stddef.h>

/* printf into buf; DL_ERR_INVALID ("path too long: ...") if it does not fit. */
dl_status dlc_path(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* buf := path if it is absolute, else root/path. */
dl_status dlc_path_under(char *buf, size_t len, const char *root, const char *path);
/* Creates every missing directory above the file `path` (mkdir -p of its
 * dirname). */
dl_status dlc_make_parent_dirs(const char *path);
/* The same for a file `path` below the folder `base` (path starts with
 * "BASE/"): base is created as above, every folder between base and the
 * file must be a real folder, never a symbolic link (DL_ERR_IO otherwise),
 * so that nothing is written outside base. */
dl_status dlc_make_dirs_below(const char *base, const char *path);

#endif
