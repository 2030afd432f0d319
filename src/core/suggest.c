/*
 * suggest.c - "did you mean": the name nearest to a misspelt one among those that were valid,
 * by edit distance, shared by every message about an unknown key or type name (the schema's,
 * the components' options, the type tables), so that they all suggest alike; and the message
 * itself, with the list of known names, for the components' options and the type tables.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_internal.h"

/* Edit distance counting a swap of two neighbours as one edit ("mpl" is one from "mlp"):
 * the optimal string alignment distance. Names longer than 63 bytes are never near anything. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return SIZE_MAX;
    size_t rows[3][64]; /* rows i-2, i-1 and i of the table, by i % 3 */
    for (size_t j = 0; j <= lb; j++)
        rows[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t *cur = rows[i % 3], *up = rows[(i + 2) % 3], *up2 = rows[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t best = up[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            if (up[j] + 1 < best) best = up[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                up2[j - 2] + 1 < best)
                best = up2[j - 2] + 1;
            cur[j] = best;
        }
    }
    return rows[la % 3][lb];
}

void ct_suggest_init(ct_suggest *s, const char *word) {
    s->word = word ? word : "";
    s->best = NULL;
    s->best_d = SIZE_MAX;
}

void ct_suggest_add(ct_suggest *s, const char *name) {
    if (!name) return;
    size_t d = edit_distance(s->word, name);
    if (d < s->best_d) { /* the first of equally near names wins: tables list common ones first */
        s->best_d = d;
        s->best = name;
    }
}

const char *ct_suggest_best(const ct_suggest *s) {
    /* about one typo per three characters; more than that suggests unrelated names */
    size_t n = strlen(s->word);
    size_t limit = n < 4 ? 1 : n / 3 + 1;
    return s->best && s->best_d > 0 && s->best_d <= limit ? s->best : NULL;
}

const char *ct_suggest_hint(const ct_suggest *s, char *buf, size_t size) {
    const char *best = ct_suggest_best(s);
    if (!size) return buf;
    buf[0] = '\0';
    if (best) (void)snprintf(buf, size, " (did you mean '%s'?)", best);
    return buf;
}

void ct_unknown_init(ct_unknown *u, const char *name) {
    u->name = name;
    ct_suggest_init(&u->suggest, name);
    u->known[0] = '\0';
    u->len = 0;
    u->count = 0;
}

void ct_unknown_add(ct_unknown *u, const char *known) {
    ct_suggest_add(&u->suggest, known);
    size_t room = sizeof u->known - u->len;
    int w = snprintf(u->known + u->len, room, "%s%s", u->count ? ", " : "", known);
    if (w >= 0 && (size_t)w < room) {
        u->len += (size_t)w;
        u->count++;
    } else {
        u->known[u->len] = '\0'; /* a name that does not fit whole is left out */
    }
}

ct_status ct_unknown_fail_at(ct_ctx *ctx,
                             const char *file,
                             int line,
                             const ct_unknown *u,
                             const char *where,
                             const char *what) {
    char hint[96];
    return ct_fail_at(ctx, CT_ERR_CONFIG, file, line, "%s: unknown %s%s'%s'%s (known: %s)", where,
                      what ? what : "", what ? " " : "", u->name ? u->name : "(none)",
                      ct_suggest_hint(&u->suggest, hint, sizeof hint), u->known);
}
