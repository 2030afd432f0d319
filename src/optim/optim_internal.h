/*
 * optim_internal.h - what the optimizer module gives the modules above it beyond its API: the
 * names configurations give the optimizer kinds (optim.c holds the table, one name per
 * ct_optim_kind). The names are static strings. Not installed; not part of the API.
 */
#ifndef CT_OPTIM_INTERNAL_H
#define CT_OPTIM_INTERNAL_H

#include <stdbool.h>

#include "core/core_internal.h"
#include "ctrain/optim.h"

/* A kind's name as configurations write it (PyTorch's: "sgd", "adamw", ...); NULL for a value
 * that is no kind. */
CT_INTERNAL const char *ct_optim_kind_name(ct_optim_kind kind);
/* The kind called `name` into *out; false (and *out unchanged) when no kind is. */
CT_INTERNAL bool ct_optim_kind_from_name(const char *name, ct_optim_kind *out);

#endif /* CT_OPTIM_INTERNAL_H */
