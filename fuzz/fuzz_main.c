/* A libFuzzer target: fuzz/CMakeLists.txt builds this file once per entry
 * point of targets.h, with DLC_FUZZ_ENTRY naming it. */
#include "targets.h"

#include <stdlib.h>

#ifndef DLC_FUZZ_ENTRY
#error "build with -DDLC_FUZZ_ENTRY=dlc_fuzz_<kind>"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (dlc_fuzz_init() != 0) abort(); /* no folder: every input would be skipped */
  atexit(dlc_fuzz_cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return DLC_FUZZ_ENTRY(data, size); }
