/* The safetensors header: a JSON object mapping tensor names to
 * {"dtype", "shape", "data_offsets"}, plus an optional "__metadata__" object
 * of strings. A small strict parser for exactly that grammar (any JSON value
 * is skipped where the format allows extra fields), and the dtype names. */
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

typedef struct parser {
  const char *start, *p, *end, *path;
} parser;

static kiln_status bad(parser *ps, const char *what) {
  return kcore_fail(KILN_ERR_IO, "kiln_checkpoint_restore: '%s': bad safetensors header: %s "
                    "at byte %zu", ps->path, what, (size_t)(ps->p - ps->start));
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
 * never longer than its escaped form). */
static kiln_status string(parser *ps, char **out) {
  if (!eat(ps, '"')) return bad(ps, "expected a string");
  char *o = malloc((size_t)(ps->end - ps->p) + 1);
  if (!o) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_checkpoint_restore: out of memory");
  size_t n = 0;
  while (ps->p < ps->end && *ps->p != '"') {
    char c = *ps->p++;
    if ((unsigned char)c < 0x20) break;
    if (c != '\\') {
      o[n++] = c;
      continue;
    }
    if (ps->p >= ps->end) break;
    c = *ps->p++;
    const char *simple = strchr("\"\\/bfnrt", c);
    if (simple && c) {
      o[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      continue;
    }
    unsigned cp, lo;
    if (c != 'u' || ps->end - ps->p < 4 || !hex4(ps->p, &cp)) break;
    ps->p += 4;
    if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
        ps->p[1] == 'u' && hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      ps->p += 6;
    }
    put_utf8(o, &n, cp);
  }
  if (ps->p >= ps->end || *ps->p != '"') {
    free(o);
    return bad(ps, "bad string");
  }
  ps->p++;
  o[n] = 0;
  *out = o;
  return KILN_OK;
}

static kiln_status uint_value(parser *ps, uint64_t *v) {
  ws(ps);
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return bad(ps, "expected an integer");
  uint64_t x = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    if (x > (UINT64_MAX - 9) / 10) return bad(ps, "integer overflow");
    x = x * 10 + (uint64_t)(*ps->p++ - '0');
  }
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
  const char *start = ps->p;  /* a number, true, false or null */
  while (ps->p < ps->end && strchr("+-.0123456789eEtrufalsn", *ps->p)) ps->p++;
  return ps->p > start ? KILN_OK : bad(ps, "unexpected character");
}

typedef struct entries {
  kdata_st_entry *e;
  size_t n, cap;
} entries;

static kiln_status tensor_field(parser *ps, const char *key, void *user) {
  kdata_st_entry *t = user;
  if (strcmp(key, "dtype") == 0) {
    char *name = NULL;
    kiln_status s = string(ps, &name);
    if (s != KILN_OK) return s;
    int ok = st_dtype_from_name(name, &t->dtype);
    if (!ok)
      s = kcore_fail(KILN_ERR_IO, "kiln_checkpoint_restore: '%s': tensor '%s' has dtype '%s', "
                     "which kiln does not have", ps->path, t->name, name);
    free(name);
    t->has |= 1;
    return s;
  }
  if (strcmp(key, "shape") == 0) {
    uint64_t dims[KILN_MAX_RANK];
    kiln_status s = uint_array(ps, dims, KILN_MAX_RANK, &t->rank);
    for (int i = 0; s == KILN_OK && i < t->rank; i++) {
      if (dims[i] > INT64_MAX) return bad(ps, "dimension too large");
      t->shape[i] = (int64_t)dims[i];
    }
    t->has |= 2;
    return s;
  }
  if (strcmp(key, "data_offsets") == 0) {
    uint64_t off[2];
    int n;
    kiln_status s = uint_array(ps, off, 2, &n);
    if (s == KILN_OK && (n != 2 || off[1] < off[0])) return bad(ps, "bad data_offsets");
    t->begin = off[0];
    t->end = off[1];
    t->has |= 4;
    return s;
  }
  int depth = 1;
  return skip_value(ps, depth);
}

static kiln_status top_field(parser *ps, const char *key, void *user) {
  entries *es = user;
  int depth = 1;
  if (strcmp(key, "__metadata__") == 0) return skip_value(ps, depth);
  if (es->n == es->cap) {
    size_t cap = es->cap ? es->cap * 2 : 16;
    kdata_st_entry *e = realloc(es->e, cap * sizeof *e);
    if (!e) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_checkpoint_restore: out of memory");
    es->e = e;
    es->cap = cap;
  }
  kdata_st_entry *t = &es->e[es->n];
  memset(t, 0, sizeof *t);
  if (!(t->name = kcore_strdup(key)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_checkpoint_restore: out of memory");
  es->n++;
  kiln_status s = object(ps, tensor_field, t);
  if (s == KILN_OK && t->has != 7)
    s = kcore_fail(KILN_ERR_IO, "kiln_checkpoint_restore: '%s': tensor '%s' lacks %s", ps->path,
                   key, !(t->has & 1) ? "dtype" : !(t->has & 2) ? "shape" : "data_offsets");
  return s;
}

kiln_status kdata_st_parse(const char *path, const char *json, size_t len, kdata_st_entry **out,
                           size_t *n) {
  parser ps = {json, json, json + len, path};
  entries es = {0};
  kiln_status s = object(&ps, top_field, &es);
  ws(&ps);
  if (s == KILN_OK && ps.p != ps.end) s = bad(&ps, "trailing characters");
  if (s != KILN_OK) {
    kdata_st_free(es.e, es.n);
    return s;
  }
  *out = es.e;
  *n = es.n;
  return KILN_OK;
}

void kdata_st_free(kdata_st_entry *e, size_t n) {
  for (size_t i = 0; e && i < n; i++) free(e[i].name);
  free(e);
}
