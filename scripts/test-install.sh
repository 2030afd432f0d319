#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a small program against it with
# pkg-config, as an outside user would. Usage: test-install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name ctrain.pc | head -n 1)
[[ -n "$pc" ]] || { echo "ctrain.pc was not installed"; exit 1; }
sed -i "s|^prefix=.*|prefix=$prefix|" "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
cat > "$prefix/hello.c" <<'C'
#include <ctrain/ctrain.h>
#include <stdio.h>
int main(void) {
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    printf("ctrain %s\n", ct_version());
    ct_ctx_destroy(ctx);
    return 0;
}
C
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$prefix/hello" "$prefix/hello.c" $(pkg-config --cflags --libs ctrain)
out=$(LD_LIBRARY_PATH="$(dirname "$(find "$prefix" -name 'libctrain.so' | head -n 1)")" "$prefix/hello")
echo "$out"
[[ "$out" == "ctrain "* ]]
"$prefix/bin/ctrain" --version
