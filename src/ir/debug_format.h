/* debug_print's text (see debug_format.c), private to its files: the growing
 * string, the decimal digits of a float, and what the files share
 * (debug_scalar.c: digits and one value's text; debug_array.c: numpy's
 * array2string; debug_format.c: the format string). The ir module's door
 * stays ir.h. */
#ifndef KILN_IR_DEBUG_FORMAT_H
#define KILN_IR_DEBUG_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"
#include "ir/ir.h"

typedef struct kir_text {
  char *s;
  size_t n, cap;
  bool oom;
} kir_text;

/* A positive decimal d[0].d[1]...d[n-1] x 10^e, d[0] != '0', no trailing
 * zeros; n == 0 is the value 0. */
#define KIR_EXACT_DIGITS 832
typedef struct kir_dec {
  char d[KIR_EXACT_DIGITS];
  int n, e;
} kir_dec;

/* A float to print: its magnitude and the interval of reals that round to
 * it in its own type. */
typedef struct kir_fval {
  kiln_dtype dtype; /* KILN_F16, KILN_F32 or KILN_F64 (the digits' type) */
  double v;         /* > 0, finite */
  kir_dec exact;    /* v's digits */
  bool even;        /* even mantissa: the interval's ends round to v */
  kir_dec lo, hi;   /* the interval's ends (f16 and f32; exact doubles) */
} kir_fval;

/* debug_scalar.c */
void kir_dec_round(const kir_dec *x, int p, kir_dec *out);
void kir_dec_split(const kir_dec *x, char *ip, char *fp);
void kir_digits_cut(const kir_fval *f, bool scientific, int frac, kir_dec *out);
void kir_fval_init(kir_fval *f, kiln_dtype dtype, double v);
bool kir_is_unsigned(kiln_dtype d);
void kir_put_bf16(kir_text *t, double v);
void kir_put_exponent(kir_text *t, int e, int digits);
void kir_put_scalar(kir_text *t, const kir_buffer *b, bool as_str);
void kir_text_putn(kir_text *t, const char *s, size_t n);
void kir_text_puts(kir_text *t, const char *s);
void kir_text_repeat(kir_text *t, char c, int n);
void kir_text_rstrip(kir_text *t);

/* debug_array.c: a value as jax.debug.print shows it (`as_str`: numpy's
 * scalar str for rank 0, else Python's format) */
void kir_put_value(kir_text *t, const kir_buffer *b, bool as_str);

#endif
