#!/usr/bin/env bash
# Fails when any C source or header differs from what clang-format (config: .clang-format) makes.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null || find include src tools tests examples bench -name '*.[ch]')
[[ ${#files[@]} -eq 0 ]] && exit 0
clang-format --dry-run -Werror "${files[@]}"
echo "format: ${#files[@]} files clean"
