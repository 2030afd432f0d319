/*
 * verify_compare.c - the comparison of `ctrain verify-resume`: every checkpoint file of the
 * straight run against the interrupted run's byte for byte, and metrics.jsonl record by record
 * with the wall-clock values left out. Each difference is charged to the segment of steps the
 * interrupted run made when it wrote it (between two resumes), so the table can say which
 * resume went wrong; each segment keeps its first difference.
 *
 * Ownership: everything read is freed before the function returns.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define CMP_PATH 4200

/* The values of a record that are wall-clock, not training: left out of the comparison. */
static bool wall_clock(const char *key) {
    return strcmp(key, "time") == 0 || strcmp(key, "samples_per_sec") == 0 ||
           strcmp(key, "comm_ms_per_step") == 0 || strcmp(key, "train/average_ms") == 0;
}

/* Charges a difference at `step` to its segment (the last for INT64_MAX), keeping the first
 * of checkpoint files and the first of records. */
static void charge(verify_segment *seg, int n, int64_t step, bool record, const char *what) {
    int i = 0;
    while (i < n - 1 && step > seg[i].to)
        i++;
    char *first = record ? seg[i].record : seg[i].file;
    if (!first[0]) (void)snprintf(first, sizeof seg[i].file, "%.390s", what);
    seg[i].differs = true;
}

/* The first byte at which two files differ: -1 when equal, -2 when one cannot be read. */
static long long first_difference(const char *a, const char *b) {
    enum { CHUNK = 65536 };
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    unsigned char *ba = malloc(2 * CHUNK), *bb = ba + CHUNK;
    long long at = fa && fb && ba ? -1 : -2;
    size_t off = 0;
    while (at == -1) {
        size_t na = fread(ba, 1, CHUNK, fa), nb = fread(bb, 1, CHUNK, fb);
        if (ferror(fa) || ferror(fb)) { /* a failed read is no end of file: no verdict */
            at = -2;
            break;
        }
        size_t n = na < nb ? na : nb, i = 0;
        while (i < n && ba[i] == bb[i])
            i++;
        if (i < n || na != nb) at = (long long)(off + i);
        if (na == 0 || na != nb) break;
        off += na;
    }
    free(ba);
    if (fa) (void)fclose(fa);
    if (fb) (void)fclose(fb);
    return at;
}

/* The names in a directory, sorted; *n of them (0 for a missing directory). */
static struct dirent **names(const char *dir, int *n) {
    struct dirent **list = NULL;
    *n = scandir(dir, &list, NULL, alphasort);
    if (*n < 0) *n = 0;
    return list;
}

static void free_names(struct dirent **list, int n) {
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* dir/name into buf: false when it does not fit. */
static bool join(char *buf, size_t size, const char *dir, const char *name) {
    int w = snprintf(buf, size, "%s/%s", dir, name);
    return w >= 0 && (size_t)w < size;
}

static bool is_dir(const char *dir, const char *name) {
    char path[CMP_PATH];
    struct stat st;
    return join(path, sizeof path, dir, name) && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The step a checkpoints/ entry belongs to: step-N's N, the pointers' the last. */
static int64_t entry_step(const char *name) {
    long long step;
    return sscanf(name, "step-%lld", &step) == 1 ? step : INT64_MAX;
}

/* Compares the entries REL of both runs (a checkpoint directory's files, or checkpoints/),
 * recursing into directories, charging differences to step's segment. */
static void compare_tree(const char *a_root,
                         const char *b_root,
                         const char *rel,
                         int64_t step,
                         verify_segment *seg,
                         int n) {
    char a[CMP_PATH], b[CMP_PATH], what[CMP_PATH + 64];
    if (!join(a, sizeof a, a_root, rel) || !join(b, sizeof b, b_root, rel)) return;
    int na, nb;
    struct dirent **la = names(a, &na), **lb = names(b, &nb);
    for (int i = 0, j = 0; i < na || j < nb;) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(la[i]->d_name, lb[j]->d_name);
        const char *name = c <= 0 ? la[i]->d_name : lb[j]->d_name;
        int64_t at = step == INT64_MAX && !strcmp(rel, "checkpoints") ? entry_step(name) : step;
        char sub[CMP_PATH], pa[CMP_PATH], pb[CMP_PATH];
        bool fits = join(sub, sizeof sub, rel, name) && join(pa, sizeof pa, a_root, sub) &&
                    join(pb, sizeof pb, b_root, sub);
        if (name[0] == '.' || !fits) {
        } else if (c != 0) {
            (void)snprintf(what, sizeof what, "%s: only in the %s run", sub,
                           c < 0 ? "straight" : "interrupted");
            charge(seg, n, at, false, what);
        } else if (is_dir(a, name)) {
            compare_tree(a_root, b_root, sub, at, seg, n);
        } else {
            long long off = first_difference(pa, pb);
            if (off == -2) (void)snprintf(what, sizeof what, "%s: cannot be read", sub);
            if (off >= 0) (void)snprintf(what, sizeof what, "%s: byte %lld", sub, off);
            if (off != -1) charge(seg, n, at, false, what);
        }
        i += c <= 0;
        j += c >= 0;
    }
    free_names(la, na);
    free_names(lb, nb);
}

/* The first difference between two records, into what: false when they are the same. */
static bool records_differ(json_t *a, json_t *b, char *what, size_t size) {
    const char *key;
    json_t *v;
    json_object_foreach(a, key, v) {
        if (wall_clock(key)) continue;
        json_t *w = json_object_get(b, key);
        if (w && json_equal(v, w)) continue;
        char *ta = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        char *tb = w ? json_dumps(w, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17)) : NULL;
        (void)snprintf(what, size, "key '%s': %s, interrupted %s", key, ta ? ta : "?",
                       tb ? tb : "missing");
        free(ta);
        free(tb);
        return true;
    }
    json_object_foreach(b, key, v) {
        if (!wall_clock(key) && !json_object_get(a, key)) {
            (void)snprintf(what, size, "key '%s': only in the interrupted run", key);
            return true;
        }
    }
    return false;
}

