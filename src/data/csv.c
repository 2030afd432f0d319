/*
 * csv.c - the "csv" dataset type: a numeric table, with a header row of column names or
 * without one (columns are then named by number from 0), cells separated by one character or
 * by runs of spaces, the target in the table or in a file of its own (target_path).
 *
 * Cells may be quoted as in RFC 4180 (R's write.csv, pandas): a quoted cell holds delimiters,
 * doubled quotes and newlines, so a row may span lines. A cell is a span of the file's text (a
 * quoted one what is inside its quotes); only header names with doubled quotes are copied.
 *
 * The file is read whole (plain or gzip), checked row by row (cell counts, quotes) before the
 * table is allocated, then parsed into one f32 buffer [rows, features + 1] whose last column is
 * the target. Only the columns in use are parsed, so other columns may hold text. Optional
 * standardisation uses the mean and population std of each feature column, computed on the
 * loaded rows or on another file (stats_from, for validation data).
 *
 * A number is written in decimal ([sign] digits [. digits] [e [sign] digits]) or as the words
 * inf, infinity and nan (any case, with a sign): strtod's other forms (hexadecimal, nan(...))
 * are refused, and so are a NUL byte anywhere in the file and two columns of the same name.
 *
 * Invariant: the table holds finite f32 values only, unless nonfinite=allow (then inf, NaN and
 * values beyond the f32 range, as infinities, are kept); class targets are integers in
 * [0, CSV_MAX_CLASS], exact in f32. Ownership: the dataset owns the table; the file contents
 * and every scratch buffer are freed before open returns.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

#define CSV_MAX_BYTES ((size_t)1 << 32) /* largest (decompressed) file */
#define CSV_MAX_CLASS (1 << 24)         /* largest class index: exact in f32 */
#define CSV_CELL_MAX  64                /* longest numeric cell, in bytes */
#define CSV_SHOW      40                /* bytes of a bad cell quoted in a message */

typedef struct span {
    const char *p;
    size_t n;
} span;

/* The delimiter value for "runs of spaces and tabs" (delimiter: space). */
#define CSV_WHITESPACE '\0'

/* One file being parsed. */
typedef struct csv_file {
    const char *path;
    char delim;           /* or CSV_WHITESPACE */
    bool header;          /* the first row names the columns */
    bool allow_nonfinite; /* keep inf and NaN cells (nonfinite=allow) */
    char *numbers;        /* without a header: the names "0", "1", ... (owned) */
    size_t numbers_size;
    unsigned char *data; /* the file's bytes (owned) */
    size_t size;
    size_t pos;    /* start of the next unread row */
    int64_t line;  /* 1-based number of the line the row last read starts on */
    int64_t spill; /* the newlines inside quoted cells of that row, counted at the next */
    span *cols;    /* [n_cols] header names, then [n_cols] scratch cells for a row */
    int64_t n_cols;
} csv_file;

typedef struct csv {
    float *table; /* [rows, cols]: features, then the target */
    int64_t rows, cols;
    bool classify;
} csv;

static int show_len(span s) {
    return (int)(s.n < CSV_SHOW ? s.n : CSV_SHOW);
}

static const char *show_more(span s) {
    return s.n > CSV_SHOW ? "..." : "";
}

static bool is_blank(char c, char delim) {
    return (c == ' ' || c == '\t') && c != delim;
}

static span trim(span s, char delim) {
    while (s.n && is_blank(s.p[0], delim))
        s.p++, s.n--;
    while (s.n && is_blank(s.p[s.n - 1], delim))
        s.n--;
    return s;
}

