/* The emitter's context: failures, owned strings, fresh names, and the tree
 * of scopes the kernel text is written into. */
#include <stdio.h>
#include <stdlib.h>
#include "codegen/codegen.h"

kiln_status kcg_fail(kcg_ctx *c, kiln_status s, const char *fmt, ...) {
  if (c->st != KILN_OK) return c->st;
  va_list ap;
  va_start(ap, fmt);
  c->st = kcore_vfail(s, fmt, ap);
  va_end(ap);
  return c->st;
}

static void kcg_oom(kcg_ctx *c) {
  kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
}

/* Grows *v (of *cap elements of `size`) to hold `need`. */
static bool kcg_grow(kcg_ctx *c, void **v, int *cap, int need, size_t size) {
  if (need <= *cap) return true;
  int n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *nv = realloc(*v, (size_t)n * size);
  if (!nv) {
    kcg_oom(c);
    return false;
  }
  memset((char *)nv + (size_t)*cap * size, 0, (size_t)(n - *cap) * size);
  *v = nv;
  *cap = n;
  return true;
}

static void *kcg_keep(kcg_ctx *c, void *ptr) {
  if (!ptr) {
    kcg_oom(c);
    return NULL;
  }
  if (!kcg_grow(c, (void **)&c->allocs, &c->cap_allocs, c->n_allocs + 1, sizeof(void *))) {
    free(ptr);
    return NULL;
  }
  c->allocs[c->n_allocs++] = ptr;
  return ptr;
}

const char *kcg_strf(kcg_ctx *c, const char *fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s) vsnprintf(s, (size_t)n + 1, fmt, again);
  va_end(again);
  va_end(ap);
  s = kcg_keep(c, s);
  return s ? s : "0";
}

const char *kcg_fresh(kcg_ctx *c, const char *prefix) {
  return kcg_strf(c, "%s%d", prefix, c->next_name++);
}

kcg_term kcg_term_make(const char *expr, int scope) {
  kcg_term t = {expr, scope};
  return t;
}

/* ---- scopes ---- */

static int kcg_scope_new(kcg_ctx *c, int parent) {
  if (!kcg_grow(c, (void **)&c->scopes, &c->cap_scopes, c->n_scopes + 1, sizeof(kcg_scope)))
    return -1;
  int s = c->n_scopes++;
  kcg_scope *sc = &c->scopes[s];
  memset(sc, 0, sizeof *sc);
  sc->parent = parent;
  sc->row_loop = -1;
  if (parent >= 0) {
    const kcg_scope *ps = &c->scopes[parent];
    sc->depth = ps->depth + 1;
    sc->indent = ps->indent + 1;
    sc->row_loop = ps->row_loop;
    sc->divergent = ps->divergent;
  } else {
    sc->indent = 1;
  }
  return s;
}

int kcg_scope_open(kcg_ctx *c, int parent, const char *header, const char *footer) {
  KCORE_ASSERT(parent >= 0 && parent < c->n_scopes);
  int s = kcg_scope_new(c, parent);
  if (s < 0) return c->cur;
  kcg_scope *sc = &c->scopes[s];
  sc->header = header ? kcore_strdup(header) : NULL;
  sc->footer = footer ? kcore_strdup(footer) : NULL;
  if ((header && !sc->header) || (footer && !sc->footer)) kcg_oom(c);
  sc->saved_cur = c->cur;
  c->cur = s;
  return s;
}

/* Writes `lines` ('\n'-separated) at an indentation level. */
static void kcg_put_lines(kcg_buf *b, int indent, const char *lines) {
  while (lines && *lines) {
    const char *nl = strchr(lines, '\n');
    size_t n = nl ? (size_t)(nl - lines) : strlen(lines);
    kcg_buf_addf(b, "%*s%.*s\n", 2 * indent, "", (int)n, lines);
    lines += n + (nl ? 1 : 0);
  }
}

void kcg_scope_close(kcg_ctx *c, int s) {
  if (c->st != KILN_OK) return; /* the text is dropped anyway */
  KCORE_ASSERT(s > 0 && s == c->cur);
  kcg_scope *sc = &c->scopes[s];
  kcg_buf *pt = &c->scopes[sc->parent].text;
  int indent = c->scopes[sc->parent].indent;
  kcg_put_lines(pt, indent, sc->header);
  if (sc->text.s) kcg_buf_add(pt, sc->text.s);
  if (sc->text.oom) pt->oom = true;
  kcg_put_lines(pt, indent, sc->footer);
  kcg_buf_free(&sc->text);
  free(sc->header);
  free(sc->footer);
  sc->header = sc->footer = NULL;
  c->cur = sc->saved_cur;
}

