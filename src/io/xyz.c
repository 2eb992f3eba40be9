/* xyz.c: extended XYZ reader (ASE conventions: Lattice, pbc, Properties) and the periodic table. */
#include "io/xyz.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* ---- periodic table ---------------------------------------------------------------------------- */

static const char *const k_symbols[119] = {
    "X",  "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si",
    "P",  "S",  "Cl", "Ar", "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu",
    "Zn", "Ga", "Ge", "As", "Se", "Br", "Kr", "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru",
    "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb", "Te", "I",  "Xe", "Cs", "Ba", "La", "Ce", "Pr",
    "Nd", "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf", "Ta", "W",
    "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac",
    "Th", "Pa", "U",  "Np", "Pu", "Am", "Cm", "Bk", "Cf", "Es", "Fm", "Md", "No", "Lr", "Rf",
    "Db", "Sg", "Bh", "Hs", "Mt", "Ds", "Rg", "Cn", "Nh", "Fl", "Mc", "Lv", "Ts", "Og",
};

static int ascii_casecmp(const char *a, const char *b) {
    for (;; a++, b++) {
        int ca = tolower((unsigned char)*a), cb = tolower((unsigned char)*b);
        if (ca != cb) return ca - cb;
        if (ca == '\0') return 0;
    }
}

int32_t cgq_element_z(const char *symbol) {
    if (symbol == NULL || symbol[0] == '\0' || strlen(symbol) > 2) return 0;
    for (int32_t z = 1; z <= 118; z++)
        if (strcmp(symbol, k_symbols[z]) == 0) return z;
    /* Symbols differ case-insensitively too, so "CL" or "cl" can only mean Cl. */
    for (int32_t z = 1; z <= 118; z++)
        if (ascii_casecmp(symbol, k_symbols[z]) == 0) return z;
    return 0;
}

const char *cgq_element_symbol(int32_t z) { return (z >= 1 && z <= 118) ? k_symbols[z] : "X"; }

void cgq_frame_free(cgq_frame *frame) {
    if (frame == NULL) return;
    free(frame->atomic_numbers);
    free(frame->positions);
    memset(frame, 0, sizeof *frame);
}

/* ---- lines ------------------------------------------------------------------------------------- */

typedef struct line_buf {
    char *buf;
    size_t cap;
} line_buf;

enum { LINE_OK = 0, LINE_EOF = 1, LINE_NOMEM = 2, LINE_IOERR = 3 };

/* Reads one whole line of any length, dropping the "\n" or "\r\n". LINE_EOF only when nothing was
 * read, so a last line without a newline still counts. */
static int read_line(FILE *f, line_buf *lb) {
    size_t n = 0;
    for (;;) {
        if (lb->cap - n < 2) {
            size_t cap = lb->cap ? lb->cap * 2 : 256;
            char *p = realloc(lb->buf, cap);
            if (p == NULL) return LINE_NOMEM;
            lb->buf = p;
            lb->cap = cap;
        }
        size_t room = lb->cap - n;
        if (room > INT_MAX) room = INT_MAX;
        if (fgets(lb->buf + n, (int)room, f) == NULL) break;
        n += strlen(lb->buf + n);
        if (n > 0 && lb->buf[n - 1] == '\n') break;
    }
    if (ferror(f)) return LINE_IOERR;
    if (n == 0) return LINE_EOF;
    if (lb->buf[n - 1] == '\n') lb->buf[--n] = '\0';
    if (n > 0 && lb->buf[n - 1] == '\r') lb->buf[--n] = '\0';
    return LINE_OK;
}

static int is_blank(const char *s) {
    while (*s != '\0' && isspace((unsigned char)*s)) s++;
    return *s == '\0';
}

/* Next whitespace-separated token, NUL-terminated in place; NULL when the line is used up. */
static char *next_token(char **cursor) {
    char *p = *cursor;
    while (*p != '\0' && isspace((unsigned char)*p)) p++;
    if (*p == '\0') {
        *cursor = p;
        return NULL;
    }
    char *start = p;
    while (*p != '\0' && !isspace((unsigned char)*p)) p++;
    if (*p != '\0') *p++ = '\0';
    *cursor = p;
    return start;
}

/* Whole-token number; the caller decides whether non-finite values are acceptable. */
static int parse_double(const char *s, double *out) {
    char *end;
    if (*s == '\0') return 0;
    *out = strtod(s, &end);
    return *end == '\0';
}

/* Non-negative decimal integer without sign or junk; 0 on overflow past max. */
static int parse_count(const char *s, int64_t max, int64_t *out) {
    int64_t v = 0;
    if (*s == '\0') return 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9') return 0;
        if (v > (max - (*s - '0')) / 10) return 0;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return 1;
}

