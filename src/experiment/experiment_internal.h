/*
 * experiment_internal.h - what schema.c shares with experiment.c: the table lookup and the
 * scalar readers that both use, so that a value is parsed the same way when it is checked and
 * when it is used.
 */
#ifndef CT_EXPERIMENT_INTERNAL_H
#define CT_EXPERIMENT_INTERNAL_H

#include "ctrain/experiment.h"

const ct_key_def *ctx_schema_find(const char *path);
void ctx_where(const ct_cfg_node *n, char *buf, size_t size);
int ctx_parse_bool(const char *v); /* 1, 0, or -1 when not a bool */
bool ctx_parse_int(const char *v, int64_t *out);
bool ctx_parse_float(const char *v, double *out);

#endif /* CT_EXPERIMENT_INTERNAL_H */
