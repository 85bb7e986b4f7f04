/* Partition specs: parsed from JAX's spelling or built entry by entry. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include "dist/dist.h"

kiln_status kiln_pspec_new(kiln_pspec **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pspec_new: out is null");
  *out = calloc(1, sizeof **out);
  return *out ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_pspec_new: out of host memory");
}

void kiln_pspec_free(kiln_pspec *spec) { free(spec); }

static kiln_status spec_room(const char *what, kiln_pspec *spec) {
  if (!spec) return kcore_fail(KILN_ERR_ARGUMENT, "%s: spec is null", what);
  if (spec->rank == KILN_SPEC_MAX_RANK)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: a spec holds at most %d entries", what, KILN_SPEC_MAX_RANK);
  return KILN_OK;
}

kiln_status kiln_pspec_append_none(kiln_pspec *spec) {
  kiln_status st = spec_room("kiln_pspec_append_none", spec);
  if (st) return st;
  spec->dims[spec->rank++].naxes = 0;
  return KILN_OK;
}

kiln_status kiln_pspec_append(kiln_pspec *spec, int naxes, const char *const *axes) {
  kiln_status st = spec_room("kiln_pspec_append", spec);
  if (st) return st;
  if (naxes < 0 || naxes > KILN_MESH_MAX_AXES || (naxes > 0 && !axes))
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pspec_append: naxes=%d is outside [0, %d]", naxes,
                      KILN_MESH_MAX_AXES);
  kdist_entry *e = &spec->dims[spec->rank];
  for (int k = 0; k < naxes; k++)
    if ((st = kdist_copy_name("kiln_pspec_append", axes[k], e->axes[k]))) return st;
  e->naxes = naxes;
  spec->rank++;
  return KILN_OK;
}

int kiln_pspec_rank(const kiln_pspec *spec) { return spec ? spec->rank : 0; }

int kiln_pspec_entry_axes(const kiln_pspec *spec, int dim) {
  return spec && dim >= 0 && dim < spec->rank ? spec->dims[dim].naxes : -1;
}

const char *kiln_pspec_entry_axis(const kiln_pspec *spec, int dim, int k) {
  if (kiln_pspec_entry_axes(spec, dim) <= k || k < 0) {
    if (!spec)
      kcore_fail(KILN_ERR_ARGUMENT, "kiln_pspec_entry_axis: the spec is NULL");
    else
      kcore_fail(KILN_ERR_OUT_OF_RANGE, "kiln_pspec_entry_axis: dimension %d has no axis %d (the "
                 "spec has %d dimensions, that one %d axes)", dim, k, spec->rank,
                 kiln_pspec_entry_axes(spec, dim));
    return NULL;
  }
  return spec->dims[dim].axes[k];
}

char *kiln_pspec_format(const kiln_pspec *spec, char *buf, size_t cap) {
  if (!buf || cap == 0) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_pspec_format: %s", buf ? "cap is 0" : "buf is NULL");
    return buf;
  }
  size_t n = (size_t)snprintf(buf, cap, "PartitionSpec(");
  for (int d = 0; spec && d < spec->rank && n < cap; d++) {
    const kdist_entry *e = &spec->dims[d];
    n += (size_t)snprintf(buf + n, cap - n, "%s", d ? ", " : "");
    if (n < cap && e->naxes == 0) n += (size_t)snprintf(buf + n, cap - n, "None");
    if (n < cap && e->naxes == 1) n += (size_t)snprintf(buf + n, cap - n, "'%s'", e->axes[0]);
    for (int k = 0; e->naxes > 1 && k < e->naxes && n < cap; k++)
      n += (size_t)snprintf(buf + n, cap - n, "%s'%s'%s", k ? ", " : "(", e->axes[k],
                            k + 1 == e->naxes ? ")" : "");
  }
  if (n < cap) snprintf(buf + n, cap - n, ")");
  return buf;
}

/* ---- parser: entry (',' entry)*, entry = None | name | '(' [name (',' name)*] ')' ---- */

typedef struct parser {
  const char *text;
  const char *p;
} parser;

static kiln_status parse_error(const parser *ps, const char *what) {
  return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pspec_parse: %s at position %d of \"%s\"", what,
                    (int)(ps->p - ps->text) + 1, ps->text);
}

static void skip_space(parser *ps) {
  while (isspace((unsigned char)*ps->p)) ps->p++;
}

/* A name, optionally quoted as in Python ('data' or "data"). */
static kiln_status parse_name(parser *ps, char dst[KDIST_NAME_MAX]) {
  skip_space(ps);
  char quote = (*ps->p == '\'' || *ps->p == '"') ? *ps->p : 0;
  const char *start = ps->p + (quote != 0);
  const char *q = start;
  while (isalnum((unsigned char)*q) || *q == '_') q++;
  if (q == start) return parse_error(ps, "expected an axis name or None");
  if (quote && *q != quote) {
    ps->p = q;
    return parse_error(ps, "unterminated quoted name");
  }
  if (q - start >= KDIST_NAME_MAX) return parse_error(ps, "axis name too long");
  memcpy(dst, start, (size_t)(q - start));
  dst[q - start] = 0;
  ps->p = q + (quote != 0);
  return KILN_OK;
}

static kiln_status parse_entry(parser *ps, kdist_entry *e) {
  skip_space(ps);
  e->naxes = 0;
  if (*ps->p != '(') {
    kiln_status st = parse_name(ps, e->axes[0]);
    if (st) return st;
    e->naxes = strcmp(e->axes[0], "None") == 0 ? 0 : 1;
    return KILN_OK;
  }
  ps->p++;
  skip_space(ps);
  while (*ps->p != ')') {
    if (e->naxes == KILN_MESH_MAX_AXES) return parse_error(ps, "too many axes in one entry");
    kiln_status st = parse_name(ps, e->axes[e->naxes]);
    if (st) return st;
    if (strcmp(e->axes[e->naxes], "None") == 0) return parse_error(ps, "None inside parentheses");
    e->naxes++;
    skip_space(ps);
    if (*ps->p == ',') ps->p++, skip_space(ps);
    else if (*ps->p != ')') return parse_error(ps, "expected ',' or ')'");
  }
  ps->p++;
  return KILN_OK;
}

kiln_status kiln_pspec_parse(const char *text, kiln_pspec **out) {
  if (!text || !out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pspec_parse: null argument");
  *out = NULL;
  kiln_pspec *spec;
  kiln_status st = kiln_pspec_new(&spec);
  if (st) return st;
  parser ps = {text, text};
  skip_space(&ps);
  while (*ps.p) {
    if (spec->rank == KILN_SPEC_MAX_RANK) {
      st = parse_error(&ps, "too many entries");
      break;
    }
    if ((st = parse_entry(&ps, &spec->dims[spec->rank]))) break;
    spec->rank++;
    skip_space(&ps);
    if (*ps.p == ',') {
      ps.p++;
      skip_space(&ps);
      if (!*ps.p) break; /* a trailing comma, as Python allows */
    } else if (*ps.p) {
      st = parse_error(&ps, "expected ','");
      break;
    }
  }
  if (st) {
    kiln_pspec_free(spec);
    return st;
  }
  *out = spec;
  return KILN_OK;
}