/* ---- comment line: key=value pairs --------------------------------------------------------------
 * Split as ASE does: whitespace separates entries, '=' separates key from value (spaces around it
 * allowed), "..." '...' {...} [...] group text (delimiters dropped), backslash escapes one char.
 * Words are rewritten in place; output never overtakes input since each input char yields at most
 * one output char. */

enum { WORD_END, WORD_TEXT, WORD_EQUALS };

typedef struct kv_scanner {
    char *read;
    int pending_equals; /* a word ended on '=' whose slot now holds the word's terminator */
} kv_scanner;

static int kv_next(kv_scanner *sc, char **word) {
    if (sc->pending_equals) {
        sc->pending_equals = 0;
        return WORD_EQUALS;
    }
    char *r = sc->read;
    while (*r != '\0' && isspace((unsigned char)*r)) r++;
    if (*r == '\0') {
        sc->read = r;
        return WORD_END;
    }
    if (*r == '=') {
        sc->read = r + 1;
        return WORD_EQUALS;
    }
    char *w = r, close = '\0';
    *word = w;
    while (*r != '\0') {
        char c = *r;
        if (c == '\\' && r[1] != '\0') {
            *w++ = r[1];
            r += 2;
        } else if (close != '\0') {
            if (c != close) *w++ = c;
            else close = '\0';
            r++;
        } else if (c == '"' || c == '\'') {
            close = c;
            r++;
        } else if (c == '{' || c == '[') {
            close = (c == '{') ? '}' : ']';
            r++;
        } else if (isspace((unsigned char)c)) {
            r++;
            break;
        } else if (c == '=') {
            sc->pending_equals = 1;
            r++;
            break;
        } else {
            *w++ = c;
            r++;
        }
    }
    *w = '\0';
    sc->read = r;
    return WORD_TEXT;
}

typedef struct frame_keys {
    char *lattice, *pbc, *properties; /* values (NULL for a bare flag), pointing into the line */
    int lattice_seen, pbc_seen, properties_seen;
} frame_keys;

static void note_key(frame_keys *k, const char *key, char *value) {
    if (ascii_casecmp(key, "Lattice") == 0) {
        k->lattice_seen = 1;
        k->lattice = value;
    } else if (ascii_casecmp(key, "pbc") == 0) {
        k->pbc_seen = 1;
        k->pbc = value;
    } else if (ascii_casecmp(key, "Properties") == 0) {
        k->properties_seen = 1;
        k->properties = value;
    }
}

/* Records the values of Lattice, pbc and Properties (last one wins, as in a dict); others ignored. */
static void scan_comment(char *line, frame_keys *keys) {
    kv_scanner sc = {line, 0};
    char *word = NULL, *key = NULL;
    char *const empty = line + strlen(line); /* the line's terminator doubles as an empty value */
    for (;;) {
        int t = kv_next(&sc, &word);
        if (t == WORD_END) break;
        if (t == WORD_TEXT) {
            if (key != NULL) note_key(keys, key, NULL); /* previous word was a bare flag */
            key = word;
            continue;
        }
        /* '=': the following word is the value of the pending key. */
        if (key == NULL) continue; /* stray '=': tolerate */
        char *value = NULL;
        t = kv_next(&sc, &value);
        note_key(keys, key, t == WORD_TEXT ? value : empty); /* "key=" with nothing after it */
        key = NULL;
        if (t == WORD_END) break;
        /* "a==b" style junk: the second '=' has no key and is skipped next round. */
        if (t == WORD_EQUALS) sc.pending_equals = 1;
    }
    if (key != NULL) note_key(keys, key, NULL);
}

/* Splits on whitespace and commas (Lattice=[1, 0, 0, ...] becomes "1, 0, 0, ..." after grouping). */
static char *next_list_item(char **cursor) {
    char *p = *cursor;
    while (*p != '\0' && (isspace((unsigned char)*p) || *p == ',')) p++;
    if (*p == '\0') {
        *cursor = p;
        return NULL;
    }
    char *start = p;
    while (*p != '\0' && !isspace((unsigned char)*p) && *p != ',') p++;
    if (*p != '\0') *p++ = '\0';
    *cursor = p;
    return start;
}

