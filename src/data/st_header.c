/* The safetensors header: a JSON object mapping tensor names to
 * {"dtype", "shape", "data_offsets"}, plus an optional "__metadata__" object
 * of strings. A strict parser for exactly that grammar, as strict as the
 * reference (serde_json into safetensors' HashMetadata): valid UTF-8, no
 * lone surrogates, no leading zeros, no duplicate fields; any JSON value is
 * skipped where the format allows extra fields. Then the dtype names. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"

static const struct {
  kiln_dtype dtype;
  const char *name;
} ST_DTYPES[] = {{KILN_BOOL, "BOOL"}, {KILN_I8, "I8"},   {KILN_I16, "I16"}, {KILN_I32, "I32"},
                 {KILN_I64, "I64"},   {KILN_U8, "U8"},   {KILN_U16, "U16"}, {KILN_U32, "U32"},
                 {KILN_U64, "U64"},   {KILN_F16, "F16"}, {KILN_BF16, "BF16"}, {KILN_F32, "F32"},
                 {KILN_F64, "F64"}};

const char *kdata_st_dtype_name(kiln_dtype d) {
  for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
    if (ST_DTYPES[i].dtype == d) return ST_DTYPES[i].name;
  return NULL;
}

static int st_dtype_from_name(const char *s, kiln_dtype *out) {
  for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
    if (strcmp(ST_DTYPES[i].name, s) == 0) {
      *out = ST_DTYPES[i].dtype;
      return 1;
    }
  return 0;
}

size_t kdata_utf8_invalid_at(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || i + len > n) return i;
    unsigned cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (p[i + k] & 0x3F);
    }
    /* overlong forms, surrogates and code points past U+10FFFF */
    static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return i;
    i += len;
  }
  return n;
}

typedef struct parser {
  const char *start, *p, *end, *path, *op;
} parser;

static kiln_status bad(parser *ps, const char *what) {
  return kcore_fail(KILN_ERR_IO, "%s: '%s': bad safetensors header: %s at byte %zu", ps->op,
                    ps->path, what, (size_t)(ps->p - ps->start));
}

static kiln_status oom(parser *ps) {
  return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: '%s': out of memory for the header", ps->op,
                    ps->path);
}

static void ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
    ps->p++;
}

static int eat(parser *ps, char c) {
  ws(ps);
  if (ps->p < ps->end && *ps->p == c) {
    ps->p++;
    return 1;
  }
  return 0;
}

static void put_utf8(char *o, size_t *n, unsigned cp) {
  if (cp < 0x80) {
    o[(*n)++] = (char)cp;
  } else if (cp < 0x800) {
    o[(*n)++] = (char)(0xC0 | cp >> 6);
    o[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o[(*n)++] = (char)(0xE0 | cp >> 12);
    o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[(*n)++] = (char)(0x80 | (cp & 0x3F));
  } else {
    o[(*n)++] = (char)(0xF0 | cp >> 18);
    o[(*n)++] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[(*n)++] = (char)(0x80 | (cp & 0x3F));
  }
}

static int hex4(const char *s, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return 0;
    *v = *v << 4 | (unsigned)d;
  }
  return 1;
}

/* A JSON string, unescaped into a malloc'ed NUL-terminated copy (UTF-8 is
 * never longer than its escaped form). A \u0000 escape is refused: kiln's
 * names and metadata are C strings. */
static kiln_status string(parser *ps, char **out) {
  if (!eat(ps, '"')) return bad(ps, "expected a string");
  char *o = malloc((size_t)(ps->end - ps->p) + 1);
  if (!o) return oom(ps);
  size_t n = 0;
  const char *why = NULL;
  while (!why && ps->p < ps->end && *ps->p != '"') {
    char c = *ps->p++;
    if ((unsigned char)c < 0x20) {
      why = "control character in a string";
    } else if (c != '\\') {
      o[n++] = c;
    } else if (ps->p >= ps->end) {
      why = "bad escape in a string";
    } else if ((c = *ps->p++) && strchr("\"\\/bfnrt", c)) {
      o[n++] = "\"\\/\b\f\n\r\t"[strchr("\"\\/bfnrt", c) - "\"\\/bfnrt"];
    } else {
      unsigned cp, lo;
      if (c != 'u' || ps->end - ps->p < 4 || !hex4(ps->p, &cp) || cp == 0) {
        why = "bad escape in a string";
        continue;
      }
      ps->p += 4;
      if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
          ps->p[1] == 'u' && hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        ps->p += 6;
      } else if (cp >= 0xD800 && cp < 0xE000) {
        why = "lone surrogate in a string";
        continue;
      }
      put_utf8(o, &n, cp);
    }
  }
  if (!why && ps->p >= ps->end) why = "unterminated string";
  if (why) {
    free(o);
    return bad(ps, why);
  }
  ps->p++;
  o[n] = 0;
  *out = o;
  return KILN_OK;
}

