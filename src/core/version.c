/*
 * version.c - the version string, set by the build from the CMake project version.
 */
#include "ctrain/status.h"

const char *ct_version(void) {
    return CT_VERSION_STRING;
}