static bool span_eq(span a, span b) {
    return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

static span span_of(const char *s) {
    span r = {s, strlen(s)};
    return r;
}

/* Whether c separates cells: the delimiter, or with delimiter: space, a blank. */
static bool is_delim(char c, char delim) {
    return delim == CSV_WHITESPACE ? c == ' ' || c == '\t' : c == delim;
}

/* The next non-blank row without its "\n" or "\r\n", into *out (*got false at the end of the
 * file). A row ends at a newline outside quotes: a cell whose first non-blank character is a
 * quote runs to the quote that closes it (RFC 4180, a doubled quote inside standing for one),
 * newlines and delimiters included. A quote left open fails, naming where it opened. */
static ct_status next_row(ct_ctx *ctx, csv_file *f, span *out, bool *got) {
    const char *data = (const char *)f->data;
    bool ws = f->delim == CSV_WHITESPACE;
    f->line += f->spill;
    f->spill = 0;
    *got = false;
    while (f->pos < f->size) {
        const char *start = data + f->pos;
        size_t n = f->size - f->pos, k = 0;
        bool cell_start = true, blank = true, seen = false, gap = false;
        int64_t newlines = 0, cell = 1;
        f->line++;
        const char *nl = memchr(start, '\n', n);
        if (!memchr(start, '"', nl ? (size_t)(nl - start) : n)) { /* no quotes: the usual case */
            k = nl ? (size_t)(nl - start) : n;
            size_t b = 0;
            while (b < k && (start[b] == ' ' || start[b] == '\t' || start[b] == '\r'))
                b++;
            blank = b == k;
        }
        for (; k < n && start[k] != '\n'; k++) {
            char c = start[k];
            if (c != ' ' && c != '\t' && c != '\r') blank = false;
            if (is_delim(c, f->delim)) { /* with spaces, leading ones separate nothing */
                if (ws)
                    gap = seen;
                else
                    cell++;
                cell_start = true;
                continue;
            }
            if (c == ' ' || c == '\t') continue; /* blanks around a cell */
            cell += gap;
            seen = true;
            gap = false;
            if (c == '"' && cell_start) {
                size_t open = k;
                int64_t open_line = f->line + newlines;
                for (k++; k < n; k++) {
                    if (start[k] == '"' && !(k + 1 < n && start[k + 1] == '"')) break;
                    if (start[k] == '"') k++;
                    newlines += start[k] == '\n';
                }
                if (k == n) {
                    size_t at = open;
                    while (at && start[at - 1] != '\n')
                        at--;
                    char name[CSV_SHOW + 16] = "";
                    if (cell <= f->n_cols)
                        (void)snprintf(name, sizeof name, " (column '%.*s')",
                                       show_len(f->cols[cell - 1]), f->cols[cell - 1].p);
                    return CT_FAIL(ctx, CT_ERR_FORMAT,
                                   "%s:%lld: the quote opening cell %lld%s at byte %zu of the "
                                   "line is never closed: expected a closing '\"' before the end "
                                   "of the file",
                                   f->path, (long long)open_line, (long long)cell, name,
                                   open - at + 1);
                }
            }
            cell_start = false;
        }
        size_t len = k;
        f->pos += k < n ? k + 1 : k;
        if (len && start[len - 1] == '\r') len--;
        if (blank) { /* blank lines (and a trailing newline) are skipped */
            f->line += newlines;
            continue;
        }
        f->spill = newlines;
        out->p = start;
        out->n = len;
        *got = true;
        return CT_OK;
    }
    return CT_OK;
}

/* Splits a row into cells (trimmed; a quoted one to what is inside its quotes, a doubled quote
 * left doubled), storing the first `cap` into cells (may be NULL) and the count into *count.
 * next_row has checked that every quote opened is closed. */
static ct_status
split(ct_ctx *ctx, const csv_file *f, span line, span *cells, int64_t cap, int64_t *count) {
    const char *p = line.p;
    size_t n = line.n, k = 0;
    int64_t c = 0;
    bool ws = f->delim == CSV_WHITESPACE;
    if (ws) /* leading blanks separate nothing */
        while (k < n && is_blank(p[k], CSV_WHITESPACE))
            k++;
    for (;;) {
        span cell;
        while (k < n && is_blank(p[k], f->delim))
            k++;
        if (k < n && p[k] == '"') {
            size_t open = ++k;
            while (k < n && !(p[k] == '"' && !(k + 1 < n && p[k + 1] == '"')))
                k += p[k] == '"' ? 2 : 1;
            cell = (span){p + open, k - open};
            k++; /* the closing quote */
            size_t after = k;
            while (k < n && is_blank(p[k], f->delim))
                k++;
            if (k < n && !is_delim(p[k], f->delim) && !(ws && k > after)) {
                char name[CSV_SHOW + 16] = "";
                if (c < f->n_cols)
                    (void)snprintf(name, sizeof name, " (column '%.*s')", show_len(f->cols[c]),
                                   f->cols[c].p);
                span rest = {p + k, n - k};
                return CT_FAIL(ctx, CT_ERR_FORMAT,
                               "%s:%lld: cell %lld%s: '%.*s%s' follows the closing quote: "
                               "expected a delimiter or the end of the row (a quote inside a "
                               "quoted cell is written twice)",
                               f->path, (long long)f->line, (long long)c + 1, name, show_len(rest),
                               rest.p, show_more(rest));
            }
        } else {
            size_t from = k;
            while (k < n && !is_delim(p[k], f->delim))
                k++;
            cell = trim((span){p + from, k - from}, f->delim);
        }
        if (cells && c < cap) cells[c] = cell;
        c++;
        if (ws) { /* a run of blanks is one separator; trailing blanks end the row */
            while (k < n && is_blank(p[k], CSV_WHITESPACE))
                k++;
            if (k >= n) break;
        } else {
            if (k >= n) break;
            k++; /* the delimiter: a row ending in one has an empty last cell */
        }
    }
    *count = c;
    return CT_OK;
}

static void file_close(ct_ctx *ctx, csv_file *f) {
    ct_free(ctx, f->data, f->size);
    ct_free(ctx, f->cols, 2 * (size_t)f->n_cols * sizeof(span));
    ct_free(ctx, f->numbers, f->numbers_size);
    f->data = NULL;
    f->cols = NULL;
    f->numbers = NULL;
}

/* How cells are separated, for messages. */
static const char *delim_name(const csv_file *f, char *buf, size_t size) {
    if (f->delim == CSV_WHITESPACE) return "spaces";
    if (f->delim == '\t') return "tabs";
    (void)snprintf(buf, size, "'%c'", f->delim);
    return buf;
}

/* Without a header: names the n columns "0" .. "n-1". */
static ct_status number_columns(ct_ctx *ctx, csv_file *f, int64_t n) {
    f->numbers_size = (size_t)n * 21;
    f->numbers = ct_alloc(ctx, f->numbers_size);
    if (!f->numbers)
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %lld column names", f->path, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        char *name = f->numbers + (size_t)i * 21;
        int len = snprintf(name, 21, "%lld", (long long)i);
        f->cols[i] = (span){name, (size_t)len};
    }
    return CT_OK;
}