/* An unsigned integer as serde_json reads a usize: digits only, no leading
 * zero, no fraction or exponent. */
static kiln_status uint_value(parser *ps, uint64_t *v) {
  ws(ps);
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return bad(ps, "expected an integer");
  if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')
    return bad(ps, "integer with a leading zero");
  uint64_t x = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    uint64_t d = (uint64_t)(*ps->p - '0');
    if (x > (UINT64_MAX - d) / 10) return bad(ps, "integer overflow");
    x = x * 10 + d;
    ps->p++;
  }
  if (ps->p < ps->end && strchr(".eE", *ps->p)) return bad(ps, "expected an integer");
  *v = x;
  return KILN_OK;
}

/* [u, u, ...] into v (at most cap), count in *n. */
static kiln_status uint_array(parser *ps, uint64_t *v, int cap, int *n) {
  if (!eat(ps, '[')) return bad(ps, "expected an array");
  *n = 0;
  if (eat(ps, ']')) return KILN_OK;
  do {
    if (*n == cap) return bad(ps, "array too long");
    kiln_status s = uint_value(ps, &v[(*n)++]);
    if (s != KILN_OK) return s;
  } while (eat(ps, ','));
  return eat(ps, ']') ? KILN_OK : bad(ps, "expected ']'");
}

static kiln_status skip_value(parser *ps, int depth);

/* Calls field(ps, key, user) for each key of an object. */
typedef kiln_status (*field_fn)(parser *ps, const char *key, void *user);
static kiln_status object(parser *ps, field_fn field, void *user) {
  if (!eat(ps, '{')) return bad(ps, "expected an object");
  if (eat(ps, '}')) return KILN_OK;
  do {
    char *key = NULL;
    kiln_status s = string(ps, &key);
    if (s == KILN_OK && !eat(ps, ':')) s = bad(ps, "expected ':'");
    if (s == KILN_OK) s = field(ps, key, user);
    free(key);
    if (s != KILN_OK) return s;
  } while (eat(ps, ','));
  return eat(ps, '}') ? KILN_OK : bad(ps, "expected '}'");
}

static kiln_status skip_field(parser *ps, const char *key, void *user) {
  (void)key;
  return skip_value(ps, *(int *)user);
}

static int digits(parser *ps) {
  const char *s = ps->p;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
  return ps->p > s;
}

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static kiln_status number(parser *ps) {
  if (*ps->p == '-') ps->p++;
  if (ps->p < ps->end && *ps->p == '0') {
    ps->p++;
  } else if (!digits(ps)) {
    return bad(ps, "unexpected character");
  }
  if (ps->p < ps->end && *ps->p == '.' && (ps->p++, !digits(ps))) return bad(ps, "bad number");
  if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
    ps->p++;
    if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
    if (!digits(ps)) return bad(ps, "bad number");
  }
  return KILN_OK;
}

static kiln_status skip_value(parser *ps, int depth) {
  if (depth > 64) return bad(ps, "nesting too deep");
  ws(ps);
  if (ps->p >= ps->end) return bad(ps, "unexpected end");
  int d = depth + 1;
  if (*ps->p == '{') return object(ps, skip_field, &d);
  if (*ps->p == '"') {
    char *s = NULL;
    kiln_status st = string(ps, &s);
    free(s);
    return st;
  }
  if (eat(ps, '[')) {
    if (eat(ps, ']')) return KILN_OK;
    do {
      kiln_status s = skip_value(ps, d);
      if (s != KILN_OK) return s;
    } while (eat(ps, ','));
    return eat(ps, ']') ? KILN_OK : bad(ps, "expected ']'");
  }
  static const char *const literals[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(literals[i]);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, literals[i], n) == 0) {
      ps->p += n;
      return KILN_OK;
    }
  }
  return number(ps);
}

