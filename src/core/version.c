/*
 * version.c - the version string, set by the build from the CMake project version.
 */
#include "ctrain/ctrain.h"

const char *ct_version(void) {
    return CT_VERSION_STRING;
}
