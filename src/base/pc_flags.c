/* pc_flags: table-driven command-line parsing on getopt_long.
 *
 * getopt_long gives the GNU conventions users expect (--flag value, --flag=value, -s value,
 * abbreviations of long names, "--" to end flags). This file adds what getopt lacks:
 * typed values with full-string validation and ranges, one-line errors that name the flag,
 * and generated --help and effective-configuration printing from the same tables. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_opt.h"

/* Most options a single parse may take in all its groups: getopt_long needs them in one
 * array; 256 is several times what any PipeCompress program defines. */
#define MAX_OPTS 256
/* getopt_long result values for long-only options: past any single character. */
#define LONG_ONLY_BASE 1000
#define VAL_HELP       (LONG_ONLY_BASE - 1)
#define VAL_VERSION    (LONG_ONLY_BASE - 2)

static bool has_range(const pc_flags_t *o)
{
    return o->min <= o->max;
}

/* Parse a whole string as a signed decimal integer. */
static bool parse_ll(const char *s, long long *out)
{
    if (!*s || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

/* Sizes: digits with an optional binary unit K, M, G, T (optionally followed by "iB" or
 * "B"), case-insensitive. */
static bool parse_size(const char *s, long long *out)
{
    if (!isdigit((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0':
        break;
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        return false;
    }
    if (shift) {
        end++;
        if (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0)
            end += strlen(end);
    }
    if (*end != '\0')
        return false;
    if (v > ((unsigned long long)INT64_MAX >> shift))
        return false;
    *out = (long long)(v << shift);
    return true;
}

static int choice_index(const char *choices, const char *value)
{
    size_t vlen = strlen(value);
    int idx = 0;
    for (const char *p = choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, value, len) == 0)
            return idx;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

/* Copy the idx-th choice into buf. */
static void choice_name(const char *choices, int idx, char *buf, size_t len)
{
    const char *p = choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p)
            p++;
    }
    if (!p) {
        snprintf(buf, len, "?");
        return;
    }
    const char *bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    snprintf(buf, len, "%.*s", (int)n, p);
}

static int range_error(const pc_flags_t *o, const char *value, char *err, size_t errlen)
{
    return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: %s is out of range (%.17g..%.17g)", o->name,
                        value, o->min, o->max);
}

int pc_flags_set(const pc_flags_t *o, void *dst, const char *value, char *err, size_t errlen)
{
    char *field = (char *)dst + o->offset;
    long long ll;
    switch (o->type) {
    case PC_FLAGS_INT:
    case PC_FLAGS_INT64:
        if (!parse_ll(value, &ll))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: '%s' is not an integer", o->name,
                                value);
        if (o->type == PC_FLAGS_INT && (ll < INT32_MIN || ll > INT32_MAX))
            return range_error(o, value, err, errlen);
        if (has_range(o) && ((double)ll < o->min || (double)ll > o->max))
            return range_error(o, value, err, errlen);
        if (o->type == PC_FLAGS_INT)
            *(int *)field = (int)ll;
        else
            *(int64_t *)field = (int64_t)ll;
        break;
    case PC_FLAGS_SIZE:
        if (!parse_size(value, &ll))
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--%s: '%s' is not a size (bytes, or with K, M, G, T)", o->name,
                                value);
        if (has_range(o) && ((double)ll < o->min || (double)ll > o->max))
            return range_error(o, value, err, errlen);
        *(int64_t *)field = (int64_t)ll;
        break;
    case PC_FLAGS_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(value, &end);
        if (!*value || isspace((unsigned char)*value) || *end != '\0' || errno == ERANGE ||
            !isfinite(d))
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: '%s' is not a finite number",
                                o->name, value);
        if (has_range(o) && (d < o->min || d > o->max))
            return range_error(o, value, err, errlen);
        *(double *)field = d;
        break;
    }
    case PC_FLAGS_STRING:
        if (strlen(value) + 1 > o->size)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: value is longer than %zu characters",
                                o->name, o->size - 1);
        if (!*value)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: empty value", o->name);
        memcpy(field, value, strlen(value) + 1);
        break;
    case PC_FLAGS_CHOICE: {
        int idx = choice_index(o->choices, value);
        if (idx < 0)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: '%s' is not one of %s", o->name,
                                value, o->choices);
        *(int *)field = idx;
        break;
    }
    case PC_FLAGS_FLAG:
        *(int *)field = 1;
        break;
    }
    if (o->check) {
        char why[256] = "";
        if (o->check(field, why, sizeof(why)) != 0)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: %s", o->name, why);
    }
    return PC_OK;
}

/* getopt_long's tables for a parse, and each option's place: its row, its group's
 * destination and record of given flags. */
typedef struct opt_table {
    struct option longopts[MAX_OPTS + 3];
    const pc_flags_t *by_index[MAX_OPTS];
    void *dst_of[MAX_OPTS];
    uint64_t *given_of[MAX_OPTS]; /* the group's record of given flags, or NULL */
    size_t row_of[MAX_OPTS];      /* the option's row in its group's table */
    char shortopts[3 * MAX_OPTS + 4];
    size_t n;
} opt_table_t;