static cgq_status parse_lattice(const char *source, int64_t line, char *value, double cell[9]) {
    if (value == NULL)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: Lattice has no value; expected Lattice=\"ax ay az bx by bz cx cy cz\"",
                        source, (long long)line);
    char *cursor = value, *item;
    int n = 0;
    while ((item = next_list_item(&cursor)) != NULL) {
        if (n == 9)
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "%s:%lld: Lattice has more than 9 numbers; expected 9 "
                            "(\"ax ay az bx by bz cx cy cz\", rows are lattice vectors)",
                            source, (long long)line);
        double v;
        if (!parse_double(item, &v) || !isfinite(v))
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "%s:%lld: Lattice number %d is '%.40s'; expected a finite number",
                            source, (long long)line, n + 1, item);
        cell[n++] = v;
    }
    if (n != 9)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: Lattice has %d numbers; expected 9 "
                        "(\"ax ay az bx by bz cx cy cz\", rows are lattice vectors)",
                        source, (long long)line, n);
    return CGQ_STATUS_OK;
}

static int parse_bool(const char *s, int32_t *out) {
    static const char *const yes[] = {"T", "True", "1"}, *const no[] = {"F", "False", "0"};
    for (int i = 0; i < 3; i++) {
        if (ascii_casecmp(s, yes[i]) == 0) {
            *out = 1;
            return 1;
        }
        if (ascii_casecmp(s, no[i]) == 0) {
            *out = 0;
            return 1;
        }
    }
    return 0;
}

static cgq_status parse_pbc(const char *source, int64_t line, char *value, int32_t pbc[3]) {
    char *cursor = value, *item;
    int n = 0;
    if (value == NULL)
        return cgq_fail(CGQ_STATUS_BAD_INPUT, "%s:%lld: pbc has no value; expected pbc=\"T T F\"",
                        source, (long long)line);
    int32_t flags[3] = {0, 0, 0};
    while ((item = next_list_item(&cursor)) != NULL) {
        int32_t b;
        if (n == 3 || !parse_bool(item, &b))
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "%s:%lld: pbc item %d is '%.40s'; expected pbc=\"T T F\" "
                            "(three of T/F/True/False/1/0)",
                            source, (long long)line, n + 1, item);
        flags[n++] = b;
    }
    if (n == 1) flags[1] = flags[2] = flags[0]; /* pbc=T: one flag for all three directions */
    else if (n != 3)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: pbc has %d values; expected three (pbc=\"T T F\")", source,
                        (long long)line, n);
    memcpy(pbc, flags, sizeof flags);
    return CGQ_STATUS_OK;
}

/* Where the needed columns sit on an atom line. */
typedef struct column_layout {
    int64_t n_columns;
    int64_t species_column;
    int species_is_number; /* from Z:I:1, else species:S:1 (symbol or number) */
    int64_t pos_column;    /* first of three */
    int exact;             /* Properties given: atom lines must have exactly n_columns */
} column_layout;

static cgq_status parse_properties(const char *source, int64_t line, char *value,
                                   column_layout *lay) {
    if (value == NULL || is_blank(value))
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: Properties has no value; expected e.g. "
                        "Properties=species:S:1:pos:R:3",
                        source, (long long)line);
    int64_t col = 0, species_col = -1, z_col = -1, pos_col = -1;
    char *p = value;
    for (int field = 1; *p != '\0'; field++) {
        char *parts[3];
        for (int i = 0; i < 3; i++) {
            if (*p == '\0')
                return cgq_fail(CGQ_STATUS_BAD_INPUT,
                                "%s:%lld: Properties ends inside entry %d; expected "
                                "name:type:count triples (e.g. species:S:1:pos:R:3)",
                                source, (long long)line, field);
            parts[i] = p;
            char *colon = strchr(p, ':');
            if (colon != NULL) {
                *colon = '\0';
                p = colon + 1;
            } else {
                p += strlen(p);
            }
        }
        const char *name = parts[0], *type = parts[1];
        int64_t count;
        if (strlen(type) != 1 || strchr("SRIL", type[0]) == NULL)
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "%s:%lld: Properties entry '%.40s' has type '%.10s'; expected S, R, I or L",
                            source, (long long)line, name, type);
        if (!parse_count(parts[2], 1000000, &count) || count < 1)
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "%s:%lld: Properties entry '%.40s' has count '%.20s'; expected a "
                            "positive integer",
                            source, (long long)line, name, parts[2]);
        int is_pos = strcmp(name, "pos") == 0 || strcmp(name, "positions") == 0;
        int is_species = strcmp(name, "species") == 0;
        int is_z = strcmp(name, "Z") == 0;
        if (is_pos && pos_col < 0) {
            if (type[0] != 'R' || count != 3)
                return cgq_fail(CGQ_STATUS_BAD_INPUT,
                                "%s:%lld: Properties declares %s:%s:%lld; expected %s:R:3", source,
                                (long long)line, name, type, (long long)count, name);
            pos_col = col;
        } else if (is_species && species_col < 0) {
            if (type[0] != 'S' || count != 1)
                return cgq_fail(CGQ_STATUS_BAD_INPUT,
                                "%s:%lld: Properties declares species:%s:%lld; expected species:S:1",
                                source, (long long)line, type, (long long)count);
            species_col = col;
        } else if (is_z && z_col < 0) {
            if (type[0] != 'I' || count != 1)
                return cgq_fail(CGQ_STATUS_BAD_INPUT,
                                "%s:%lld: Properties declares Z:%s:%lld; expected Z:I:1", source,
                                (long long)line, type, (long long)count);
            z_col = col;
        }
        col += count;
    }
    if (pos_col < 0)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: Properties has no positions; expected a pos:R:3 (or positions:R:3) entry",
                        source, (long long)line);
    if (species_col < 0 && z_col < 0)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: Properties has no species; expected a species:S:1 or Z:I:1 entry",
                        source, (long long)line);
    lay->n_columns = col;
    lay->species_is_number = species_col < 0;
    lay->species_column = species_col >= 0 ? species_col : z_col;
    lay->pos_column = pos_col;
    lay->exact = 1;
    return CGQ_STATUS_OK;
}