/* One run's metrics.jsonl, read a record at a time: the current record (NULL at the end or for
 * a line that is not a JSON object), its number from 1, its step and its kind ("train", or the
 * split an evaluation record is of). */
typedef struct records {
    FILE *f;
    char *line;
    size_t cap;
    json_t *rec;
    long long no;
    int64_t step;
    char kind[64];
    bool end;
} records;

static void next_record(records *r) {
    json_decref(r->rec);
    r->rec = NULL;
    r->end = !r->f || getline(&r->line, &r->cap, r->f) < 0;
    if (r->end) return;
    r->no++;
    r->rec = json_loads(r->line, 0, NULL);
    r->step = json_integer_value(json_object_get(r->rec, "step"));
    r->kind[0] = '\0';
    const char *key;
    json_t *v;
    json_object_foreach(r->rec, key, v) {
        const char *slash = strchr(key, '/');
        if (slash && !r->kind[0])
            (void)snprintf(r->kind, sizeof r->kind, "%.*s", (int)(slash - key), key);
    }
}

/* Says a record of one run that the other lacks, or one that does not read, and moves on. */
static void unmatched(records *r, const char *run, verify_segment *seg, int n) {
    char what[256];
    (void)snprintf(what, sizeof what, "metrics.jsonl record %lld (step %lld): %s", r->no,
                   (long long)r->step, r->rec ? run : "not a JSON object");
    charge(seg, n, r->rec ? r->step : INT64_MAX, true, what);
    next_record(r);
}

/* metrics.jsonl of both runs, record by record in step order: the records of one step and
 * kind are compared; a record of either run that the other lacks is a difference of its own,
 * and the comparison goes on with the next. */
static void compare_records(const char *a_root, const char *b_root, verify_segment *seg, int n) {
    char pa[CMP_PATH], pb[CMP_PATH], why[1024], what[1200];
    records a = {0}, b = {0};
    if (join(pa, sizeof pa, a_root, "metrics.jsonl")) a.f = fopen(pa, "r");
    if (join(pb, sizeof pb, b_root, "metrics.jsonl")) b.f = fopen(pb, "r");
    next_record(&a);
    next_record(&b);
    while (!a.end || !b.end) {
        bool same =
            !a.end && !b.end && a.rec && b.rec && a.step == b.step && strcmp(a.kind, b.kind) == 0;
        if (!same) {
            bool a_first = !a.end && (b.end || !a.rec || (b.rec && a.step <= b.step));
            if (a_first)
                unmatched(&a, "only in the straight run", seg, n);
            else
                unmatched(&b, "only in the interrupted run", seg, n);
            continue;
        }
        if (records_differ(a.rec, b.rec, why, sizeof why)) {
            (void)snprintf(what, sizeof what, "metrics.jsonl record %lld (step %lld): %s", a.no,
                           (long long)a.step, why);
            charge(seg, n, a.step, true, what);
        }
        next_record(&a);
        next_record(&b);
    }
    records *both[] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        free(both[i]->line);
        if (both[i]->f) (void)fclose(both[i]->f);
    }
}

int cli_verify_compare(const char *straight, const char *resumed, verify_segment *seg, int n) {
    compare_tree(straight, resumed, "checkpoints", INT64_MAX, seg, n);
    compare_records(straight, resumed, seg, n);
    int differ = 0;
    for (int i = 0; i < n; i++) {
        verify_segment *g = &seg[i];
        (void)snprintf(g->result, sizeof g->result, "%s%s%s%s",
                       g->differs ? "differs: " : "identical", g->file,
                       g->file[0] && g->record[0] ? "; " : "", g->record);
        differ += g->differs;
    }
    return differ;
}
