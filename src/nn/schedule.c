/* Learning-rate schedules with optax's formulas, traced over the step count
 * in float32. */
#include <math.h>
#include <string.h>
#include "nn/nn.h"

kiln_schedule kiln_constant_schedule(double value) {
  kiln_schedule s;
  memset(&s, 0, sizeof s);
  s.kind = KILN_SCHEDULE_CONSTANT;
  s.init_value = value;
  return s;
}

kiln_schedule kiln_linear_schedule(double init_value, double end_value, int64_t transition_steps,
                                   int64_t transition_begin) {
  kiln_schedule s = kiln_constant_schedule(init_value);
  s.kind = KILN_SCHEDULE_LINEAR;
  s.end_value = end_value;
  s.transition_steps = transition_steps;
  s.transition_begin = transition_begin < 0 ? 0 : transition_begin;
  return s;
}

kiln_schedule kiln_cosine_decay_schedule(double init_value, int64_t decay_steps, double alpha,
                                         double exponent) {
  kiln_schedule s = kiln_constant_schedule(init_value);
  s.kind = KILN_SCHEDULE_COSINE_DECAY;
  s.decay_steps = decay_steps;
  s.alpha = alpha;
  s.exponent = exponent;
  return s;
}

kiln_schedule kiln_warmup_cosine_decay_schedule(double init_value, double peak_value,
                                                int64_t warmup_steps, int64_t decay_steps,
                                                double end_value, double exponent) {
  kiln_schedule s = kiln_cosine_decay_schedule(init_value, decay_steps, 0, exponent);
  s.kind = KILN_SCHEDULE_WARMUP_COSINE_DECAY;
  s.peak_value = peak_value;
  s.end_value = end_value;
  s.warmup_steps = warmup_steps;
  s.alpha = peak_value == 0.0 ? 0.0 : end_value / peak_value;
  return s;
}

kiln_schedule kiln_exponential_decay(double init_value, int64_t transition_steps,
                                     double decay_rate, int64_t transition_begin, int staircase,
                                     double end_value) {
  kiln_schedule s = kiln_constant_schedule(init_value);
  s.kind = KILN_SCHEDULE_EXPONENTIAL_DECAY;
  s.transition_steps = transition_steps;
  s.decay_rate = decay_rate;
  s.transition_begin = transition_begin < 0 ? 0 : transition_begin;
  s.staircase = staircase;
  s.end_value = end_value;
  return s;
}

static kiln_val *f32(kiln_trace *t, double v) { return kiln_scalar(t, KILN_F32, v); }

/* polynomial_schedule with power 1: clip(count - begin, 0, steps) / steps. */
static kiln_val *linear(kiln_trace *t, double init, double end, int64_t steps, int64_t begin,
                        kiln_val *count) {
  if (steps <= 0) return f32(t, init);
  kiln_val *c = kiln_clamp(t, f32(t, 0), kiln_sub(t, count, f32(t, (double)begin)),
                           f32(t, (double)steps));
  kiln_val *frac = kiln_sub(t, f32(t, 1), kiln_div(t, c, f32(t, (double)steps)));
  return kiln_add(t, kiln_mul(t, f32(t, init - end), frac), f32(t, end));
}

/* cosine_decay_schedule: init * ((1 - alpha) * cos_decay ** exponent + alpha). */
static kiln_val *cosine(kiln_trace *t, double init, int64_t steps, double alpha, double exponent,
                        kiln_val *count) {
  kiln_val *c = kiln_min(t, count, f32(t, (double)steps));
  kiln_val *arg = kiln_div(t, kiln_mul(t, f32(t, 3.14159265358979323846), c), f32(t, (double)steps));
  kiln_val *decay = kiln_mul(t, f32(t, 0.5), kiln_add(t, f32(t, 1), kiln_cos(t, arg)));
  if (exponent != 1.0) decay = kiln_pow(t, decay, f32(t, exponent));
  kiln_val *d = kiln_add(t, kiln_mul(t, f32(t, 1 - alpha), decay), f32(t, alpha));
  return kiln_mul(t, f32(t, init), d);
}

static kiln_val *exponential(kiln_trace *t, const kiln_schedule *s, kiln_val *count) {
  if (s->decay_rate == 0.0) return f32(t, s->init_value);
  kiln_val *dc = kiln_sub(t, count, f32(t, (double)s->transition_begin));
  kiln_val *p = kiln_div(t, dc, f32(t, (double)s->transition_steps));
  if (s->staircase) p = kiln_floor(t, p);
  kiln_val *v = kiln_where(t, kiln_le(t, dc, f32(t, 0)), f32(t, s->init_value),
                           kiln_mul(t, f32(t, s->init_value), kiln_pow(t, f32(t, s->decay_rate), p)));
  if (!isnan(s->end_value))
    v = s->decay_rate < 1.0 ? kiln_max(t, v, f32(t, s->end_value)) : kiln_min(t, v, f32(t, s->end_value));
  return v;
}

kiln_val *kiln_schedule_value(kiln_trace *t, const kiln_schedule *s, kiln_val *count) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (!s || !count) {
    kiln_trace_fail(t, KILN_ERR_ARGUMENT, "kiln_schedule_value: schedule or count is NULL");
    return NULL;
  }
  kiln_val *c = kiln_convert(t, count, KILN_F32);
  switch (s->kind) {
    case KILN_SCHEDULE_CONSTANT: return f32(t, s->init_value);
    case KILN_SCHEDULE_LINEAR:
      return linear(t, s->init_value, s->end_value, s->transition_steps, s->transition_begin, c);
    case KILN_SCHEDULE_COSINE_DECAY:
      if (s->decay_steps <= 0) break;
      return cosine(t, s->init_value, s->decay_steps, s->alpha, s->exponent, c);
    case KILN_SCHEDULE_WARMUP_COSINE_DECAY: {
      if (s->decay_steps - s->warmup_steps <= 0) break;
      /* join_schedules: warmup before the boundary, then cosine of (count - warmup). */
      kiln_val *w = linear(t, s->init_value, s->peak_value, s->warmup_steps, 0, c);
      kiln_val *d = cosine(t, s->peak_value, s->decay_steps - s->warmup_steps, s->alpha,
                           s->exponent, kiln_sub(t, c, f32(t, (double)s->warmup_steps)));
      return kiln_where(t, kiln_lt(t, c, f32(t, (double)s->warmup_steps)), w, d);
    }
    case KILN_SCHEDULE_EXPONENTIAL_DECAY:
      if (s->transition_steps <= 0) return f32(t, s->init_value);
      return exponential(t, s, c);
  }
  kiln_trace_fail(t, KILN_ERR_ARGUMENT,
                  "kiln_schedule_value: invalid schedule (an unknown kind, or decay_steps not "
                  "above warmup_steps)");
  return NULL;
}
