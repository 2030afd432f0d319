#!/usr/bin/env bash
# Installs the build into a fresh temporary prefix and builds programs against it as an outside
# user would, editing nothing that was installed: a small program and examples/mlp_demo.c with
# `pkg-config --cflags --libs ctrain`, and mlp_demo.c again from a CMake project with
# find_package(ctrain) and ctrain::ctrain; the bash and zsh completion scripts and the man page
# are where the shells and man look for them. MPI is loaded on demand: the installed libctrain
# and the programs linked with it need no MPI library to start, and libctrain and the installed
# tool find the installed libctrain_mpi (docs/distributed.md).
# Usage: test-install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name ctrain.pc | head -n 1)
[[ -n "$pc" ]] || { echo "ctrain.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir ctrain)
[[ -f "$libdir/libctrain.so" ]] || { echo "ctrain.pc's libdir $libdir holds no libctrain.so"; exit 1; }
cat > "$prefix/hello.c" <<'C'
#include <ctrain/ctrain.h>
#include <stdio.h>
int main(void) {
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    printf("ctrain %s\n", ct_version());
    char mpi[4096];
    ct_comm_mpi_library(mpi, sizeof mpi);
    printf("MPI: %s\n", mpi);
    ct_ctx_destroy(ctx);
    return 0;
}
C
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$prefix/hello" "$prefix/hello.c" $(pkg-config --cflags --libs ctrain)
out=$(LD_LIBRARY_PATH="$libdir" "$prefix/hello")
echo "$out"
[[ "$out" == "ctrain "* ]]
# no MPI library among what libctrain and the program load at start
if readelf -d "$libdir/libctrain.so" | grep -E 'NEEDED.*mpi'; then
    echo "the installed libctrain.so needs an MPI library"
    exit 1
fi
if LD_LIBRARY_PATH="$libdir" ldd "$prefix/hello" | grep mpi; then
    echo "a program linked with the installed libctrain loads an MPI library at start"
    exit 1
fi
echo "libctrain and a program linked with it load no MPI library at start"
# a build with MPI installed libctrain_mpi beside libctrain, where libctrain and the tool find it
mpi_line=$(grep '^MPI: ' <<<"$out")
if [[ $mpi_line != "MPI: none (built without MPI)" ]]; then
    shown=$libdir/libctrain_mpi.so.0
    [[ -f $shown ]] || { echo "libctrain_mpi.so.0 was not installed in $libdir"; exit 1; }
    lib=$(realpath "$shown")
    for line in "$mpi_line" "$("$prefix/bin/ctrain" --version | grep '^MPI: ')"; do
        from=${line##* (loaded on demand from }
        from=${from%)}
        if [[ $from == "$line" || $(realpath "$from") != "$lib" ]]; then
            echo "expected the MPI communicator loaded from $shown: $line"
            exit 1
        fi
    done
    echo "libctrain and the installed ctrain load $shown on demand"
fi
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$prefix/mlp_demo_pc" "$src/examples/mlp_demo.c" \
    $(pkg-config --cflags --libs ctrain)
echo "examples/mlp_demo.c builds with pkg-config"

mkdir "$prefix/app"
cp "$src/examples/mlp_demo.c" "$prefix/app/"
cat > "$prefix/app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(app LANGUAGES C)
find_package(ctrain 0.1 REQUIRED)
add_executable(mlp_demo mlp_demo.c)
set_target_properties(mlp_demo PROPERTIES C_STANDARD 11)
target_link_libraries(mlp_demo PRIVATE ctrain::ctrain)
CM
cmake -S "$prefix/app" -B "$prefix/app/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/app/build" >/dev/null
[[ -x "$prefix/app/build/mlp_demo" ]] || { echo "find_package(ctrain) built no program"; exit 1; }
echo "examples/mlp_demo.c builds with find_package(ctrain)"
"$prefix/bin/ctrain" --version
for f in share/bash-completion/completions/ctrain share/zsh/vendor-completions/_ctrain \
    share/man/man1/ctrain.1; do
    [[ -s "$prefix/$f" ]] || { echo "$f was not installed"; exit 1; }
done
cmp -s "$prefix/share/man/man1/ctrain.1" <("$prefix/bin/ctrain" man) ||
    { echo "the installed ctrain.1 is not what the installed ctrain prints"; exit 1; }
echo "completion scripts and ctrain.1 installed"