static kiln_status tensor_field(parser *ps, const char *key, void *user) {
  kdata_st_entry *t = user;
  unsigned bit = strcmp(key, "dtype") == 0 ? 1 : strcmp(key, "shape") == 0 ? 2
                 : strcmp(key, "data_offsets") == 0 ? 4 : 0;
  if (bit & t->has) return bad(ps, "duplicate field");
  t->has |= bit;
  if (bit == 1) {
    char *name = NULL;
    kiln_status s = string(ps, &name);
    if (s != KILN_OK) return s;
    if (!st_dtype_from_name(name, &t->dtype))
      s = kcore_fail(KILN_ERR_IO, "%s: '%s': tensor '%s' has dtype '%s', which kiln does not have",
                     ps->op, ps->path, t->name, name);
    free(name);
    return s;
  }
  if (bit == 2) {
    uint64_t dims[KILN_MAX_RANK];
    kiln_status s = uint_array(ps, dims, KILN_MAX_RANK, &t->rank);
    for (int i = 0; s == KILN_OK && i < t->rank; i++) {
      if (dims[i] > INT64_MAX) return bad(ps, "dimension too large");
      t->shape[i] = (int64_t)dims[i];
    }
    return s;
  }
  if (bit == 4) {
    uint64_t off[2];
    int n;
    kiln_status s = uint_array(ps, off, 2, &n);
    if (s == KILN_OK && (n != 2 || off[1] < off[0])) return bad(ps, "bad data_offsets");
    t->begin = off[0];
    t->end = off[1];
    return s;
  }
  return skip_value(ps, 1);
}

/* __metadata__: null, or an object whose values are all strings. */
static kiln_status meta_field(parser *ps, const char *key, void *user) {
  kdata_st_header *h = user;
  char *value = NULL, *k = NULL;
  ws(ps);
  if (ps->p >= ps->end || *ps->p != '"') return bad(ps, "__metadata__ value is not a string");
  kiln_status s = string(ps, &value);
  if (s != KILN_OK) return s;
  if (!(k = kcore_strdup(key))) {
    free(value);
    return oom(ps);
  }
  char **nk = realloc(h->meta_keys, (h->n_meta + 1) * sizeof *nk);
  if (nk) h->meta_keys = nk;
  char **nv = nk ? realloc(h->meta_values, (h->n_meta + 1) * sizeof *nv) : NULL;
  if (nv) h->meta_values = nv;
  if (!nv) {
    free(k);
    free(value);
    return oom(ps);
  }
  h->meta_keys[h->n_meta] = k;
  h->meta_values[h->n_meta++] = value;
  return KILN_OK;
}

typedef struct top {
  kdata_st_header *h;
  size_t cap;
  int seen_meta;
} top;

static kiln_status top_field(parser *ps, const char *key, void *user) {
  top *tp = user;
  kdata_st_header *h = tp->h;
  if (strcmp(key, "__metadata__") == 0) {
    if (tp->seen_meta++) return bad(ps, "duplicate __metadata__");
    ws(ps);
    if ((size_t)(ps->end - ps->p) >= 4 && memcmp(ps->p, "null", 4) == 0) {
      ps->p += 4;
      return KILN_OK;
    }
    return object(ps, meta_field, h);
  }
  if (h->n == tp->cap) {
    size_t cap = tp->cap ? tp->cap * 2 : 16;
    kdata_st_entry *e = realloc(h->e, cap * sizeof *e);
    if (!e) return oom(ps);
    h->e = e;
    tp->cap = cap;
  }
  kdata_st_entry *t = &h->e[h->n];
  memset(t, 0, sizeof *t);
  if (!(t->name = kcore_strdup(key))) return oom(ps);
  h->n++;
  kiln_status s = object(ps, tensor_field, t);
  if (s == KILN_OK && (t->has & 7) != 7)
    s = kcore_fail(KILN_ERR_IO, "%s: '%s': tensor '%s' lacks %s", ps->op, ps->path, key,
                   !(t->has & 1) ? "dtype" : !(t->has & 2) ? "shape" : "data_offsets");
  return s;
}

kiln_status kdata_st_parse(const char *op, const char *path, const char *json, size_t len,
                           kdata_st_header *out) {
  parser ps = {json, json, json + len, path, op};
  memset(out, 0, sizeof *out);
  size_t at = kdata_utf8_invalid_at(json, len);
  if (at < len) {
    ps.p = json + at;
    return bad(&ps, "invalid UTF-8");
  }
  top tp = {out, 0, 0};
  kiln_status s = object(&ps, top_field, &tp);
  ws(&ps);
  if (s == KILN_OK && ps.p != ps.end) s = bad(&ps, "trailing characters");
  if (s != KILN_OK) kdata_st_header_free(out);
  return s;
}

const char *kdata_st_meta(const kdata_st_header *h, const char *key) {
  for (size_t i = 0; i < h->n_meta; i++)
    if (strcmp(h->meta_keys[i], key) == 0) return h->meta_values[i];
  return NULL;
}

void kdata_st_header_free(kdata_st_header *h) {
  if (!h) return;
  for (size_t i = 0; h->e && i < h->n; i++) free(h->e[i].name);
  for (size_t i = 0; i < h->n_meta; i++) {
    free(h->meta_keys[i]);
    free(h->meta_values[i]);
  }
  free(h->e);
  free(h->by_name);
  free(h->meta_keys);
  free(h->meta_values);
  memset(h, 0, sizeof *h);
}
