/*
 * profile.c - the step profile of a fit (trainer.profile) as the experiment shows it: a table
 * in the log (each phase's total, share of the wall time and median per step; with layers,
 * each layer's forward and backward time) and RUN/profile.json, written by the process that
 * writes the run (rank 0) as a temporary file renamed into place. Each rank measures its own
 * steps; the file holds rank 0's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "experiment_internal.h"

static const char *mode_name(ct_profile_mode m) {
    return m == CT_PROFILE_MODE_LAYERS ? "layers" : "steps";
}

static double share(const ct_trainer_profile_info *p, double seconds) {
    return p->wall_seconds > 0.0 ? 100.0 * seconds / p->wall_seconds : 0.0;
}

/* The table, a line per phase and per layer, into the log. */
static void log_table(ct_experiment *e, const ct_trainer_profile_info *p) {
    ct_log(e->ctx, CT_LOG_INFO,
           "profile: %lld steps in %.3f s; medians per step over the last %lld steps",
           (long long)p->steps, p->wall_seconds, (long long)p->median_steps);
    ct_log(e->ctx, CT_LOG_INFO, "  %-12s %12s %7s %14s", "phase", "total s", "share",
           "median ms/step");
    for (int k = 0; k < CT_PROFILE_PHASE_COUNT; k++)
        ct_log(e->ctx, CT_LOG_INFO, "  %-12s %12.4f %6.1f%% %14.4f",
               ct_profile_phase_name((ct_profile_phase)k), p->total[k], share(p, p->total[k]),
               p->median[k] * 1e3);
    ct_log(e->ctx, CT_LOG_INFO, "  %-12s %12.4f %6.1f%% %14.4f", "step", p->wall_seconds, 100.0,
           p->median_wall * 1e3);
    if (p->n_layers == 0) return;
    ct_log(e->ctx, CT_LOG_INFO, "  %-20s %-12s %12s %12s", "layer", "type", "forward ms",
           "backward ms");
    for (int64_t i = 0; i < p->n_layers; i++)
        ct_log(e->ctx, CT_LOG_INFO, "  %-20s %-12s %12.3f %12.3f", p->layers[i].name,
               p->layers[i].type, p->layers[i].forward_seconds * 1e3,
               p->layers[i].backward_seconds * 1e3);
}

/* s as a JSON string's contents (names are the configuration's: quotes and backslashes, and
 * control characters dropped). */
static void put_json_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') (void)fputc('\\', f);
        if ((unsigned char)*s >= 0x20) (void)fputc(*s, f);
    }
}

static void put_json(FILE *f, const ct_trainer_profile_info *p, int64_t world) {
    (void)fprintf(f,
                  "{\n  \"mode\": \"%s\",\n  \"rank\": 0,\n  \"world_size\": %lld,\n"
                  "  \"steps\": %lld,\n  \"median_steps\": %lld,\n  \"wall_seconds\": %.9g,\n"
                  "  \"median_step_seconds\": %.9g,\n  \"phases\": {",
                  mode_name(p->mode), (long long)world, (long long)p->steps,
                  (long long)p->median_steps, p->wall_seconds, p->median_wall);
    for (int k = 0; k < CT_PROFILE_PHASE_COUNT; k++)
        (void)fprintf(f,
                      "%s\n    \"%s\": {\"total_seconds\": %.9g, \"share\": %.6g, "
                      "\"median_seconds\": %.9g}",
                      k ? "," : "", ct_profile_phase_name((ct_profile_phase)k), p->total[k],
                      share(p, p->total[k]) / 100.0, p->median[k]);
    (void)fprintf(f, "\n  }");
    if (p->mode == CT_PROFILE_MODE_LAYERS) {
        (void)fprintf(f, ",\n  \"layers\": [");
        for (int64_t i = 0; i < p->n_layers; i++) {
            (void)fprintf(f, "%s\n    {\"name\": \"", i ? "," : "");
            put_json_text(f, p->layers[i].name);
            (void)fprintf(f, "\", \"type\": \"%s", p->layers[i].type);
            (void)fprintf(f, "\", \"forward_seconds\": %.9g, \"backward_seconds\": %.9g}",
                          p->layers[i].forward_seconds, p->layers[i].backward_seconds);
        }
        (void)fprintf(f, "\n  ]");
    }
    (void)fprintf(f, "\n}\n");
}

static ct_status write_json(ct_experiment *e, const ct_trainer_profile_info *p) {
    char path[1100], tmp[1110];
    (void)snprintf(path, sizeof path, "%s/profile.json", e->out_dir);
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    put_json(f, p, e->p.comm ? ct_comm_world_size(e->p.comm) : 1);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        ct_status s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        (void)remove(tmp);
        return s;
    }
    return CT_OK;
}

ct_status ct_exp_show_profile(ct_experiment *e, bool writes) {
    ct_trainer_profile_info p;
    CT_TRY(ct_trainer_profile(e->trainer, &p));
    if (p.mode == CT_PROFILE_MODE_OFF) return CT_OK;
    log_table(e, &p);
    /* a view of the run, as report.html is: a failure to write it is a warning */
    if (writes && write_json(e, &p) != CT_OK)
        ct_log(e->ctx, CT_LOG_WARN, "profile: %s", ct_last_error(e->ctx));
    return CT_OK;
}
