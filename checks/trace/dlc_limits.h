/* Sizes of the harness's fixed-size names and paths. */
#ifndef DLC_DLC_LIMITS_H
#define DLC_DLC_LIMITS_H

enum { DLC_NAME_MAX = 128, DLC_PATH_MAX = 512 };

#endif