/* ---- atoms ------------------------------------------------------------------------------------- */

static cgq_status parse_atom_line(const char *source, int64_t line, int64_t atom, char *text,
                                  const column_layout *lay, int32_t *z, double xyz[3]) {
    const char *species = NULL, *pos[3] = {NULL, NULL, NULL};
    char *cursor = text, *tok;
    int64_t col = 0;
    while ((tok = next_token(&cursor)) != NULL) {
        if (col == lay->species_column) species = tok;
        if (col >= lay->pos_column && col < lay->pos_column + 3) pos[col - lay->pos_column] = tok;
        col++;
    }
    if (col < lay->n_columns || (lay->exact && col > lay->n_columns))
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: atom %lld has %lld columns; expected %lld (%s)", source,
                        (long long)line, (long long)atom + 1, (long long)col,
                        (long long)lay->n_columns,
                        lay->exact ? "as declared by Properties" : "species x y z");

    int64_t number = 0;
    int32_t zz = 0;
    if (parse_count(species, 1000, &number)) {
        zz = (number >= 1 && number <= 118) ? (int32_t)number : 0;
    } else if (!lay->species_is_number) {
        zz = cgq_element_z(species);
    }
    if (zz == 0)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: atom %lld has species '%.20s'; expected %s", source,
                        (long long)line, (long long)atom + 1, species,
                        lay->species_is_number ? "an atomic number 1..118 (Z column)"
                                               : "an element symbol H..Og or an atomic number 1..118");
    for (int k = 0; k < 3; k++) {
        if (!parse_double(pos[k], &xyz[k]) || !isfinite(xyz[k]))
            return cgq_fail(CGQ_STATUS_BAD_INPUT,
                            "%s:%lld: atom %lld position %c is '%.40s'; expected a finite number",
                            source, (long long)line, (long long)atom + 1, "xyz"[k], pos[k]);
    }
    *z = zz;
    return CGQ_STATUS_OK;
}

static cgq_status line_failure(int rc, const char *source, int64_t line) {
    if (rc == LINE_NOMEM)
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "%s:%lld: out of memory reading a line", source,
                        (long long)line);
    return cgq_fail(CGQ_STATUS_BAD_INPUT, "%s:%lld: read error", source, (long long)line);
}

