/* The CPU GEMM's declarations are public: engine/sgemm.h. This name stays
 * for the engine and test files that still include it (engine/backend.c,
 * tests/host_backend.h, tests/inject_backend.h); new code includes
 * "sgemm.h". */
#ifndef DL_CPU_GEMM_H
#define DL_CPU_GEMM_H

#include "sgemm.h"

#endif
