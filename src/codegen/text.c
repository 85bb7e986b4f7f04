/* Growable strings for emitting source text. */
#include <stdio.h>
#include <stdlib.h>
#include "codegen/codegen.h"

static bool kcg_buf_reserve(kcg_buf *b, size_t extra) {
  if (b->oom) return false;
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap *= 2;
  char *s = realloc(b->s, cap);
  if (!s) {
    b->oom = true;
    return false;
  }
  b->s = s;
  b->cap = cap;
  return true;
}

void kcg_buf_add(kcg_buf *b, const char *text) {
  size_t n = strlen(text);
  if (!kcg_buf_reserve(b, n)) return;
  memcpy(b->s + b->len, text, n + 1);
  b->len += n;
}

void kcg_buf_vaddf(kcg_buf *b, const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n >= 0 && kcg_buf_reserve(b, (size_t)n)) {
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, again);
    b->len += (size_t)n;
  } else if (n < 0) {
    b->oom = true;
  }
  va_end(again);
}

void kcg_buf_addf(kcg_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kcg_buf_vaddf(b, fmt, ap);
  va_end(ap);
}

void kcg_buf_free(kcg_buf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}