/* The 1-based number of the cell of `line` that holds its byte k. */
static int64_t cell_at(const csv_file *f, span line, size_t k) {
    int64_t c = 1;
    if (f->delim != CSV_WHITESPACE) {
        for (size_t i = 0; i < k; i++)
            c += line.p[i] == f->delim;
        return c;
    }
    bool seen = false, gap = false; /* leading blanks separate nothing, a run of them one */
    for (size_t i = 0; i < k; i++) {
        if (is_blank(line.p[i], CSV_WHITESPACE)) {
            gap = seen;
        } else {
            c += gap;
            seen = true;
            gap = false;
        }
    }
    return c + gap;
}

/* A NUL byte would end a cell early wherever the text is handled as a C string: it fails,
 * named by its line, cell and offset. */
static ct_status check_nul(ct_ctx *ctx, const csv_file *f) {
    const unsigned char *nul = f->size ? memchr(f->data, '\0', f->size) : NULL;
    if (!nul) return CT_OK;
    size_t off = (size_t)(nul - f->data), start = 0;
    int64_t line = 1;
    for (const unsigned char *p = f->data; (p = memchr(p, '\n', off - (size_t)(p - f->data)));
         p++, line++)
        start = (size_t)(p - f->data) + 1;
    span l = {(const char *)f->data + start, off - start};
    return CT_FAIL(ctx, CT_ERR_FORMAT,
                   "%s:%lld: NUL byte in column %lld (byte offset %zu): expected text (hint: is "
                   "the file UTF-16 or binary? save it as UTF-8 text)",
                   f->path, (long long)line, (long long)cell_at(f, l, off - start), off);
}

/* A header cell and its column index, sorted to find repeated names. */
typedef struct named {
    span name;
    int64_t col;
} named;

static int named_cmp(const void *a, const void *b) {
    const named *x = a, *y = b;
    if (x->name.n != y->name.n) return x->name.n < y->name.n ? -1 : 1;
    int c = memcmp(x->name.p, y->name.p, x->name.n);
    return c ? c : (x->col > y->col) - (x->col < y->col);
}

/* Two header cells with the same name would make a column's name ambiguous: fails naming the
 * name that repeats first (by its second column) and both its columns. Sorting a copy keeps
 * this O(n log n) for the widest files. */
static ct_status check_duplicates(ct_ctx *ctx, const csv_file *f, int64_t header_line) {
    size_t bytes = (size_t)f->n_cols * sizeof(named);
    named *sorted = ct_alloc(ctx, bytes ? bytes : 1);
    if (!sorted)
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %lld column names", f->path,
                       (long long)f->n_cols);
    for (int64_t i = 0; i < f->n_cols; i++)
        sorted[i] = (named){f->cols[i], i};
    qsort(sorted, (size_t)f->n_cols, sizeof(named), named_cmp);
    int64_t first = -1, second = -1;
    for (int64_t i = 1; i < f->n_cols; i++)
        if (span_eq(sorted[i - 1].name, sorted[i].name) && (second < 0 || sorted[i].col < second))
            first = sorted[i - 1].col, second = sorted[i].col;
    ct_free(ctx, sorted, bytes ? bytes : 1);
    if (second < 0) return CT_OK;
    span name = f->cols[first];
    return CT_FAIL(ctx, CT_ERR_FORMAT,
                   "%s:%lld: columns %lld and %lld are both named '%.*s%s': expected unique "
                   "column names",
                   f->path, (long long)header_line, (long long)first + 1, (long long)second + 1,
                   show_len(name), name.p, show_more(name));
}

/* Header names holding a doubled quote ("a ""b""" names a "b"): copies them, each quote once,
 * into f->numbers, which a file with a header does not otherwise use. */
static ct_status unquote_names(ct_ctx *ctx, csv_file *f) {
    size_t bytes = 0;
    for (int64_t i = 0; i < f->n_cols; i++)
        if (memchr(f->cols[i].p, '"', f->cols[i].n)) bytes += f->cols[i].n;
    if (bytes == 0) return CT_OK;
    f->numbers = ct_alloc(ctx, bytes);
    if (!f->numbers)
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu bytes of column names", f->path, bytes);
    f->numbers_size = bytes;
    char *out = f->numbers;
    for (int64_t i = 0; i < f->n_cols; i++) {
        span c = f->cols[i];
        if (!memchr(c.p, '"', c.n)) continue;
        f->cols[i].p = out;
        for (size_t k = 0; k < c.n; k++) {
            *out++ = c.p[k];
            k += c.p[k] == '"' && k + 1 < c.n && c.p[k + 1] == '"';
        }
        f->cols[i].n = (size_t)(out - f->cols[i].p);
    }
    return CT_OK;
}

