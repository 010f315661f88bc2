/* E1-E3 for the PyTorch that recorded a trace: the team's own wheel against
 * the machine it ran on, read from the fingerprint python/dlcheck's
 * recorder writes (docs/trace-format.md) and decided by the engine's
 * backend/cuda_env.h, so that no GPU is needed to judge it.
 *
 *   E1  torch_cuda (the runtime the wheel bundles) against cuda_driver
 *   E2  torch_arch_list (sm_XY: SASS, compute_XY: PTX) against each GPU
 *       of torch_gpus ("0: NAME (sm_90); 1: ...")
 *   E3  cuDNN and NCCL as torch was built with them (torch_cudnn_built,
 *       torch_nccl) against those it loaded (torch_cudnn, torch_nccl_loaded)
 */
#ifndef DLC_ENV_TORCH_H
#define DLC_ENV_TORCH_H

#include "backend/cuda_env.h"
#include "core/status.h"

#include <stdbool.h>

/* out[0..2] := E1-E3 of the PyTorch process whose fingerprint is `json`;
 * *found is false (out untouched) when json has no torch_cuda key, as a
 * fingerprint of the C engine has not. DL_ERR_FORMAT when json is no
 * fingerprint or a value cannot be read (the message names the key). */
dl_status dlc_env_torch_checks(const char *json, dl_cuda_check out[3], bool *found);

#endif
