// The random programs' equations: elementwise, structural, reductions and
// windows (ir_program_gen.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "ir_program_gen.h"

namespace ir_test {

void Gen::Elementwise(Scope &s) {
  static const std::vector<kir_prim> float_unary = {
      KIR_PRIM_FLOOR, KIR_PRIM_CEIL,  KIR_PRIM_EXP,   KIR_PRIM_EXP2,     KIR_PRIM_EXPM1,
      KIR_PRIM_LOG,   KIR_PRIM_LOG1P, KIR_PRIM_SQRT,  KIR_PRIM_RSQRT,    KIR_PRIM_CBRT,
      KIR_PRIM_TANH,  KIR_PRIM_LOGISTIC, KIR_PRIM_SIN, KIR_PRIM_COS,     KIR_PRIM_TAN,
      KIR_PRIM_ASIN,  KIR_PRIM_ACOS,  KIR_PRIM_ATAN,  KIR_PRIM_SINH,     KIR_PRIM_COSH,
      KIR_PRIM_ASINH, KIR_PRIM_ACOSH, KIR_PRIM_ATANH, KIR_PRIM_ERF,      KIR_PRIM_ERF_INV,
      KIR_PRIM_IS_FINITE, KIR_PRIM_SQUARE, KIR_PRIM_ERFC, KIR_PRIM_LGAMMA, KIR_PRIM_DIGAMMA,
      KIR_PRIM_COPY, KIR_PRIM_BESSEL_I0E, KIR_PRIM_BESSEL_I1E};
  static const std::vector<kir_prim> num_binary = {KIR_PRIM_ADD, KIR_PRIM_SUB, KIR_PRIM_MUL,
                                                   KIR_PRIM_DIV, KIR_PRIM_REM, KIR_PRIM_MAX,
                                                   KIR_PRIM_MIN};
  static const std::vector<kir_prim> compares = {KIR_PRIM_EQ, KIR_PRIM_NE, KIR_PRIM_LT,
                                                 KIR_PRIM_LE, KIR_PRIM_GT, KIR_PRIM_GE};
  static const std::vector<kir_prim> logic = {KIR_PRIM_AND, KIR_PRIM_OR, KIR_PRIM_XOR};
  static const std::vector<kir_prim> shifts = {KIR_PRIM_SHIFT_LEFT,
                                               KIR_PRIM_SHIFT_RIGHT_LOGICAL,
                                               KIR_PRIM_SHIFT_RIGHT_ARITHMETIC};
  kir_vid x;
  kir_params par = Zero();
  switch (Int(0, 11)) {
    case 0:
      if ((x = VarIn(s, KIR_DT_FLOAT)) != KIR_NO_VAR)
        Add(s, float_unary[next_unary_++ % float_unary.size()], nullptr, {x});
      break;
    case 1:
      if ((x = VarIn(s, KIR_DT_NUM)) != KIR_NO_VAR)
        Add(s, Coin() ? KIR_PRIM_NEG : KIR_PRIM_SIGN, nullptr, {x});
      if ((x = VarIn(s, KIR_DT_SINT | KIR_DT_FLOAT)) != KIR_NO_VAR)
        Add(s, KIR_PRIM_ABS, nullptr, {x});
      break;
    case 2:
      if ((x = VarIn(s, KIR_DT_BOOL | KIR_DT_INT)) != KIR_NO_VAR) Add(s, KIR_PRIM_NOT, nullptr, {x});
      if ((x = VarIn(s, KIR_DT_INT)) != KIR_NO_VAR)
        Add(s, KIR_PRIM_POPULATION_COUNT, nullptr, {x});
      if ((x = VarIn(s, KIR_DT_ANY)) != KIR_NO_VAR) Add(s, KIR_PRIM_STOP_GRADIENT, nullptr, {x});
      break;
    case 3:
      if ((x = VarIn(s, KIR_DT_FLOAT)) != KIR_NO_VAR) {
        par.round.rounding_method = Int(0, 1);
        Add(s, KIR_PRIM_ROUND, &par, {x});
        par = Zero();
        par.integer_pow.y = Int(-3, 5);
        Add(s, KIR_PRIM_INTEGER_POW, &par, {x});
        par = Zero();
        par.reduce_precision.exponent_bits = Int(1, 11);
        par.reduce_precision.mantissa_bits = Int(0, 52);
        Add(s, KIR_PRIM_REDUCE_PRECISION, &par, {x});
      }
      break;
    case 4:
      if ((x = VarIn(s, KIR_DT_NUM)) != KIR_NO_VAR) Add(s, Pick(num_binary), nullptr, {x, Partner(s, x)});
      break;
    case 5:
      x = AnyVar(s);
      Add(s, Pick(compares), nullptr, {Partner(s, x), x});
      break;
    case 6:
      if ((x = VarIn(s, KIR_DT_FLOAT)) != KIR_NO_VAR) {
        Add(s, Coin() ? KIR_PRIM_ATAN2 : KIR_PRIM_NEXTAFTER, nullptr, {x, Partner(s, x)});
        Add(s, KIR_PRIM_POW, nullptr, {x, Coin() ? Partner(s, x) : Literal(s.p, KILN_I32, false)});
      }
      break;
    case 7:
      if ((x = VarIn(s, KIR_DT_BOOL | KIR_DT_INT)) != KIR_NO_VAR)
        Add(s, Pick(logic), nullptr, {x, Partner(s, x)});
      if ((x = VarIn(s, KIR_DT_INT)) != KIR_NO_VAR) Add(s, Pick(shifts), nullptr, {x, Partner(s, x)});
      break;
    case 8: {
      x = AnyVar(s);
      std::vector<kir_vid> cmp;
      if (Add(s, KIR_PRIM_EQ, nullptr, {x, x}, &cmp)) {
        kir_vid which = Coin() ? cmp[0] : Literal(s.p, KILN_BOOL, false);
        Add(s, KIR_PRIM_SELECT_N, nullptr, {which, x, Partner(s, x)});
      }
      Add(s, KIR_PRIM_SELECT_N, nullptr, {Literal(s.p, KILN_I32, false), x, x, x});
      break;
    }
    case 9:
      x = AnyVar(s);
      Add(s, KIR_PRIM_CLAMP, nullptr, {Literal(s.p, Type(s, x).dtype, false), x,
                                       Literal(s.p, Type(s, x).dtype, false)});
      break;
    case 10:
      x = AnyVar(s);
      par.convert.new_dtype = Dtype();
      par.convert.weak_type = Coin(0.2);
      Add(s, KIR_PRIM_CONVERT_ELEMENT_TYPE, &par, {x});
      break;
    default: {
      x = AnyVar(s);
      kiln_dtype dt = Type(s, x).dtype;
      if (kiln_dtype_is_bool(dt)) break;
      static const kiln_dtype same_width[4][3] = {{KILN_I8, KILN_U8, KILN_U8},
                                                  {KILN_I16, KILN_F16, KILN_BF16},
                                                  {KILN_I32, KILN_U32, KILN_F32},
                                                  {KILN_I64, KILN_U64, KILN_F64}};
      int w = kiln_dtype_size(dt) == 1 ? 0 : kiln_dtype_size(dt) == 2 ? 1
            : kiln_dtype_size(dt) == 4 ? 2 : 3;
      par.bitcast.new_dtype = same_width[w][Int(0, 2)];
      Add(s, KIR_PRIM_BITCAST_CONVERT_TYPE, &par, {x});
    }
  }
}

void Gen::Structure(Scope &s) {
  kir_vid x = AnyVar(s);
  const kir_aval t = Type(s, x);
  kir_params par = Zero();
  switch (Int(0, 12)) {
    case 0: {  // broadcast_in_dim: a new leading axis
      if (t.rank >= 6) break;
      int64_t shape[KIR_MAX_RANK];
      shape[0] = Int(1, 3);
      std::vector<int> dims;
      for (int i = 0; i < t.rank; i++) {
        shape[i + 1] = t.shape[i] == 1 && Coin() ? Int(2, 3) : t.shape[i];
        dims.push_back(i + 1);
      }
      par.broadcast.shape = Sizes(shape, t.rank + 1);
      par.broadcast.broadcast_dimensions = Dims(dims);
      Add(s, KIR_PRIM_BROADCAST_IN_DIM, &par, {x});
      break;
    }
    case 1: {  // reshape to (size,) or (1, size)
      int64_t shape[2] = {1, kir_aval_size(&t)};
      par.reshape.new_sizes = Coin() ? Sizes(shape + 1, 1) : Sizes(shape, 2);
      Add(s, KIR_PRIM_RESHAPE, &par, {x});
      break;
    }
    case 2: {
      std::vector<int> perm;
      for (int i = 0; i < t.rank; i++) perm.push_back(i);
      std::shuffle(perm.begin(), perm.end(), rng_);
      par.transpose.permutation = Dims(perm);
      Add(s, KIR_PRIM_TRANSPOSE, &par, {x});
      break;
    }
    case 3: {  // expand_dims, then squeeze the new axes again
      if (t.rank >= 6) break;
      std::vector<int> dims = {0};
      if (Coin()) dims.push_back(t.rank + 1);
      par.dims.dimensions = Dims(dims);
      std::vector<kir_vid> out;
      if (Add(s, KIR_PRIM_EXPAND_DIMS, &par, {x}, &out)) Add(s, KIR_PRIM_SQUEEZE, &par, {out[0]});
      par.dims.dimensions = Dims(Subset(t.rank));
      Add(s, KIR_PRIM_REV, &par, {x});
      break;
    }
    case 4: {
      if (t.rank == 0) break;
      int64_t lo[KIR_MAX_RANK], hi[KIR_MAX_RANK], st[KIR_MAX_RANK];
      for (int i = 0; i < t.rank; i++) {
        lo[i] = Int(0, (int)t.shape[i]);
        hi[i] = Int((int)lo[i], (int)t.shape[i]);
        st[i] = Int(1, 3);
      }
      par.slice.start_indices = Sizes(lo, t.rank);
      par.slice.limit_indices = Sizes(hi, t.rank);
      par.slice.strides = Sizes(st, t.rank);
      Add(s, KIR_PRIM_SLICE, &par, {x});
      break;
    }
    case 5: {
      par.pad.padding_config.n = t.rank;
      for (int i = 0; i < t.rank; i++) {
        par.pad.padding_config.lo[i] = Int(-1, 2);
        par.pad.padding_config.hi[i] = Int(0, 2);
        par.pad.padding_config.interior[i] = Int(0, 2);
      }
      Add(s, KIR_PRIM_PAD, &par, {x, Literal(s.p, t.dtype, Coin())});
      break;
    }
    case 6:
      if (t.rank == 0) break;
      par.concatenate.dimension = Int(0, t.rank - 1);
      Add(s, KIR_PRIM_CONCATENATE, &par, {x, x});
      break;
    case 7: {
      int64_t shape[3] = {Int(1, 4), Int(1, 4), Int(1, 4)};
      int rank = Int(1, 3);
      par.iota.shape = Sizes(shape, rank);
      par.iota.dimension = Int(0, rank - 1);
      static const kiln_dtype dts[] = {KILN_I32, KILN_U8, KILN_F32, KILN_BF16, KILN_I64};
      par.iota.dtype = dts[Int(0, 4)];
      Add(s, KIR_PRIM_IOTA, &par, {});
      break;
    }
    case 8: {  // dynamic_slice / dynamic_update_slice with literal starts
      std::vector<kir_vid> in = {x};
      int64_t sizes[KIR_MAX_RANK];
      kiln_dtype idt = Coin() ? KILN_I32 : KILN_I64;
      for (int i = 0; i < t.rank; i++) {
        sizes[i] = Int(0, (int)t.shape[i]);
        kir_vid v;
        EXPECT_EQ(kir_add_literal(s.p, idt, false, kir_scalar_i(Int(-2, 4)), &v), KILN_OK);
        in.push_back(v);
      }
      par.dynamic_slice.slice_sizes = Sizes(sizes, t.rank);
      std::vector<kir_vid> out;
      if (Add(s, KIR_PRIM_DYNAMIC_SLICE, &par, in, &out)) {
        in.insert(in.begin() + 1, out[0]);
        Add(s, KIR_PRIM_DYNAMIC_UPDATE_SLICE, nullptr, in);
      }
      break;
    }
    case 9: {  // embedding lookup and its scatter-add transpose
      kir_vid table = VarIn(s, KIR_DT_ANY, 2);
      if (table == KIR_NO_VAR || Type(s, table).rank != 2) break;
      const kir_aval tt = Type(s, table);
      kir_params ip = Zero();
      int64_t ishape[2] = {Int(1, 4), 1};
      ip.iota.shape = Sizes(ishape, 2);
      ip.iota.dtype = KILN_I32;
      std::vector<kir_vid> idx;
      if (!Add(s, KIR_PRIM_IOTA, &ip, {}, &idx)) break;
      kir_p_gather &g = par.gather;
      g.dimension_numbers.offset_dims = Dims({1});
      g.dimension_numbers.collapsed_slice_dims = Dims({0});
      g.dimension_numbers.start_index_map = Dims({0});
      int64_t ss[2] = {1, tt.shape[1]};
      g.slice_sizes = Sizes(ss, 2);
      g.mode = (kir_gather_mode)Int(0, 2);
      g.fill_value.present = Coin();
      g.fill_value.v = Coin() ? NAN : -1.5;
      g.indices_are_sorted = Coin();
      g.unique_indices = Coin();
      std::vector<kir_vid> rows;
      if (!Add(s, KIR_PRIM_GATHER, &par, {table, idx[0]}, &rows)) break;
      kir_params sp = Zero();
      kir_p_scatter &sc = sp.scatter;
      sc.dimension_numbers.update_window_dims = Dims({1});
      sc.dimension_numbers.inserted_window_dims = Dims({0});
      sc.dimension_numbers.scatter_dims_to_operand_dims = Dims({0});
      sc.mode = (kir_gather_mode)Int(0, 2);
      sc.indices_are_sorted = Coin();
      static const std::vector<kir_prim> scatters = {
          KIR_PRIM_SCATTER_ADD, KIR_PRIM_SCATTER, KIR_PRIM_SCATTER_MUL, KIR_PRIM_SCATTER_MIN,
          KIR_PRIM_SCATTER_MAX};
      Add(s, Pick(scatters), &sp, {table, idx[0], rows[0]});
      Add(s, KIR_PRIM_OPTIMIZATION_BARRIER, nullptr, {table, rows[0]});
      break;
    }
    case 10: {  // threefry2x32 on uint32 values
      kir_vid k1 = Literal(s.p, KILN_U32, false), k2 = Literal(s.p, KILN_U32, false);
      kir_vid u = VarIn(s, KIR_DT_UINT);
      if (u == KIR_NO_VAR || Type(s, u).dtype != KILN_U32) u = Literal(s.p, KILN_U32, false);
      Add(s, KIR_PRIM_THREEFRY2X32, nullptr, {k1, k2, u, Coin() ? u : k1});
      break;
    }
    case 11: {  // conv_general_dilated of x with itself (features match)
      kir_vid m = VarIn(s, KIR_DT_FLOAT, 2);
      if (m == KIR_NO_VAR) break;
      const kir_aval mt = Type(s, m);
      kir_p_conv &c = par.conv;
      std::vector<int> spec;
      for (int i = 0; i < mt.rank; i++) spec.push_back(i);
      c.dimension_numbers = {Dims(spec), Dims(spec), Dims(spec)};
      int n_sp = mt.rank - 2;
      int64_t one[KIR_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1}, st[KIR_MAX_RANK];
      for (int i = 0; i < n_sp; i++) st[i] = Int(1, 2);
      c.window_strides = Sizes(st, n_sp);
      c.lhs_dilation = Sizes(one, n_sp);
      c.rhs_dilation = Sizes(one, n_sp);
      c.padding.n = n_sp;
      for (int i = 0; i < n_sp; i++) c.padding.lo[i] = Int(0, 1), c.padding.hi[i] = Int(0, 1);
      c.feature_group_count = c.batch_group_count = 1;
      c.preferred_element_type = Coin(0.7) ? KILN_INVALID_DTYPE : mt.dtype;
      Add(s, KIR_PRIM_CONV_GENERAL_DILATED, &par, {m, m});
      break;
    }
    default: {  // dot_general: x with itself, contracting the last axis
      kir_vid m = VarIn(s, KIR_DT_NUM, 1);
      if (m == KIR_NO_VAR) break;
      const kir_aval mt = Type(s, m);
      int last = mt.rank - 1;
      kir_p_dot &d = par.dot;
      d.dimension_numbers.lhs_contracting = Dims({last});
      d.dimension_numbers.rhs_contracting = Dims({last});
      if (mt.rank >= 2 && Coin()) {
        d.dimension_numbers.lhs_batch = Dims({0});
        d.dimension_numbers.rhs_batch = Dims({0});
      }
      d.preferred_element_type = Coin(0.7) ? KILN_INVALID_DTYPE : mt.dtype;
      Add(s, KIR_PRIM_DOT_GENERAL, &par, {m, m});
    }
  }
}

void Gen::Reduction(Scope &s) {
  kir_params par = Zero();
  kir_vid x = AnyVar(s);
  const kir_aval t = Type(s, x);
  static const std::vector<kir_prim> reds = {KIR_PRIM_REDUCE_SUM, KIR_PRIM_REDUCE_MAX,
                                             KIR_PRIM_REDUCE_MIN, KIR_PRIM_REDUCE_PROD,
                                             KIR_PRIM_REDUCE_AND, KIR_PRIM_REDUCE_OR};
  static const std::vector<kir_prim> cums = {KIR_PRIM_CUMSUM, KIR_PRIM_CUMPROD,
                                             KIR_PRIM_CUMMAX, KIR_PRIM_CUMMIN,
                                             KIR_PRIM_CUMLOGSUMEXP};
  switch (Int(0, 4)) {
    case 3: Window(s); break;
    case 0:
      par.axes.axes = Dims(Subset(t.rank));
      Add(s, Pick(reds), &par, {x});
      break;
    case 1:
      if (t.rank == 0) break;
      par.argminmax.axes = Dims({Int(0, t.rank - 1)});
      par.argminmax.index_dtype = Coin() ? KILN_I32 : KILN_U8;
      Add(s, Coin() ? KIR_PRIM_ARGMAX : KIR_PRIM_ARGMIN, &par, {x});
      break;
    case 2:
      if (t.rank == 0) break;
      par.cumulative.axis = Int(0, t.rank - 1);
      par.cumulative.reverse = Coin();
      Add(s, Pick(cums), &par, {x});
      par = Zero();
      par.top_k.axis = Int(0, t.rank - 1);
      par.top_k.k = Int(0, (int)t.shape[par.top_k.axis]);
      Add(s, KIR_PRIM_TOP_K, &par, {x});
      break;
    default: {
      if (t.rank == 0) break;
      std::vector<kir_vid> in = {x};
      for (kir_vid v : s.pool)
        if (in.size() < 3 && v != x && kir_aval_same_shape(&Type(s, v), &t)) in.push_back(v);
      par.sort.dimension = Int(0, t.rank - 1);
      par.sort.is_stable = Coin();
      par.sort.num_keys = Int(1, (int)in.size());
      Add(s, KIR_PRIM_SORT, &par, in);
    }
  }
}

// reduce_window_*, then select_and_gather_add / select_and_scatter_add
// over the same window when x is a float.
void Gen::Window(Scope &s) {
  kir_vid x = VarIn(s, KIR_DT_NUM, 1);
  if (x == KIR_NO_VAR) return;
  const kir_aval t = Type(s, x);
  kir_params par = Zero();
  kir_p_window &w = par.window;
  w.window_dimensions.n = w.window_strides.n = w.base_dilation.n = w.window_dilation.n = t.rank;
  w.padding.n = t.rank;
  for (int d = 0; d < t.rank; d++) {
    w.window_dimensions.v[d] = Int(1, 3);
    w.window_strides.v[d] = Int(1, 2);
    w.base_dilation.v[d] = Coin(0.8) ? 1 : 2;
    w.window_dilation.v[d] = Coin(0.8) ? 1 : 2;
    w.padding.lo[d] = Int(0, 1);
    w.padding.hi[d] = Int(-1, 1);
  }
  static const std::vector<kir_prim> ops = {
      KIR_PRIM_REDUCE_WINDOW_SUM, KIR_PRIM_REDUCE_WINDOW_MAX, KIR_PRIM_REDUCE_WINDOW_MIN};
  std::vector<kir_vid> y;
  if (!Add(s, Pick(ops), &par, {x}, &y) || !kiln_dtype_is_float(t.dtype)) return;
  w.select_prim = Coin() ? KIR_PRIM_GE : KIR_PRIM_LE;
  kir_params gather = Zero();
  gather.select_gather = w;
  Add(s, KIR_PRIM_SELECT_AND_GATHER_ADD, &gather, {x, x});
  w.base_dilation.n = w.window_dilation.n = 0;
  for (int d = 0; d < t.rank; d++) w.base_dilation.v[d] = w.window_dilation.v[d] = 0;
  kir_params scatter = Zero();
  scatter.select_scatter = w;
  if (!Add(s, KIR_PRIM_REDUCE_WINDOW_SUM, &par, {x}, &y)) return;
  Add(s, KIR_PRIM_SELECT_AND_SCATTER_ADD, &scatter, {y[y.size() - 1], x});
}

}  // namespace ir_test