/* Reads the file and its header row (without a header, counts the first row's cells and
 * leaves it to be read as data). */
static ct_status file_open(
    ct_ctx *ctx, csv_file *f, const char *path, char delim, bool header_row, bool allow_nonfinite) {
    memset(f, 0, sizeof *f);
    f->path = path;
    f->delim = delim;
    f->header = header_row;
    f->allow_nonfinite = allow_nonfinite;
    CT_TRY(ct_data_read_file(ctx, path, CSV_MAX_BYTES, &f->data, &f->size));
    CT_TRY(check_nul(ctx, f));
    /* spreadsheets often start the file with a UTF-8 byte order mark: skip it */
    if (f->size >= 3 && !memcmp(f->data, "\xEF\xBB\xBF", 3)) f->pos = 3;
    size_t pos = f->pos;
    span header;
    bool got = false;
    CT_TRY(next_row(ctx, f, &header, &got));
    if (!got)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: empty file (%zu bytes): expected %s", path, f->size,
                       header_row ? "a header row of column names" : "rows of numbers");
    int64_t n = 0;
    CT_TRY(split(ctx, f, header, NULL, 0, &n));
    f->cols = ct_alloc(ctx, 2 * (size_t)n * sizeof(span));
    if (!f->cols)
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %lld column names", path, (long long)n);
    f->n_cols = n;
    if (!header_row) {
        f->pos = pos;
        f->line = f->spill = 0;
        return number_columns(ctx, f, n);
    }
    /* n_cols is 0 while split fills the names, so a bad header cell names no column */
    f->n_cols = 0;
    int64_t again = 0;
    ct_status s = split(ctx, f, header, f->cols, n, &again);
    f->n_cols = n; /* file_close frees the names by it */
    if (s == CT_OK) s = unquote_names(ctx, f);
    return s == CT_OK ? check_duplicates(ctx, f, f->line) : s;
}

/* "a, b, c" (truncated to the buffer) for messages. */
static const char *column_list(const csv_file *f, char *buf, size_t size) {
    size_t off = 0;
    buf[0] = '\0';
    for (int64_t i = 0; i < f->n_cols && off < size; i++) {
        int n = snprintf(buf + off, size - off, "%s%.*s", i ? ", " : "", show_len(f->cols[i]),
                         f->cols[i].p);
        if (n < 0) break;
        off += (size_t)n;
    }
    if (off >= size && size > 4) memcpy(buf + size - 4, "...", 4);
    return buf;
}

/* The index of column `name` (names are unique: file_open checks); `hint` is tried first (the
 * same layout as another file). */
static ct_status lookup(ct_ctx *ctx, const csv_file *f, span name, int64_t hint, int64_t *idx) {
    if (hint >= 0 && hint < f->n_cols && span_eq(f->cols[hint], name)) {
        *idx = hint;
        return CT_OK;
    }
    int64_t found = -1;
    for (int64_t i = 0; i < f->n_cols && found < 0; i++)
        if (span_eq(f->cols[i], name)) found = i;
    if (found < 0) {
        char list[512];
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: unknown column '%.*s%s' (columns: %s)", f->path,
                       show_len(name), name.p, show_more(name), column_list(f, list, sizeof list));
    }
    *idx = found;
    return CT_OK;
}

/* Counts the data rows (at most limit, 0 = all), checking each one's cells before anything is
 * allocated for them. Leaves the read position where it was. */
static ct_status count_rows(ct_ctx *ctx, csv_file *f, int64_t limit, int64_t *rows) {
    size_t pos = f->pos;
    int64_t line = f->line, spill = f->spill, n = 0;
    span s;
    bool got = true;
    while (limit == 0 || n < limit) {
        CT_TRY(next_row(ctx, f, &s, &got));
        if (!got) break;
        int64_t cells = 0;
        CT_TRY(split(ctx, f, s, NULL, 0, &cells));
        if (cells != f->n_cols) {
            char d[8];
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s:%lld: expected %lld cells, found %lld (the %s has %lld "
                           "columns, separated by %s)",
                           f->path, (long long)f->line, (long long)f->n_cols, (long long)cells,
                           f->header ? "header" : "first row", (long long)f->n_cols,
                           delim_name(f, d, sizeof d));
        }
        n++;
    }
    if (n == 0)
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: no data rows after the header (line %lld)", f->path,
                       (long long)line);
    f->pos = pos;
    f->line = line;
    f->spill = spill;
    *rows = n;
    return CT_OK;
}

static ct_status
bad_cell(ct_ctx *ctx, const csv_file *f, int64_t col, span cell, const char *expected) {
    span name = f->cols[col];
    return CT_FAIL(ctx, CT_ERR_FORMAT, "%s:%lld: column %lld ('%.*s'): expected %s, got '%.*s%s'",
                   f->path, (long long)f->line, (long long)col + 1, show_len(name), name.p,
                   expected, show_len(cell), cell.p, show_more(cell));
}

