/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* How subvolctl writes: escaped text, sizes, times, JSON and tables. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "subvolctl.h"

char *term_escape(const char *s, bool word) {
        return escape_text(s, true, word);
}

/* IEC sizes like df -h ("4.0M", "12G"), or exact bytes with --bytes;
 * "-" when unknown. */
const char *format_size(uint64_t v, char buf[static 32]) {
        static const char units[] = "BKMGTPE";
        double d = (double) v;
        size_t u = 0;

        if (v == UNKNOWN)
                return "-";
        if (arg_bytes) {
                snprintf(buf, 32, "%" PRIu64, v);
                return buf;
        }
        while (d >= 1024 && u < sizeof(units) - 2) {
                d /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, 32, "%" PRIu64 "B", v);
        else
                snprintf(buf, 32, d < 10 ? "%.1f%c" : "%.0f%c", d < 10 ? ceil(d * 10) / 10 : ceil(d), units[u]);
        return buf;
}

const char *format_count(uint64_t v, char buf[static 32]) {
        if (v == UNKNOWN)
                return "-";
        snprintf(buf, 32, "%" PRIu64, v);
        return buf;
}

const char *format_percent(uint64_t v, char buf[static 32]) {
        if (v == UNKNOWN)
                return "-";
        snprintf(buf, 32, "%" PRIu64 "%%", v);
        return buf;
}

const char *format_timestamp(uint64_t usec, char buf[static 64]) {
        time_t t = (time_t) (usec / 1000000);
        struct tm tm;

        if (usec == 0 || usec == UNKNOWN || !localtime_r(&t, &tm) ||
            strftime(buf, 64, "%a %Y-%m-%d %H:%M:%S %Z", &tm) == 0)
                return "-";
        return buf;
}

/* ---- JSON ---- */

#define JSON_DEPTH_MAX 16

static struct {
        unsigned depth;
        bool has_items[JSON_DEPTH_MAX];  /* the container at that depth has a value already */
        bool after_key;
} json;

/* Before every value and key: the comma and, pretty, the line break. */
static void json_separate(void) {
        if (json.after_key) {
                json.after_key = false;
                return;
        }
        if (json.depth == 0)
                return;
        if (json.has_items[json.depth])
                putchar(',');
        json.has_items[json.depth] = true;
        if (arg_json == JSON_PRETTY)
                printf("\n%*s", (int) json.depth * 2, "");
}

static void json_open(char c) {
        json_separate();
        putchar(c);
        if (json.depth + 1 < JSON_DEPTH_MAX)
                json.depth++;
        json.has_items[json.depth] = false;
}

static void json_close(char c) {
        bool items = json.has_items[json.depth];

        json.depth--;
        if (arg_json == JSON_PRETTY && items)
                printf("\n%*s", (int) json.depth * 2, "");
        putchar(c);
}

void json_begin_object(void) {
        json_open('{');
}
void json_end_object(void) {
        json_close('}');
}
void json_begin_array(void) {
        json_open('[');
}
void json_end_array(void) {
        json_close(']');
}

static void json_quoted(const char *s) {
        putchar('"');
        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;
                if (c == '"' || c == '\\')
                        printf("\\%c", c);
                else if (c < 0x20 || c == 0x7f)
                        printf("\\u%04x", c);
                else
                        putchar(c);
        }
        putchar('"');
}

void json_key(const char *key) {
        json_separate();
        json_quoted(key);
        fputs(arg_json == JSON_PRETTY ? ": " : ":", stdout);
        json.after_key = true;
}

/* subvold's strings are valid UTF-8 (sd-bus checks): quoted as they are. */
void json_string(const char *s) {
        json_separate();
        json_quoted(s);
}

void json_bytes(const char *s) {
        const unsigned char *p = (const unsigned char *) s;
        size_t len;

        while (*p && (len = utf8_sequence_length(p)) > 0)
                p += len;
        if (!*p) {
                json_string(s);
                return;
        }
        json_begin_array();
        for (p = (const unsigned char *) s; *p; p++)
                json_u64(*p);
        json_end_array();
}

void json_u64(uint64_t v) {
        json_separate();
        printf("%" PRIu64, v);
}

void json_u64_or_null(uint64_t v, uint64_t null_value) {
        if (v == null_value)
                json_null();
        else
                json_u64(v);
}

void json_bool(bool b) {
        json_separate();
        fputs(b ? "true" : "false", stdout);
}

void json_double(double d) {
        if (!isfinite(d)) {  /* JSON has no NaN */
                json_null();
                return;
        }
        json_separate();
        printf("%.17g", d);
}

void json_null(void) {
        json_separate();
        fputs("null", stdout);
}

void json_done(void) {
        putchar('\n');
        fflush(stdout);
        json.depth = 0;
        json.has_items[0] = false;
        json.after_key = false;
}

/* ---- tables ---- */

struct Table {
        size_t n_columns, n_cells, allocated;
        char **cells;        /* row after row; the headers first */
        bool *right;
        size_t *widths;
};

/* Columns on a terminal: one per character (cells are escaped, so every
 * character is a printable one). */
static size_t text_width(const char *s) {
        size_t n = 0;

        for (; *s; s++)
                n += ((unsigned char) *s & 0xc0) != 0x80;  /* not a UTF-8 continuation byte */
        return n;
}

Table *table_new(size_t n_columns, const char *const *headers, const bool *right_aligned) {
        Table *t = calloc(1, sizeof(Table));

        if (!t)
                return NULL;
        t->n_columns = n_columns;
        t->right = calloc(n_columns, sizeof(bool));
        t->widths = calloc(n_columns, sizeof(size_t));
        if (!t->right || !t->widths || table_add(t, headers) < 0)
                return table_free(t);
        for (size_t i = 0; right_aligned && i < n_columns; i++)
                t->right[i] = right_aligned[i];
        return t;
}

int table_add(Table *t, const char *const *cells) {
        if (grow_array(&t->cells, &t->allocated, t->n_cells + t->n_columns, sizeof(char *)) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_columns; i++) {
                char *c = strdup(cells[i] ? cells[i] : "-");
                if (!c)
                        return -ENOMEM;
                t->cells[t->n_cells++] = c;
                if (text_width(c) > t->widths[i])
                        t->widths[i] = text_width(c);
        }
        return 0;
}

void table_print(Table *t) {
        for (size_t c = arg_legend ? 0 : t->n_columns; c < t->n_cells; c++) {
                size_t col = c % t->n_columns, pad = t->widths[col] - text_width(t->cells[c]);
                bool last = col + 1 == t->n_columns;

                if (t->right[col])
                        printf("%*s", (int) pad, "");
                fputs(t->cells[c], stdout);
                if (!last)
                        printf("%*s ", t->right[col] ? 0 : (int) pad, "");
                else
                        putchar('\n');
        }
}

Table *table_free(Table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_cells; i++)
                free(t->cells[i]);
        free(t->cells);
        free(t->right);
        free(t->widths);
        free(t);
        return NULL;
}
