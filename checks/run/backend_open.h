/* Opening the compute backend a run asks for (config.h's backend section,
 * engine/backend/backend.h): NULL for the CPU, the CUDA backend where this build
 * has one and the machine a GPU. */
#ifndef DLC_BACKEND_OPEN_H
#define DLC_BACKEND_OPEN_H

#include "backend/backend.h"
#include "scenario/config.h"

#include <stdbool.h>
#include <stddef.h>

/* The device a run computes on: its own, else the command line's. */
dlc_device dlc_run_device(const dlc_run_config *c, dlc_device cli_default);
const char *dlc_device_name(dlc_device d); /* "cpu", "cuda" ("cpu" for default) */
/* "cpu" -> DLC_DEVICE_CPU, "cuda" -> DLC_DEVICE_CUDA; else DL_ERR_INVALID. */
dl_status dlc_device_parse(const char *name, dlc_device *out);

/* Can runs on `d` run here? If not, reason says why ("no CUDA device: ...",
 * "this build has no CUDA backend: ..."). The CPU always can. */
bool dlc_device_available(dlc_device d, char *reason, size_t len);

/* *out = NULL for the CPU; for CUDA a backend on GPU `rank` modulo the
 * GPUs present, in the configuration's math and convolution modes.
 * DL_ERR_UNSUPPORTED where dlc_device_available says no. */
dl_status dlc_backend_open(const dlc_backend_config *c, dlc_device d, int rank, dl_backend **out);
void dlc_backend_close(dl_backend *b); /* NULL allowed */
/* What the run computed on, for the trace's "backend" note: "cpu (dl_sgemm
 * ...)" or the CUDA backend's device, libraries, modes and algorithms. */
const char *dlc_backend_describe(const dl_backend *b, char *buf, size_t len);

#endif
