#!/usr/bin/env bash
# The C sources' formatting, against .clang-format:
#   ci/format.sh              check: exit 0 when every file is formatted;
#                             1 (listing the files and how many lines of
#                             each would change) when not
#   ci/format.sh --fix        rewrite the files that are not formatted
#   ci/format.sh [--fix] FILE...   only these files
# The files: git's tracked and untracked (not ignored) *.c and *.h, less
# EXCLUDE (generated or vendored code; none today). Uses $CLANG_FORMAT,
# else clang-format: version 14,
# Debian's `clang-format` package, which .clang-format was measured with;
# other versions wrap some lines differently, so the check says so.
# Exit 2: no clang-format, or a file it cannot read.
set -euo pipefail
cd "$(dirname "$0")/.."

EXCLUDE='^(build|third_party|vendor)/'
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}

fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; shift; fi
case "${1:-}" in -*) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 2 ;; esac

if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "format.sh: $CLANG_FORMAT not found (apt-get install clang-format)" >&2
  exit 2
fi
version=$("$CLANG_FORMAT" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "note: $CLANG_FORMAT is version ${version:-unknown}; .clang-format was made for 14," \
       "so some lines may wrap differently" >&2
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  # untracked files too (not ignored): a new file is checked before it is added
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h' | grep -Ev "$EXCLUDE")
fi

bad=0 lines=0 stuck=()
for f in "${files[@]}"; do
  if "$CLANG_FORMAT" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then continue; fi
  out=$("$CLANG_FORMAT" --style=file "$f") || { echo "format.sh: cannot format $f" >&2; exit 2; }
  n=$(diff -U0 "$f" - <<<"$out" | grep -c '^-[^-]' || true)
  bad=$((bad + 1)) lines=$((lines + n))
  if [ "$fix" = 1 ]; then
    "$CLANG_FORMAT" --style=file -i "$f"
    echo "formatted $f ($n lines)"
    # clang-format does not always reach a fixed point (macros it cannot
    # parse, X-macro tables): such code wants /* clang-format off */ ... on.
    "$CLANG_FORMAT" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || stuck+=("$f")
  else
    echo "$f: $n lines to reformat"
  fi
done

if [ "$bad" = 0 ]; then
  echo "all ${#files[@]} files formatted as .clang-format says"
elif [ "$fix" = 1 ]; then
  echo "reformatted $bad of ${#files[@]} files ($lines lines)"
  if [ ${#stuck[@]} -gt 0 ]; then
    echo "still not formatted after one pass (mark the code /* clang-format off */ ..." \
         "/* clang-format on */): ${stuck[*]}"
    exit 1
  fi
else
  echo "$bad of ${#files[@]} files need formatting ($lines lines): ci/format.sh --fix," \
       "or see one with: $CLANG_FORMAT --style=file FILE | diff FILE -"
  exit 1
fi
