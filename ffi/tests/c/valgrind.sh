#!/usr/bin/env bash
# Builds the C test of the C ABI (ffi/tests/c/tollgate_test.c) against the debug cdylib and runs it
# under valgrind: any memory error or definite leak fails. Run from anywhere:
#
#   bash ffi/tests/c/valgrind.sh
#
# Honours CARGO_TARGET_DIR (the library and the test binary go under it). Needs cc and valgrind.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"

for tool in cc valgrind cargo; do
    command -v "$tool" >/dev/null || { echo "valgrind.sh: $tool not found" >&2; exit 1; }
done

cargo build -p tollgate-ffi-lib
target="$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
libdir="$target/debug"
out="$target/tmp/tollgate_test_valgrind"
mkdir -p "$target/tmp"

cc -std=c11 -g -O0 -Wall -Wextra -Werror -pedantic -Iffi/include ffi/tests/c/tollgate_test.c \
    -L"$libdir" -ltollgate -Wl,-rpath,"$libdir" -lpthread -o "$out"

echo "+ valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $out"
LD_LIBRARY_PATH="$libdir" \
    valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite "$out"