/* Whether s[0, n) is [sign] digits [. digits] [e [sign] digits], with a digit somewhere
 * before the exponent: the only numbers accepted besides the words inf, infinity and nan
 * (strtod alone would take hexadecimal too). */
static bool is_decimal(const char *s, size_t n) {
    size_t i = 0, digits = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    for (; i < n && isdigit((unsigned char)s[i]); i++)
        digits++;
    if (i < n && s[i] == '.')
        for (i++; i < n && isdigit((unsigned char)s[i]); i++)
            digits++;
    if (!digits) return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t exp_digits = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        for (; i < n && isdigit((unsigned char)s[i]); i++)
            exp_digits++;
        if (!exp_digits) return false;
    }
    return i == n;
}

/* inf, infinity or nan in any case, with an optional sign: *out is that value. */
static bool is_nonfinite_word(const char *s, size_t n, float *out) {
    float sign = 1.0f;
    if (n && (s[0] == '+' || s[0] == '-')) sign = s[0] == '-' ? -1.0f : 1.0f, s++, n--;
    char w[9] = "";
    if (n == 0 || n >= sizeof w) return false;
    for (size_t i = 0; i < n; i++)
        w[i] = (char)tolower((unsigned char)s[i]);
    if (!strcmp(w, "inf") || !strcmp(w, "infinity")) {
        *out = sign * INFINITY;
        return true;
    }
    if (!strcmp(w, "nan")) {
        *out = sign < 0 ? -NAN : NAN;
        return true;
    }
    return false;
}

static ct_status parse_number(ct_ctx *ctx, const csv_file *f, int64_t col, span cell, float *out) {
    char buf[CSV_CELL_MAX];
    const char *what = "a decimal number";
    if (cell.n == 0 || cell.n >= sizeof buf) return bad_cell(ctx, f, col, cell, what);
    float v;
    const char *nonfinite = NULL;
    if (is_nonfinite_word(cell.p, cell.n, &v)) {
        nonfinite = isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf";
    } else {
        if (!is_decimal(cell.p, cell.n)) return bad_cell(ctx, f, col, cell, what);
        memcpy(buf, cell.p, cell.n);
        buf[cell.n] = '\0';
        /* beyond the f32 range is the infinity it becomes; an underflow (ERANGE, ~0) is 0 */
        double d = strtod(buf, NULL);
        v = fabs(d) > (double)FLT_MAX ? (d > 0 ? INFINITY : -INFINITY) : (float)d;
        if (isinf(v))
            nonfinite = v > 0 ? "beyond the f32 range (inf)" : "beyond the f32 range (-inf)";
    }
    if (nonfinite && !f->allow_nonfinite) {
        span name = f->cols[col];
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s:%lld: column %lld ('%.*s'): '%.*s%s' is %s: expected a finite number "
                       "(key 'nonfinite': allow loads such values as they are)",
                       f->path, (long long)f->line, (long long)col + 1, show_len(name), name.p,
                       show_len(cell), cell.p, show_more(cell), nonfinite);
    }
    *out = v;
    return CT_OK;
}

static ct_status parse_class(ct_ctx *ctx, const csv_file *f, int64_t col, span cell, float *out) {
    char buf[CSV_CELL_MAX];
    const char *what = "a class index (an integer >= 0)";
    if (cell.n == 0 || cell.n >= sizeof buf) return bad_cell(ctx, f, col, cell, what);
    memcpy(buf, cell.p, cell.n);
    buf[cell.n] = '\0';
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (end != buf + cell.n || errno == ERANGE || v < 0) return bad_cell(ctx, f, col, cell, what);
    if (v > CSV_MAX_CLASS) {
        span name = f->cols[col];
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s:%lld: column %lld ('%.*s'): class index %lld exceeds the limit %d (is "
                       "this a regression target? set task=regression)",
                       f->path, (long long)f->line, (long long)col + 1, show_len(name), name.p, v,
                       CSV_MAX_CLASS);
    }
    *out = (float)v;
    return CT_OK;
}

/* Parses `rows` rows into table [rows, stride]: table column j < n_out is file column
 * src[j]; column target_j (or none when -1) holds a class index when classify. */
static ct_status parse_rows(ct_ctx *ctx,
                            csv_file *f,
                            const int64_t *src,
                            int64_t n_out,
                            int64_t stride,
                            int64_t target_j,
                            bool classify,
                            int64_t rows,
                            float *table) {
    span *cells = f->cols + f->n_cols;
    for (int64_t r = 0; r < rows; r++) {
        span line;
        int64_t count = 0;
        bool got = false;
        CT_TRY(next_row(ctx, f, &line, &got));
        if (!got)
            return CT_FAIL(ctx, CT_ERR_INTERNAL, "%s: row %lld vanished", f->path, (long long)r);
        CT_TRY(split(ctx, f, line, cells, f->n_cols, &count));
        for (int64_t j = 0; j < n_out; j++) {
            span cell = cells[src[j]];
            float *out = &table[r * stride + j];
            if (j == target_j && classify)
                CT_TRY(parse_class(ctx, f, src[j], cell, out));
            else
                CT_TRY(parse_number(ctx, f, src[j], cell, out));
        }
    }
    return CT_OK;
}

