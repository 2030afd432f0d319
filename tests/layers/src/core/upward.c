/*
 * upward.c - a fixture for the test layers_should_name_an_upward_include (tests/CMakeLists.txt),
 * never compiled: a file of core that includes a public header of train and an internal header
 * of nn, both above it. cmake/check-layers.cmake must name both lines.
 */
#include "core/core_internal.h"
#include "ctrain/trainer.h"
#include "nn/nn_internal.h"
