/*
 * test_golden_schedule.c - every case of fixtures/schedule.bin (tests/golden/gen_schedule.py):
 * the schedule built from the case's own "type;key=value" string must reproduce PyTorch's
 * learning rates step for step to |got - ref| <= 1e-9 + 1e-6 |ref|. Each case is run a second
 * time through a state saved at the midpoint and restored into a fresh schedule, which must give
 * the same bits as the uninterrupted run.
 */
#include "ctrain/ctrain.h"
#include "fixture.h"
#include "harness.h"

#define LR_ATOL   1e-9
#define LR_RTOL   1e-6
#define MAX_OPTS  16
#define MIN_CASES 19

static ct_ctx *ctx;
static gf_file fx;
static double worst_rel;
static char worst_case[64];

/* Splits "type;k=v;k=v" (in place) into the type and options. */
static const char *parse_opts(char *text, ct_option *items, int64_t *count) {
    *count = 0;
    char *save = NULL;
    const char *type = strtok_r(text, ";", &save);
    for (char *kv = strtok_r(NULL, ";", &save); kv && *count < MAX_OPTS;
         kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = '\0';
        items[*count].key = kv;
        items[*count].value = eq + 1;
        (*count)++;
    }
    return type;
}

/* Steps `n` times from the schedule's current state into lr[from..n]. */
static void run(ct_schedule *s, const float *metric, int64_t from, int64_t n, float *lr) {
    for (int64_t t = from; t < n; t++)
        lr[t + 1] = metric ? ct_schedule_step_metric(s, (double)metric[t]) : ct_schedule_step(s);
}

static void check_case(const char *name) {
    char key[128], text[256];
    snprintf(key, sizeof key, "%s/opts", name);
    const gf_array *o = gf_get(&fx, key);
    snprintf(key, sizeof key, "%s/base_lr", name);
    const gf_array *b = gf_get(&fx, key);
    snprintf(key, sizeof key, "%s/lr", name);
    const gf_array *r = gf_get(&fx, key);
    snprintf(key, sizeof key, "%s/metric", name);
    const gf_array *m = gf_has(&fx, key) ? gf_get(&fx, key) : NULL;
    CT_CHECK(o && b && r && o->numel < (int64_t)sizeof text);
    if (!o || !b || !r || o->numel >= (int64_t)sizeof text) return;
    for (int64_t i = 0; i < o->numel; i++)
        text[i] = (char)((const int64_t *)o->data)[i];
    text[o->numel] = '\0';
    ct_option items[MAX_OPTS];
    ct_options opts = {items, 0, name};
    const char *type = parse_opts(text, items, &opts.count);
    float base = *(const float *)b->data;
    const float *ref = r->data, *metric = m ? m->data : NULL;
    int64_t n = r->numel - 1;
    CT_CHECK(!m || m->numel == n);

    ct_schedule *s = NULL;
    ct_status st = ct_schedule_create(ctx, type, &opts, base, &s);
    CT_CHECK_MSG(st == CT_OK, "%s: %s", name, ct_last_error(ctx));
    if (st != CT_OK) return;
    CT_CHECK(ct_schedule_needs_metric(s) == (metric != NULL));
    float *lr = calloc((size_t)(2 * (n + 1)), sizeof *lr), *lr2 = lr + n + 1;
    if (!lr) abort();
    lr[0] = ct_schedule_lr(s);
    run(s, metric, 0, n, lr);
    CT_CHECK_INT(ct_schedule_steps(s), n);
    CT_CHECK_ARRAYS(name, lr, ref, n + 1, LR_ATOL, LR_RTOL);
    for (int64_t i = 0; i <= n; i++) {
        double rel = fabs((double)lr[i] - (double)ref[i]) / fmax(fabs((double)ref[i]), 1e-30);
        if (ref[i] != 0.0f && rel > worst_rel) {
            worst_rel = rel;
            snprintf(worst_case, sizeof worst_case, "%s[%lld]", name, (long long)i);
        }
    }

    /* resume from the midpoint: rerun to n/2, save, restore into a fresh schedule, finish */
    ct_schedule *a = NULL, *c = NULL;
    CT_CHECK(ct_schedule_create(ctx, type, &opts, base, &a) == CT_OK);
    CT_CHECK(ct_schedule_create(ctx, type, &opts, base, &c) == CT_OK);
    if (a && c) {
        int64_t half = n / 2;
        lr2[0] = ct_schedule_lr(a);
        run(a, metric, 0, half, lr2);
        ct_schedule_state state;
        ct_schedule_get_state(a, &state);
        CT_CHECK(ct_schedule_set_state(c, &state) == CT_OK);
        CT_CHECK(ct_schedule_lr(c) == lr2[half]);
        run(c, metric, half, n, lr2);
        CT_CHECK_MSG(memcmp(lr, lr2, (size_t)(n + 1) * sizeof *lr) == 0,
                     "%s: resumed run differs from the uninterrupted one", name);
    }
    ct_schedule_destroy(a);
    ct_schedule_destroy(c);
    free(lr);
    ct_schedule_destroy(s);
}

static void schedule_should_match_pytorch(void) {
    int cases = 0;
    for (uint32_t i = 0; i < fx.count; i++) {
        const char *name = fx.arrays[i].name;
        size_t len = strlen(name);
        if (len < 6 || strcmp(name + len - 5, "/opts") != 0) continue;
        char c[64];
        snprintf(c, sizeof c, "%.*s", (int)(len - 5), name);
        check_case(c);
        cases++;
    }
    CT_CHECK_MSG(cases >= MIN_CASES, "only %d cases in schedule.bin; %s", cases, GF_REGEN);
    printf("%d cases; worst relative error %.3g at %s\n", cases, worst_rel, worst_case);
}

int main(void) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ct_ctx_create(&p, &ctx) != CT_OK) return 1;
    if (!gf_load(&fx, "schedule.bin")) {
        fprintf(stderr, "regenerate with /usr/bin/python3 tests/golden/gen_schedule.py\n");
        ct_ctx_destroy(ctx);
        return 1;
    }
    CT_RUN(schedule_should_match_pytorch);
    gf_free(&fx);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