/* Mean and population std of the first n_feat columns of table [rows, stride]; std 0 -> 1. */
static void column_stats(
    const float *table, int64_t rows, int64_t stride, int64_t n_feat, double *mean, double *sd) {
    for (int64_t j = 0; j < n_feat; j++)
        mean[j] = sd[j] = 0.0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n_feat; j++)
            mean[j] += (double)table[r * stride + j];
    for (int64_t j = 0; j < n_feat; j++)
        mean[j] /= (double)rows;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n_feat; j++) {
            double d = (double)table[r * stride + j] - mean[j];
            sd[j] += d * d;
        }
    for (int64_t j = 0; j < n_feat; j++) {
        sd[j] = sqrt(sd[j] / (double)rows);
        if (sd[j] == 0.0) sd[j] = 1.0;
    }
}

/* Splits the `features` option into trimmed names. */
static ct_status
feature_names(ct_ctx *ctx, const ct_options *opts, const char *list, span **out, int64_t *count) {
    int64_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    span *names = ct_alloc(ctx, (size_t)n * sizeof(span));
    if (!names) return CT_FAIL(ctx, CT_ERR_OOM, "allocating %lld feature names", (long long)n);
    const char *p = list;
    for (int64_t i = 0; i < n; i++) {
        const char *e = strchr(p, ',');
        if (!e) e = p + strlen(p);
        names[i] = trim((span){p, (size_t)(e - p)}, ',');
        if (names[i].n == 0) {
            ct_free(ctx, names, (size_t)n * sizeof(span));
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: key 'features': empty column name at position %lld in '%s'",
                           ct_options_where(opts, "data"), (long long)i + 1, list);
        }
        p = *e ? e + 1 : e;
    }
    *out = names;
    *count = n;
    return CT_OK;
}

/* Resolves the feature columns and the target into src [n_feat + 1] (features, then target;
 * with the target in another file, src[n_feat] is -1 and every column is a feature by
 * default). */
static ct_status resolve_columns(ct_ctx *ctx,
                                 const ct_options *opts,
                                 const csv_file *f,
                                 const char *features,
                                 const char *target,
                                 bool target_here,
                                 int64_t **src_out,
                                 int64_t *n_feat_out) {
    int64_t t = -1;
    if (target_here) CT_TRY(lookup(ctx, f, span_of(target), -1, &t));
    span *names = NULL;
    int64_t n_feat = target_here ? f->n_cols - 1 : f->n_cols;
    if (features) CT_TRY(feature_names(ctx, opts, features, &names, &n_feat));
    ct_status s = CT_OK;
    int64_t *src = NULL;
    if (n_feat == 0) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s: the only column is the target '%s'; expected feature columns too", f->path,
                    target);
        goto done;
    }
    src = ct_alloc(ctx, (size_t)(n_feat + 1) * sizeof(int64_t));
    if (!src) {
        s = CT_FAIL(ctx, CT_ERR_OOM, "allocating %lld column indices", (long long)n_feat);
        goto done;
    }
    for (int64_t j = 0; j < n_feat && !names; j++)
        src[j] = t < 0 || j < t ? j : j + 1;
    for (int64_t j = 0; j < n_feat && names && s == CT_OK; j++) {
        s = lookup(ctx, f, names[j], -1, &src[j]);
        if (s == CT_OK && src[j] == t)
            s = CT_FAIL(ctx, CT_ERR_CONFIG,
                        "%s: key 'features': column '%s' is the target; it cannot also be a "
                        "feature",
                        ct_options_where(opts, "data"), target);
        /* no repeats: the table then never holds more columns than the file */
        for (int64_t k = 0; k < j && s == CT_OK; k++)
            if (src[k] == src[j])
                s = CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'features': column '%.*s' is listed twice",
                            ct_options_where(opts, "data"), show_len(names[j]), names[j].p);
    }
    src[n_feat] = t;
done:
    if (names) ct_free(ctx, names, (size_t)n_feat * sizeof(span));
    if (s != CT_OK) {
        if (src) ct_free(ctx, src, (size_t)(n_feat + 1) * sizeof(int64_t));
        return s;
    }
    *src_out = src;
    *n_feat_out = n_feat;
    return CT_OK;
}