/* Fill t from the groups (clearing their records of given flags); a table that is a
 * program's bug (too many rows, a name defined twice) is refused. */
static int build_table(const pc_flags_group_t *groups, size_t ngroups, opt_table_t *t, char *err,
                       size_t errlen)
{
    size_t n = 0, sp = 0;
    /* Leading '+': stop at the first operand; ':': report missing values as ':'. */
    t->shortopts[sp++] = '+';
    t->shortopts[sp++] = ':';
    for (size_t g = 0; g < ngroups; g++) {
        if (groups[g].given && groups[g].nopts > 64)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "option group '%s' records given flags but has %zu > 64 rows (a "
                                "program bug)",
                                groups[g].title, groups[g].nopts);
        if (groups[g].given)
            *groups[g].given = 0;
        for (size_t i = 0; i < groups[g].nopts; i++) {
            const pc_flags_t *o = &groups[g].opts[i];
            if (n == MAX_OPTS)
                return pc_error_fmt(PC_EUSAGE, err, errlen, "too many options defined (at most %d)",
                                    MAX_OPTS);
            for (size_t j = 0; j < n; j++)
                if (strcmp(t->by_index[j]->name, o->name) == 0 ||
                    (o->short_name && t->by_index[j]->short_name == o->short_name))
                    return pc_error_fmt(PC_EUSAGE, err, errlen,
                                        "option --%s defined twice (a program bug)", o->name);
            int has_arg = o->type == PC_FLAGS_FLAG ? no_argument : required_argument;
            t->longopts[n] = (struct option){
                o->name, has_arg, NULL, o->short_name ? o->short_name : LONG_ONLY_BASE + (int)n};
            if (o->short_name) {
                t->shortopts[sp++] = (char)o->short_name;
                if (has_arg == required_argument)
                    t->shortopts[sp++] = ':';
            }
            t->by_index[n] = o;
            t->dst_of[n] = groups[g].dst;
            t->given_of[n] = groups[g].given;
            t->row_of[n] = i;
            n++;
        }
    }
    t->longopts[n] = (struct option){"help", no_argument, NULL, VAL_HELP};
    t->longopts[n + 1] = (struct option){"version", no_argument, NULL, VAL_VERSION};
    t->longopts[n + 2] = (struct option){NULL, 0, NULL, 0};
    t->shortopts[sp++] = 'h';
    t->shortopts[sp] = '\0';
    t->n = n;
    return PC_OK;
}

/* getopt_long's answer c that is not an option of t ('?' or ':') as the usage error. */
static int bad_flag(const opt_table_t *t, int c, char **argv, char *err, size_t errlen)
{
    if (c == '?') {
        if (optopt && optopt < LONG_ONLY_BASE - 2)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "unknown flag '-%c' (see --help)", optopt);
        return pc_error_fmt(PC_EUSAGE, err, errlen, "unknown flag '%s' (see --help)",
                            argv[optind - 1]);
    }
    const char *name = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (t->longopts[i].val == optopt)
            name = t->by_index[i]->name;
    return pc_error_fmt(PC_EUSAGE, err, errlen, "--%s: missing value",
                        name ? name : argv[optind - 1]);
}

int pc_flags_parse(const pc_flags_group_t *groups, size_t ngroups, int argc, char **argv,
                   int *first_operand, char *err, size_t errlen)
{
    opt_table_t t;
    if (err && errlen)
        err[0] = '\0';
    int rc = build_table(groups, ngroups, &t, err, errlen);
    if (rc != PC_OK)
        return rc;
    /* optind = 0 makes glibc reinitialise, so the parser can run more than once. */
    optind = 0;
    opterr = 0;
    for (;;) {
        int longidx = -1;
        int c = getopt_long(argc, argv, t.shortopts, t.longopts, &longidx);
        if (c == -1)
            break;
        if (c == VAL_HELP || c == 'h')
            return PC_FLAGS_HELP;
        if (c == VAL_VERSION)
            return PC_FLAGS_VERSION;
        if (c == '?' || c == ':')
            return bad_flag(&t, c, argv, err, errlen);
        size_t idx = t.n;
        if (longidx >= 0 && (size_t)longidx < t.n) {
            idx = (size_t)longidx;
        } else {
            for (size_t i = 0; i < t.n; i++)
                if (t.longopts[i].val == c)
                    idx = i;
        }
        if (idx == t.n)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "unknown flag '%s' (see --help)",
                                argv[optind - 1]);
        if ((rc = pc_flags_set(t.by_index[idx], t.dst_of[idx], optarg ? optarg : "", err,
                               errlen)) != PC_OK)
            return rc;
        if (t.given_of[idx])
            *t.given_of[idx] |= UINT64_C(1) << t.row_of[idx];
    }
    if (optind < argc) {
        if (!first_operand)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "unexpected argument '%s' (see --help)",
                                argv[optind]);
        *first_operand = optind;
    } else if (first_operand) {
        *first_operand = argc;
    }
    return PC_OK;
}

