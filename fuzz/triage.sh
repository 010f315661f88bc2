#!/bin/bash
# Replays fuzz findings and says whose bug each is, by the first stack
# frame of the report that is neither the sanitizer, libFuzzer nor libc:
#   dlcheck    that frame is dlcheck's code, or a handle was left open;
#   library    it is in HDF5, libfyaml, jansson or xxhash (a crash, leak or runaway
#              allocation inside the library, dlcheck calling it correctly);
#   undecided  a timeout whose innermost frame is in a library: the library
#              may be slow, or dlcheck may have asked it for too much (a
#              huge dataset); look at the dlcheck frames.
#
#   fuzz/triage.sh FUZZ_BINARY FINDING...
#
# Prints one line per finding: NAME KIND OWNER LIBRARY-FRAME DLCHECK-FRAMES
# ("-" when none), e.g.
#   crash-3b39... SEGV library libhdf5_serial.so.103:H5MM_xfree list_group(engine/io/state_dict.c:364)
# Exit status: 1 if any finding is dlcheck's or undecided, else 0.
set -uo pipefail
bin=${1:?usage: fuzz/triage.sh FUZZ_BINARY FINDING...}
shift
status=0
for f in "$@"; do
  # Fatal reports unwind fully (fast_unwind_on_fatal=0: HDF5 has no frame
  # pointers), mallocs quickly: a timeout then lands in the code that is
  # slow, not in the unwinder. A leak is replayed with full unwinding at
  # malloc, as fuzzing ran it, so that HDF5's suppressed leaks stay apart.
  replay() { # FAST_UNWIND_ON_MALLOC [RSS_LIMIT MALLOC_LIMIT]
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_fatal=0:fast_unwind_on_malloc=$1" \
      "$bin" -runs=1 -timeout=10 -rss_limit_mb="${2:-2048}" -malloc_limit_mb="${3:-2048}" "$f" 2>&1
  }
  classify() {
    printf '%s\n' "$out" |
      grep -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer|UndefinedBehaviorSanitizer): [A-Za-z-]+|runtime error|dlc_fuzz: .* open' |
      head -1 | sed -E 's/^ERROR: [A-Za-z]+: //; s/^dlc_fuzz: .*/hdf5-handle-left-open/'
  }
  out=$(replay 1)
  kind=$(classify)
  if [ "$kind" = detected ]; then
    out=$(replay 0)
    kind=$(classify)
  fi
  # A timeout or a process over its memory has no telling stack: replayed
  # with single allocations limited to 256 MB, the one that asks for too
  # much (dlcheck sizing a tensor from a file, or HDF5) names itself.
  slow=
  if [ "$kind" = timeout ] || { [ "$kind" = out-of-memory ] && ! printf '%s' "$out" | grep -q 'malloc('; }; then
    slow=$kind
    big=$(replay 1 0 256)
    if printf '%s' "$big" | grep -q 'out-of-memory (malloc('; then
      out=$big
      kind="$slow/huge-malloc"
      slow=
    fi
  fi
  [ -n "$kind" ] || kind=$(printf '%s\n' "$out" | grep -q 'deadly signal' && echo deadly-signal)
  if [ -z "$kind" ]; then
    printf '%s %s %s %s %s\n' "$(basename "$f")" none - - "does-not-reproduce"
    continue
  fi
  # The frames that are ours or a library's, innermost first.
  frames=$(printf '%s\n' "$out" | grep -E '^ +#[0-9]+ 0x' |
    grep -vE ' in (__interceptor_|__asan|__sanitizer|__lsan|__ubsan|__interception|fuzzer::|((aligned_|posix_mem|mem)?alloc|malloc|calloc|realloc|free|abort|raise|_start|main) |__libc|__GI_|__mem|__str|operator)' |
    grep -vE 'sysdeps/|\((/lib/x86_64-linux-gnu/)?libc\.so|libstdc\+\+|/fuzz_[a-z_]+\+0x' | head -16)
  first=$(printf '%s\n' "$frames" | head -1)
  lib=$(printf '%s\n' "$first" | grep -oE 'lib(hdf5|fyaml|jansson|xxhash)[^ +)]*' | head -1)
  [ -z "$lib" ] || lib="$lib:$(printf '%s\n' "$first" | sed -nE 's/.* in ([^ ]+) .*/\1/p')"
  # dlcheck's frames as FUNC(FILE:LINE), innermost first.
  src=$(printf '%s\n' "$frames" |
        sed -nE 's|.* in ([^ ]+) /[^ ]*/((engine\|checks\|fuzz)/[^ ]+\.c:[0-9]+).*|\1(\2)|p' |
        head -4 | paste -sd '<' -)
  if [ "$kind" = hdf5-handle-left-open ] || [ -z "$lib" ]; then
    owner=dlcheck
  elif [ -n "$slow" ]; then
    owner=undecided
  else
    owner=library
  fi
  printf '%s %s %s %s %s\n' "$(basename "$f")" "$kind" "$owner" "${lib:--}" "${src:--}"
  [ "$owner" = library ] || status=1
done
exit $status