/* Mean and std per feature from another file with the same feature columns (by name). */
static ct_status stats_from_file(ct_ctx *ctx,
                                 const char *path,
                                 const csv_file *main_file,
                                 const int64_t *main_src,
                                 int64_t n_feat,
                                 double *mean,
                                 double *sd) {
    csv_file f;
    int64_t *src = NULL, rows = 0;
    float *table = NULL;
    size_t table_bytes = 0;
    ct_status s =
        file_open(ctx, &f, path, main_file->delim, main_file->header, main_file->allow_nonfinite);
    if (s == CT_OK) {
        src = ct_alloc(ctx, (size_t)n_feat * sizeof(int64_t));
        if (!src) s = CT_FAIL(ctx, CT_ERR_OOM, "allocating %lld indices", (long long)n_feat);
    }
    for (int64_t j = 0; s == CT_OK && j < n_feat; j++)
        s = lookup(ctx, &f, main_file->cols[main_src[j]], main_src[j], &src[j]);
    if (s == CT_OK) s = count_rows(ctx, &f, 0, &rows);
    if (s == CT_OK) {
        table_bytes = (size_t)rows * (size_t)n_feat * sizeof(float);
        table = ct_alloc(ctx, table_bytes);
        if (!table)
            s = CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %zu bytes for statistics", path,
                        table_bytes);
    }
    if (s == CT_OK) s = parse_rows(ctx, &f, src, n_feat, n_feat, -1, false, rows, table);
    if (s == CT_OK) column_stats(table, rows, n_feat, n_feat, mean, sd);
    if (s != CT_OK) s = ct_err_wrap(ctx, "stats_from '%s'", path);
    ct_free(ctx, table, table_bytes);
    ct_free(ctx, src, (size_t)n_feat * sizeof(int64_t));
    file_close(ctx, &f);
    return s;
}

/* Parses f's rows (src: the feature columns, then the target) into c's table and standardises
 * the features when asked. With tf, the target is column target_col of tf, row for row. */
static ct_status load(ct_ctx *ctx,
                      csv_file *f,
                      const int64_t *src,
                      int64_t n_feat,
                      csv_file *tf,
                      int64_t target_col,
                      int64_t limit,
                      bool standardize,
                      const char *stats_from,
                      csv *c) {
    int64_t rows = 0, cols = n_feat + 1;
    CT_TRY(count_rows(ctx, f, limit, &rows));
    if (tf) {
        int64_t trows = 0;
        CT_TRY(count_rows(ctx, tf, limit, &trows));
        if (trows != rows)
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s has %lld rows and its target_path %s has %lld: expected one "
                           "target per row",
                           f->path, (long long)rows, tf->path, (long long)trows);
    }
    c->table = ct_alloc(ctx, (size_t)rows * (size_t)cols * sizeof(float));
    if (!c->table)
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating a table of %lld x %lld", f->path,
                       (long long)rows, (long long)cols);
    c->rows = rows;
    c->cols = cols;
    if (tf) {
        CT_TRY(parse_rows(ctx, f, src, n_feat, cols, -1, false, rows, c->table));
        CT_TRY(parse_rows(ctx, tf, &target_col, 1, cols, 0, c->classify, rows, c->table + n_feat));
    } else {
        CT_TRY(parse_rows(ctx, f, src, cols, cols, n_feat, c->classify, rows, c->table));
    }
    if (!standardize) return CT_OK;
    size_t ms_bytes = 2 * (size_t)n_feat * sizeof(double);
    double *mean = ct_alloc(ctx, ms_bytes);
    if (!mean)
        return CT_FAIL(ctx, CT_ERR_OOM, "allocating statistics of %lld features",
                       (long long)n_feat);
    double *sd = mean + n_feat;
    ct_status s = CT_OK;
    if (stats_from)
        s = stats_from_file(ctx, stats_from, f, src, n_feat, mean, sd);
    else
        column_stats(c->table, rows, cols, n_feat, mean, sd);
    for (int64_t r = 0; s == CT_OK && r < rows; r++)
        for (int64_t j = 0; j < n_feat; j++) {
            float *v = &c->table[r * cols + j];
            *v = (float)(((double)*v - mean[j]) / sd[j]);
        }
    ct_free(ctx, mean, ms_bytes);
    return s;
}

static void csv_close(ct_ctx *ctx, void *self) {
    csv *c = self;
    if (!c) return;
    ct_free(ctx, c->table, (size_t)c->rows * (size_t)c->cols * sizeof(float));
    ct_free(ctx, c, sizeof *c);
}

/* The option keys, and those that name files (ct_dataset_vtable keys, path_keys). */
static const char *const csv_keys[] = {"path",      "features",    "target",     "task",
                                       "delimiter", "standardize", "stats_from", "limit",
                                       "header",    "target_path", "nonfinite",  NULL};
static const char *const csv_path_keys[] = {"path", "stats_from", "target_path", NULL};

/* The options of a csv dataset, read and checked. */
typedef struct csv_opts {
    const char *path, *features, *stats_from, *target_path, *target;
    char delim; /* or CSV_WHITESPACE */
    bool classify, standardize, header, allow_nonfinite;
    int64_t limit;
} csv_opts;

