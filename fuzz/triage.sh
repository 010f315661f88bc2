#!/bin/bash
# Replays fuzz findings and says whose bug each is: dlcheck's (its code, or
# a handle it left open) or a library's (HDF5, libfyaml, xxhash), by the
# first stack frame of the sanitizer's report that is neither the
# sanitizer, libFuzzer nor libc.
#
#   fuzz/triage.sh FUZZ_BINARY FINDING...
#
# Prints one line per finding: FILE KIND OWNER WHERE, e.g.
#   crash-3b39... heap-use-after-free library libhdf5_serial.so.103:H5O__msg_iterate_real
# Exit status: 1 if any finding is dlcheck's, else 0.
set -uo pipefail
bin=${1:?usage: fuzz/triage.sh FUZZ_BINARY FINDING...}
shift
status=0
for f in "$@"; do
  out=$("$bin" -runs=1 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 "$f" 2>&1)
  kind=$(printf '%s\n' "$out" | grep -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer|UndefinedBehaviorSanitizer): [A-Za-z-]+|runtime error|dlc_fuzz: .* open' |
         head -1 | sed -E 's/^ERROR: [A-Za-z]+: //; s/^dlc_fuzz: .*/hdf5-handle-left-open/')
  [ -n "$kind" ] || kind=$(printf '%s\n' "$out" | grep -q 'deadly signal' && echo deadly-signal)
  if [ -z "$kind" ]; then
    printf '%s %s %s %s\n' "$(basename "$f")" none - "does not reproduce"
    continue
  fi
  # The first frames that are ours or a library's: the first decides.
  frames=$(printf '%s\n' "$out" | grep -E '^ +#[0-9]+ 0x' |
    grep -vE ' in (__interceptor_|__asan|__sanitizer|__lsan|__ubsan|__interception|fuzzer::|((aligned_|posix_mem|mem)?alloc|malloc|calloc|realloc|free|abort|raise|_start|main) |__libc|__GI_|__mem|__str|operator)' |
    grep -vE 'sysdeps/|\((/lib/x86_64-linux-gnu/)?libc\.so|libstdc\+\+|/fuzz_[a-z_]+\+0x' | head -4)
  where=$(printf '%s\n' "$frames" | head -1)
  func=$(printf '%s\n' "$where" | sed -nE 's/.* in ([^ ]+).*/\1/p')
  lib=$(printf '%s\n' "$where" | grep -oE 'lib(hdf5|fyaml|xxhash)[^ +)]*' | head -1)
  # dlcheck's frames as FUNC(FILE:LINE), innermost first.
  src=$(printf '%s\n' "$frames" | sed -nE 's|.* in ([^ ]+) /[^ ]*/((engine\|checks\|fuzz)/[^ ]+\.c:[0-9]+).*|\1(\2)|p' |
        paste -sd '<' -)
  if [ -n "$lib" ]; then
    printf '%s %s library %s:%s\n' "$(basename "$f")" "$kind" "$lib" "${func:-?}"
  else
    printf '%s %s dlcheck %s\n' "$(basename "$f")" "$kind" "${src:-${func:-?}}"
    status=1
  fi
done
exit $status