/* The frame body, after the count line; fills *out only on success. */
static cgq_status read_body(FILE *f, const char *source, int64_t *line_no, int64_t count_line,
                            int64_t n_atoms, line_buf *lb, cgq_frame *out) {
    int rc = read_line(f, lb);
    if (rc == LINE_EOF)
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: truncated frame: end of file after the atom count on line %lld; "
                        "expected a comment line and %lld atom lines",
                        source, (long long)*line_no + 1, (long long)count_line, (long long)n_atoms);
    if (rc != LINE_OK) return line_failure(rc, source, *line_no + 1);
    const int64_t comment_line = ++*line_no;

    frame_keys keys = {0};
    scan_comment(lb->buf, &keys);
    cgq_frame fr = {0};
    fr.n_atoms = n_atoms;
    if (keys.lattice_seen) {
        CGQ_TRY(parse_lattice(source, comment_line, keys.lattice, fr.cell));
        fr.has_lattice = 1;
        fr.pbc[0] = fr.pbc[1] = fr.pbc[2] = 1;
    }
    if (keys.pbc_seen) CGQ_TRY(parse_pbc(source, comment_line, keys.pbc, fr.pbc));
    if (!fr.has_lattice && (fr.pbc[0] || fr.pbc[1] || fr.pbc[2]))
        return cgq_fail(CGQ_STATUS_BAD_INPUT,
                        "%s:%lld: pbc has a periodic direction but there is no Lattice; expected "
                        "Lattice=\"ax ay az bx by bz cx cy cz\" or pbc=\"F F F\"",
                        source, (long long)comment_line);
    column_layout lay = {4, 0, 0, 1, 0}; /* plain XYZ: species x y z, extra columns ignored */
    if (keys.properties_seen)
        CGQ_TRY(parse_properties(source, comment_line, keys.properties, &lay));

    /* Grow with the lines actually read, so a bogus huge count in a short file fails as
     * truncated rather than as a giant allocation. */
    int64_t cap = 0;
    cgq_status st = CGQ_STATUS_OK;
    for (int64_t i = 0; i < n_atoms; i++) {
        rc = read_line(f, lb);
        if (rc == LINE_EOF) {
            st = cgq_fail(CGQ_STATUS_BAD_INPUT,
                          "%s:%lld: truncated frame: end of file after %lld of %lld atom lines "
                          "(atom count on line %lld)",
                          source, (long long)*line_no + 1, (long long)i, (long long)n_atoms,
                          (long long)count_line);
            break;
        }
        if (rc != LINE_OK) {
            st = line_failure(rc, source, *line_no + 1);
            break;
        }
        ++*line_no;
        if (i == cap) {
            int64_t new_cap = cap ? cap * 2 : 1024;
            if (new_cap > n_atoms) new_cap = n_atoms;
            int32_t *zs = realloc(fr.atomic_numbers, (size_t)new_cap * sizeof *zs);
            if (zs != NULL) fr.atomic_numbers = zs;
            double *xs = realloc(fr.positions, (size_t)new_cap * 3 * sizeof *xs);
            if (xs != NULL) fr.positions = xs;
            if (zs == NULL || xs == NULL) {
                st = cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "%s:%lld: out of memory for %lld atoms",
                              source, (long long)*line_no, (long long)n_atoms);
                break;
            }
            cap = new_cap;
        }
        st = parse_atom_line(source, *line_no, i, lb->buf, &lay, &fr.atomic_numbers[i],
                             &fr.positions[3 * i]);
        if (st != CGQ_STATUS_OK) break;
    }
    if (st != CGQ_STATUS_OK) {
        cgq_frame_free(&fr);
        return st;
    }
    *out = fr;
    return CGQ_STATUS_OK;
}

cgq_status cgq_xyz_read_frame(FILE *f, const char *source, int64_t *line_no, cgq_frame *frame,
                              int *eof) {
    int64_t local_line = 0;
    if (source == NULL) source = "<xyz>";
    if (line_no == NULL) line_no = &local_line;
    if (f == NULL || frame == NULL || eof == NULL)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "cgq_xyz_read_frame(%s): file, frame and eof must not be NULL", source);
    *eof = 0;

    line_buf lb = {NULL, 0};
    cgq_status st = CGQ_STATUS_OK;
    int rc;
    /* Blank lines between frames and at the end of the file are tolerated. */
    while ((rc = read_line(f, &lb)) == LINE_OK && is_blank(lb.buf)) ++*line_no;
    if (rc == LINE_EOF) {
        *eof = 1;
    } else if (rc != LINE_OK) {
        st = line_failure(rc, source, *line_no + 1);
    } else {
        ++*line_no;
        /* Skip a UTF-8 byte order mark and surrounding blanks (the message shows the line as read). */
        char *start = lb.buf;
        if (strncmp(start, "\xEF\xBB\xBF", 3) == 0) start += 3;
        start += strspn(start, " \t\v\f");
        size_t len = strcspn(start, " \t\v\f");
        int64_t n_atoms = 0;
        int ok = start[len + strspn(start + len, " \t\v\f")] == '\0';
        if (ok) {
            start[len] = '\0';
            /* The neighbor graph indexes atoms with int32. */
            ok = parse_count(start, INT32_MAX, &n_atoms);
        }
        if (!ok)
            st = cgq_fail(CGQ_STATUS_BAD_INPUT,
                          "%s:%lld: found '%.40s' where a frame starts; expected the atom count "
                          "(an integer from 0 to %d) alone on the line",
                          source, (long long)*line_no, lb.buf, INT32_MAX);
        else
            st = read_body(f, source, line_no, *line_no, n_atoms, &lb, frame);
    }
    free(lb.buf);
    return st;
}
