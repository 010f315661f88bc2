/* Error codes and messages of the engine.
 *
 * Every public function that can fail returns a dl_status and, on failure,
 * leaves a message (what failed, on which tensor/file/layer, what to do) in
 * a thread-local buffer read with dl_last_error(). Libraries never exit(). */
#ifndef DL_STATUS_H
#define DL_STATUS_H

typedef enum dl_status {
  DL_OK = 0,
  DL_ERR_INVALID,     /* bad argument or input: shape, range, label, option */
  DL_ERR_NOMEM,       /* an allocation failed */
  DL_ERR_IO,          /* a file is missing or cannot be read/written */
  DL_ERR_FORMAT,      /* a file was read but its content is malformed */
  DL_ERR_UNSUPPORTED, /* valid request this build or backend cannot do */
  DL_ERR_NUMERIC,     /* a non-finite value where one is not allowed */
  DL_ERR_INTERNAL     /* a broken invariant: a bug in dlcheck */
} dl_status;

/* Sets the message (printf format) and returns s, so that failures read
 * `return dl_fail(DL_ERR_INVALID, "linear %d: ...", i);`. */
dl_status dl_fail(dl_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends context ("layer 3 (conv2d): ") to the current message, so that a
 * caller can say where a callee's failure happened. Returns s. */
dl_status dl_fail_context(dl_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *dl_last_error(void);
void dl_clear_error(void);
const char *dl_status_name(dl_status s);

/* Propagate a failure to the caller. */
#define DL_TRY(expr)                          \
  do {                                        \
    dl_status dl_try_s_ = (expr);             \
    if (dl_try_s_ != DL_OK) return dl_try_s_; \
  } while (0)

#endif
