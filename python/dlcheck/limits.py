"""Limits and format constants of the C harness, which the Python package
checks before it writes a trace or a scenario. Written by
tests/test_limits.c (`test_limits --write`) from the C headers; do not edit."""

#: DLC_TRACE_SCHEMA_VERSION, DLC_H5_USERBLOCK, DLC_TRACE_MAGIC
SCHEMA_VERSION = 1
USERBLOCK = 512
MAGIC = b"dlcheck trace 1\n"
#: the longest texts (bytes, NUL excluded): DLC_NAME_MAX - 1, dlc_trace.backend,
#: DLC_ENV_JSON_MAX - 1, dlc_golden_meta.recorded_at and .version,
#: DLC_TOL_TEXT_MAX - 1, dlc_golden_meta.golden_kind
NAME_MAX = 127
BACKEND_MAX = 31
ENV_JSON_MAX = 8191
SHORT_TEXT_MAX = 31
TOL_RULE_MAX = 63
KIND_MAX = 15
#: DL_MAX_DIMS: the rank of the tensors the engine reads
MAX_RANK = 4
#: DLC_MAX_RUNS, DLC_MAX_CHECKS: a scenario's runs and checks
MAX_RUNS = 8
MAX_CHECKS = 16
#: dlc_check_spec.reason and .waived, DLC_MAX_CATALOGUE (a check's IDs)
MAX_REASON = 511
MAX_IDS = 12