static ct_status read_options(ct_ctx *ctx, const ct_options *opts, csv_opts *o) {
    const char *task, *delim_s;
    CT_TRY(ct_options_check(ctx, opts, csv_keys));
    o->features = ct_options_get(opts, "features");
    o->stats_from = ct_options_get(opts, "stats_from");
    o->target_path = ct_options_get(opts, "target_path");
    CT_TRY(ct_options_string(ctx, opts, "path", NULL, &o->path));
    /* a file of targets alone: its only column, unless target names one */
    CT_TRY(ct_options_string(ctx, opts, "target", o->target_path ? "" : NULL, &o->target));
    CT_TRY(ct_options_string(ctx, opts, "task", "classification", &task));
    CT_TRY(ct_options_string(ctx, opts, "delimiter", ",", &delim_s));
    CT_TRY(ct_options_bool(ctx, opts, "standardize", false, &o->standardize));
    CT_TRY(ct_options_bool(ctx, opts, "header", true, &o->header));
    CT_TRY(ct_options_int(ctx, opts, "limit", 0, 0, INT64_MAX, &o->limit));
    CT_TRY(ct_data_nonfinite_option(ctx, opts, &o->allow_nonfinite));
    o->classify = strcmp(task, "classification") == 0;
    if (!o->classify && strcmp(task, "regression") != 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'task': expected classification or regression, got '%s'",
                       ct_options_where(opts, "data"), task);
    /* "tab" and "\t" spell a tab where the config cannot hold one; "space" is runs of blanks */
    bool tab = !strcmp(delim_s, "tab") || !strcmp(delim_s, "\\t");
    bool ws = !strcmp(delim_s, "space");
    char delim = tab ? '\t' : ws ? CSV_WHITESPACE : delim_s[0];
    if ((!tab && !ws && strlen(delim_s) != 1) || delim == '"' || delim == '\n' || delim == '\r' ||
        delim == ' ')
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'delimiter': expected one character other than a quote, a space "
                       "or a line break, or tab, or space (runs of spaces and tabs), got '%s'",
                       ct_options_where(opts, "data"), delim_s);
    o->delim = delim;
    if (o->stats_from && !o->standardize)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'stats_from' is set but standardize is false; set "
                       "standardize=true to use its statistics",
                       ct_options_where(opts, "data"));
    return CT_OK;
}

/* Opens the file (and the targets' file), resolves the columns and loads the table into c;
 * *n_feat is the number of feature columns. */
static ct_status
read_table(ct_ctx *ctx, const ct_options *opts, const csv_opts *o, csv *c, int64_t *n_feat) {
    csv_file f, tf;
    memset(&tf, 0, sizeof tf);
    int64_t *src = NULL, target_col = 0;
    *n_feat = 0;
    ct_status s = file_open(ctx, &f, o->path, o->delim, o->header, o->allow_nonfinite);
    if (s == CT_OK)
        s = resolve_columns(ctx, opts, &f, o->features, o->target, !o->target_path, &src, n_feat);
    if (s == CT_OK && o->target_path) {
        s = file_open(ctx, &tf, o->target_path, o->delim, o->header, o->allow_nonfinite);
        if (s == CT_OK && o->target[0])
            s = lookup(ctx, &tf, span_of(o->target), -1, &target_col);
        else if (s == CT_OK && tf.n_cols != 1)
            s = CT_FAIL(ctx, CT_ERR_CONFIG,
                        "%s: target_path %s has %lld columns: name the target's with key "
                        "'target'",
                        ct_options_where(opts, "data"), o->target_path, (long long)tf.n_cols);
    }
    if (s == CT_OK)
        s = load(ctx, &f, src, *n_feat, o->target_path ? &tf : NULL, target_col, o->limit,
                 o->standardize, o->stats_from, c);
    if (src) ct_free(ctx, src, (size_t)(*n_feat + 1) * sizeof(int64_t));
    file_close(ctx, &f);
    file_close(ctx, &tf);
    return s;
}

static ct_status csv_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    csv_opts o;
    CT_TRY(read_options(ctx, opts, &o));
    if (!info) return CT_OK; /* csv_check: the options only */

    csv *c = ct_alloc(ctx, sizeof *c);
    if (!c) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a csv dataset");
    memset(c, 0, sizeof *c);
    c->classify = o.classify;
    int64_t n_feat;
    ct_status s = read_table(ctx, opts, &o, c, &n_feat);
    if (s != CT_OK) {
        csv_close(ctx, c);
        return s;
    }
    float max_class = 0.0f;
    for (int64_t r = 0; c->classify && r < c->rows; r++)
        max_class = fmaxf(max_class, c->table[r * c->cols + n_feat]);
    info->n = c->rows;
    info->x_dtype = CT_F32;
    info->x_ndim = 1;
    info->x_shape[0] = n_feat;
    info->y_dtype = c->classify ? CT_I64 : CT_F32;
    info->y_ndim = 0;
    info->n_classes = c->classify ? (int64_t)max_class + 1 : 0;
    *self = c;
    return CT_OK;
}

static ct_status csv_get(const void *self, int64_t i, void *x, void *y) {
    const csv *c = self;
    const float *row = c->table + i * c->cols;
    memcpy(x, row, (size_t)(c->cols - 1) * sizeof(float));
    if (c->classify) {
        int64_t k = (int64_t)row[c->cols - 1];
        memcpy(y, &k, sizeof k);
    } else {
        memcpy(y, &row[c->cols - 1], sizeof(float));
    }
    return CT_OK;
}

static ct_status csv_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return csv_open(ctx, opts, NULL, &none);
}

const ct_dataset_vtable ct_dataset_csv = {0,         "csv",     csv_open, csv_get,
                                          csv_close, csv_check, csv_keys, csv_path_keys};