void kcg_line(kcg_ctx *c, int scope, const char *fmt, ...) {
  KCORE_ASSERT(scope >= 0 && scope < c->n_scopes);
  kcg_buf *b = &c->scopes[scope].text;
  kcg_buf_addf(b, "%*s", 2 * c->scopes[scope].indent, "");
  va_list ap;
  va_start(ap, fmt);
  kcg_buf_vaddf(b, fmt, ap);
  va_end(ap);
  kcg_buf_add(b, "\n");
}

bool kcg_scope_visible(const kcg_ctx *c, int s) {
  for (int x = c->cur; x >= 0; x = c->scopes[x].parent)
    if (x == s) return true;
  return false;
}

int kcg_scope_deeper(const kcg_ctx *c, int a, int b) {
  return c->scopes[a].depth >= c->scopes[b].depth ? a : b;
}

void kcg_helper(kcg_ctx *c, const char *line) {
  if (c->helpers.s) {
    /* Lines are few and short; a plain search keeps them unique. */
    for (const char *at = c->helpers.s; (at = strstr(at, line)); at++)
      if ((at == c->helpers.s || at[-1] == '\n') && at[strlen(line)] == '\n') return;
  }
  kcg_buf_addf(&c->helpers, "%s\n", line);
}

/* ---- the context ---- */

kiln_status kcg_ctx_init(kcg_ctx *c, const kir_program *p, const kfuse_group *g,
                         const kcg_target_info *t) {
  memset(c, 0, sizeof *c);
  c->p = p;
  c->g = g;
  c->t = *t;
  c->pass = -1;
  int nv = p->n_vars, ne = p->n_eqns, na = g->n_in + g->n_out;
  c->arg = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
  c->def = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
  c->reduce_set = malloc(sizeof(int) * (size_t)(ne ? ne : 1));
  c->cacheable = calloc((size_t)(nv ? nv : 1), sizeof(bool));
  c->bf16_rounded = calloc((size_t)(nv ? nv : 1), sizeof(bool));
  c->cache = calloc((size_t)(nv ? nv : 1), sizeof(kcg_row_cache));
  c->arg_used = calloc((size_t)(na ? na : 1), sizeof(bool));
  c->arg_at_item = calloc((size_t)(na ? na : 1), sizeof(bool));
  if (!c->arg || !c->def || !c->reduce_set || !c->cacheable || !c->bf16_rounded || !c->cache ||
      !c->arg_used || !c->arg_at_item)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  for (int v = 0; v < nv; v++) c->arg[v] = c->def[v] = -1;
  for (int e = 0; e < ne; e++) c->reduce_set[e] = -1;
  if (kcg_scope_new(c, -1) != 0) return c->st;
  c->cur = 0;
  /* Index 0 is the scalar position, so that a failed allocation can always
   * return a valid index. */
  kcg_term zero = kcg_term_make("0", 0);
  kcg_index_get(c, 0, NULL, &zero, NULL);
  return c->st;
}

void kcg_ctx_free(kcg_ctx *c) {
  for (int i = 0; i < c->n_allocs; i++) free(c->allocs[i]);
  free(c->allocs);
  for (int s = 0; s < c->n_scopes; s++) {
    kcg_buf_free(&c->scopes[s].text);
    free(c->scopes[s].header);
    free(c->scopes[s].footer);
  }
  free(c->scopes);
  free(c->idx);
  free(c->memo);
  free(c->arg);
  free(c->def);
  free(c->reduce_set);
  free(c->cacheable);
  free(c->bf16_rounded);
  free(c->cache);
  free(c->arg_used);
  free(c->arg_at_item);
  free(c->set_start);
  free(c->set_eqns);
  free(c->set_depth);
  free(c->row_loops);
  kcg_buf_free(&c->helpers);
  memset(c, 0, sizeof *c);
}

bool kcg_grow_table(kcg_ctx *c, void **v, int *cap, int need, size_t size) {
  return kcg_grow(c, v, cap, need, size);
}