/* Format the current value of an option into buf. */
static void format_value(const pc_flags_t *o, const void *dst, char *buf, size_t len)
{
    const char *field = (const char *)dst + o->offset;
    switch (o->type) {
    case PC_FLAGS_INT:
        snprintf(buf, len, "%d", *(const int *)field);
        break;
    case PC_FLAGS_INT64:
    case PC_FLAGS_SIZE:
        snprintf(buf, len, "%lld", (long long)*(const int64_t *)field);
        break;
    case PC_FLAGS_DOUBLE: {
        /* The shortest form that reads back as the same double: a printed configuration
         * reproduces its run (%g's 6 digits would not: 0.0123456789 became 0.0123457). */
        double v = *(const double *)field;
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(buf, len, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
        break;
    }
    case PC_FLAGS_STRING:
        snprintf(buf, len, "%s", field);
        break;
    case PC_FLAGS_CHOICE:
        choice_name(o->choices, *(const int *)field, buf, len);
        break;
    case PC_FLAGS_FLAG:
        snprintf(buf, len, "%s", *(const int *)field ? "yes" : "no");
        break;
    }
}

void pc_flags_usage(const pc_flags_group_t *groups, size_t ngroups, FILE *out)
{
    char val[256], left[96];
    for (size_t g = 0; g < ngroups; g++) {
        fprintf(out, "\n%s:\n", groups[g].title ? groups[g].title : "Options");
        for (size_t i = 0; i < groups[g].nopts; i++) {
            const pc_flags_t *o = &groups[g].opts[i];
            const char *meta = o->type == PC_FLAGS_FLAG ? "" : (o->metavar ? o->metavar : "VALUE");
            if (o->type == PC_FLAGS_CHOICE && !o->metavar)
                meta = o->choices;
            if (o->short_name)
                snprintf(left, sizeof(left), "-%c, --%s %s", o->short_name, o->name, meta);
            else
                snprintf(left, sizeof(left), "    --%s %s", o->name, meta);
            format_value(o, groups[g].dst, val, sizeof(val));
            fprintf(out, "  %-32s %s", left, o->help ? o->help : "");
            if (o->type != PC_FLAGS_FLAG)
                fprintf(out, " [%s]", val);
            fputc('\n', out);
        }
    }
    fprintf(out, "\n  -h, --help                         print this help and exit\n"
                 "      --version                      print the version and exit\n");
}

int pc_flags_finish(int rc, const pc_flags_group_t *groups, size_t ngroups, const char *prog,
                    const char *usage, const char *err, int speak, FILE *out, FILE *errs)
{
    if (rc == PC_OK)
        return -1;
    if (speak && rc == PC_FLAGS_HELP) {
        fprintf(out, "usage: %s\n", usage);
        pc_flags_usage(groups, ngroups, out);
    } else if (speak && rc == PC_FLAGS_VERSION) {
        fprintf(out, "%s (PipeCompress) %s\n", prog, PACKAGE_VERSION);
    } else if (speak) {
        fprintf(errs, "%s: %s\n", prog, err);
    }
    return rc == PC_FLAGS_HELP || rc == PC_FLAGS_VERSION ? 0 : 2;
}

void pc_flags_print(const pc_flags_group_t *groups, size_t ngroups, const char *prefix, FILE *out)
{
    char val[4096]; /* the longest string flag (a path) whole */
    for (size_t g = 0; g < ngroups; g++) {
        for (size_t i = 0; i < groups[g].nopts; i++) {
            const pc_flags_t *o = &groups[g].opts[i];
            format_value(o, groups[g].dst, val, sizeof(val));
            fprintf(out, "%s%-16s = %s\n", prefix ? prefix : "", o->name, val);
        }
    }
}

/* ---- the 0.1 names (pc_opt.h), until 0.2 -------------------------------------------- */

int pc_opt_parse(const pc_opt_group_t *groups, size_t ngroups, int argc, char **argv,
                 int *first_operand, char *err, size_t errlen)
{
    return pc_flags_parse(groups, ngroups, argc, argv, first_operand, err, errlen);
}

void pc_opt_usage(const pc_opt_group_t *groups, size_t ngroups, FILE *out)
{
    pc_flags_usage(groups, ngroups, out);
}

int pc_opt_finish(int rc, const pc_opt_group_t *groups, size_t ngroups, const char *prog,
                  const char *usage, const char *err, int speak, FILE *out, FILE *errs)
{
    return pc_flags_finish(rc, groups, ngroups, prog, usage, err, speak, out, errs);
}

void pc_opt_print(const pc_opt_group_t *groups, size_t ngroups, const char *prefix, FILE *out)
{
    pc_flags_print(groups, ngroups, prefix, out);
}

int pc_opt_set(const pc_opt_t *opt, void *dst, const char *value, char *err, size_t errlen)
{
    return pc_flags_set(opt, dst, value, err, errlen);
}
