// kiln's IR text: print -> parse -> print round trips over random well-typed
// programs, canonical texts, and malformed text with line:column messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"

namespace {

struct ProgramFree {
  void operator()(kir_program *p) const { kir_program_free(p); }
};
using Program = std::unique_ptr<kir_program, ProgramFree>;

bool Contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

std::string Print(const kir_program *p) {
  char *text = nullptr;
  EXPECT_EQ(kir_print(p, &text), KILN_OK) << kiln_last_error();
  std::string s = text ? text : "";
  free(text);
  return s;
}

Program Parse(const std::string &text) {
  kir_program *p = nullptr;
  EXPECT_EQ(kir_parse(text.c_str(), &p), KILN_OK) << kiln_last_error() << "\n" << text;
  return Program(p);
}

// ---------------------------------------------------------------------------
// Random well-typed programs

const kiln_dtype kAllDtypes[] = {KILN_BOOL, KILN_I8,  KILN_I16,  KILN_I32, KILN_I64,
                                 KILN_U8,   KILN_U16, KILN_U32,  KILN_U64, KILN_F16,
                                 KILN_BF16, KILN_F32, KILN_F64};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T &Pick(const std::vector<T> &v) { return v[(size_t)Int(0, (int)v.size() - 1)]; }

  kiln_dtype Dtype() { return kAllDtypes[Int(0, 12)]; }

  kir_aval Aval(int max_rank = 3) {
    int64_t shape[KIR_MAX_RANK];
    int rank = Int(0, max_rank);
    for (int i = 0; i < rank; i++) shape[i] = Int(0, 4) == 0 ? 1 : Int(1, 5);
    return kir_aval_make(Dtype(), rank, shape, Coin(0.2));
  }

  kir_vid Literal(kir_program *p, kiln_dtype dt, bool weak) {
    kir_scalar s;
    if (kiln_dtype_is_float(dt)) {
      const double specials[] = {0.5, -2.25, 1e-7, 3.0e38, NAN, INFINITY, -INFINITY, -0.0, 1e300};
      s.f = Coin(0.4) ? specials[Int(0, 8)]
                      : std::uniform_real_distribution<double>(-1000, 1000)(rng_);
      if (dt != KILN_F64 && s.f == 1e300) s.f = 7.0;
    } else if (kiln_dtype_is_bool(dt)) {
      s.i = Int(0, 1);
    } else {
      int bits = (int)kiln_dtype_size(dt) * 8;
      uint64_t r = rng_();
      if (bits < 64) r &= (1ull << bits) - 1;
      if (kiln_dtype_is_unsigned(dt)) {
        s.u = r;
      } else {
        // sign-extend the low bits
        s.i = bits < 64 ? (int64_t)(r << (64 - bits)) >> (64 - bits) : (int64_t)r;
      }
    }
    kir_vid v = KIR_NO_VAR;
    EXPECT_EQ(kir_add_literal(p, dt, weak, s, &v), KILN_OK) << kiln_last_error();
    return v;
  }

  // ---- the program builder ----

  struct Scope {
    kir_program *p;
    std::vector<kir_vid> pool;
    int depth;
  };

  const kir_aval &Type(const Scope &s, kir_vid v) { return s.p->vars[v].aval; }

  bool Add(Scope &s, kir_prim prim, const kir_params *par, std::vector<kir_vid> in,
           std::vector<kir_vid> *outs = nullptr) {
    int idx;
    if (kir_add_eqn(s.p, prim, par, (int)in.size(), in.data(), &idx) != KILN_OK) {
      rejected_++;
      return false;
    }
    covered_.insert(prim);
    accepted_++;
    const kir_eqn &e = s.p->eqns[idx];
    for (int k = 0; k < e.n_out; k++) {
      s.pool.push_back(e.out[k]);
      if (outs) outs->push_back(e.out[k]);
    }
    return true;
  }

  kir_params Zero() {
    kir_params par;
    memset(&par, 0, sizeof par);
    return par;
  }

  kir_vid AnyVar(const Scope &s) { return Pick(s.pool); }

  // A var whose dtype is in `classes`, or KIR_NO_VAR.
  kir_vid VarIn(const Scope &s, unsigned classes, int min_rank = 0) {
    std::vector<kir_vid> c;
    for (kir_vid v : s.pool)
      if (kir_dtype_in(Type(s, v).dtype, classes) && Type(s, v).rank >= min_rank) c.push_back(v);
    return c.empty() ? KIR_NO_VAR : Pick(c);
  }

  // An operand matching x's dtype: x itself, a literal, or another var of x's type.
  kir_vid Partner(Scope &s, kir_vid x) {
    const kir_aval t = Type(s, x);
    int r = Int(0, 2);
    if (r == 0) return Literal(s.p, t.dtype, Coin());
    if (r == 1) {
      for (kir_vid v : s.pool)
        if (v != x && kir_aval_typematch(&Type(s, v), &t) && Coin()) return v;
    }
    return x;
  }

  // A type-preserving unary op (used for loop/branch outputs).
  kir_vid Keep(Scope &s, kir_vid v) {
    if (Coin(0.4)) return v;
    kir_prim prim = kiln_dtype_is_bool(Type(s, v).dtype) ? KIR_PRIM_NOT : KIR_PRIM_NEG;
    std::vector<kir_vid> out;
    return Add(s, prim, nullptr, {v}, &out) ? out[0] : v;
  }

  kir_dims Dims(std::vector<int> v) {
    kir_dims d;
    memset(&d, 0, sizeof d);
    d.n = (int)v.size();
    for (size_t i = 0; i < v.size(); i++) d.v[i] = (int8_t)v[i];
    return d;
  }

  kir_sizes Sizes(const int64_t *v, int n) {
    kir_sizes s;
    memset(&s, 0, sizeof s);
    s.n = n;
    for (int i = 0; i < n; i++) s.v[i] = v[i];
    return s;
  }

  std::vector<int> Subset(int rank) {
    std::vector<int> out;
    for (int i = 0; i < rank; i++)
      if (Coin()) out.push_back(i);
    return out;
  }

  void Elementwise(Scope &s) {
    static const std::vector<kir_prim> float_unary = {
        KIR_PRIM_FLOOR, KIR_PRIM_CEIL,  KIR_PRIM_EXP,   KIR_PRIM_EXP2,     KIR_PRIM_EXPM1,
        KIR_PRIM_LOG,   KIR_PRIM_LOG1P, KIR_PRIM_SQRT,  KIR_PRIM_RSQRT,    KIR_PRIM_CBRT,
        KIR_PRIM_TANH,  KIR_PRIM_LOGISTIC, KIR_PRIM_SIN, KIR_PRIM_COS,     KIR_PRIM_TAN,
        KIR_PRIM_ASIN,  KIR_PRIM_ACOS,  KIR_PRIM_ATAN,  KIR_PRIM_SINH,     KIR_PRIM_COSH,
        KIR_PRIM_ASINH, KIR_PRIM_ACOSH, KIR_PRIM_ATANH, KIR_PRIM_ERF,      KIR_PRIM_ERF_INV,
        KIR_PRIM_IS_FINITE, KIR_PRIM_SQUARE, KIR_PRIM_ERFC, KIR_PRIM_LGAMMA, KIR_PRIM_DIGAMMA,
        KIR_PRIM_COPY};
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

  void Structure(Scope &s) {
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

  void Reduction(Scope &s) {
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
  void Window(Scope &s) {
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

  void Effects(Scope &s) {
    kir_params par = Zero();
    std::vector<kir_vid> in;
    for (int i = Int(0, 2); i > 0; i--) in.push_back(AnyVar(s));
    if (Coin()) {
      static const char *fmts[] = {"x={}", "", "tab\there \"quoted\" \\ {x} \x7f\x01", "{} {}",
                                   "caf\xc3\xa9"};
      par.debug_print.fmt = fmts[Int(0, 4)];
      Add(s, KIR_PRIM_DEBUG_PRINT, &par, in);
    } else {
      kir_aval results[2] = {Aval(), Aval()};
      par.host_callback.callback = Int(0, 1000);
      par.host_callback.result_avals.n = Int(0, 2);
      par.host_callback.result_avals.v = results;
      Add(s, KIR_PRIM_HOST_CALLBACK, &par, in);
    }
  }

  // A sub-program taking `types`; `finish` sets its outputs.
  kir_program *SubProgram(Scope &s, const std::vector<kir_aval> &types, int n_eqns,
                          std::vector<kir_vid> *invars) {
    kir_program *sub = nullptr;
    EXPECT_EQ(kir_program_new_sub(s.p, &sub), KILN_OK);
    Scope inner{sub, {}, s.depth + 1};
    for (const kir_aval &t : types) {
      kir_vid v;
      EXPECT_EQ(kir_add_invar(sub, &t, &v), KILN_OK);
      inner.pool.push_back(v);
      invars->push_back(v);
    }
    if (inner.pool.empty()) inner.pool.push_back(Literal(sub, Dtype(), Coin()));
    Body(inner, n_eqns);
    scratch_pool_ = inner.pool;
    return sub;
  }

  std::vector<kir_vid> Operands(Scope &s, int lo, int hi) {
    std::vector<kir_vid> v;
    for (int i = Int(lo, hi); i > 0; i--) v.push_back(AnyVar(s));
    return v;
  }

  std::vector<kir_aval> TypesOf(const Scope &s, const std::vector<kir_vid> &vs) {
    std::vector<kir_aval> t;
    for (kir_vid v : vs) t.push_back(Type(s, v));
    return t;
  }

  void Cond(Scope &s) {
    std::vector<kir_vid> ops = Operands(s, 1, 2);
    std::vector<kir_aval> types = TypesOf(s, ops);
    std::vector<kir_program *> branches;
    for (int b = Int(1, 3); b > 0; b--) {
      std::vector<kir_vid> invars;
      kir_program *br = SubProgram(s, types, Int(0, 3), &invars);
      Scope bs{br, scratch_pool_, s.depth + 1};
      std::vector<kir_vid> outs;
      for (kir_vid v : invars) outs.push_back(Keep(bs, v));
      EXPECT_EQ(kir_set_outputs(br, (int)outs.size(), outs.data()), KILN_OK);
      branches.push_back(br);
    }
    kir_params par = Zero();
    par.cond.branches.n = (int)branches.size();
    par.cond.branches.v = branches.data();
    kir_vid index = Literal(s.p, KILN_I32, false);
    for (kir_vid v : s.pool)
      if (Type(s, v).dtype == KILN_I32 && Type(s, v).rank == 0 && Coin()) index = v;
    ops.insert(ops.begin(), index);
    Add(s, KIR_PRIM_COND, &par, ops);
  }

  // A bool[] from the first carry value (the loop's condition).
  kir_vid Predicate(Scope &s, kir_vid v) {
    const kir_aval t = Type(s, v);
    kir_params par = Zero();
    std::vector<int> all;
    for (int i = 0; i < t.rank; i++) all.push_back(i);
    par.axes.axes = Dims(all);
    std::vector<kir_vid> out;
    if (kiln_dtype_is_bool(t.dtype)) {
      if (!Add(s, KIR_PRIM_REDUCE_OR, &par, {v}, &out)) return KIR_NO_VAR;
      return out[0];
    }
    if (!Add(s, KIR_PRIM_REDUCE_MAX, &par, {v}, &out)) return KIR_NO_VAR;
    kir_vid m = out[0];
    out.clear();
    if (!Add(s, KIR_PRIM_LT, nullptr, {m, Literal(s.p, t.dtype, Type(s, m).weak)}, &out))
      return KIR_NO_VAR;
    return out[0];
  }

  void While(Scope &s) {
    std::vector<kir_vid> cconsts = Operands(s, 0, 1), bconsts = Operands(s, 0, 1),
                         carry = Operands(s, 1, 2);
    std::vector<kir_aval> ctypes = TypesOf(s, cconsts), btypes = TypesOf(s, bconsts),
                          carry_t = TypesOf(s, carry);
    std::vector<kir_aval> cin = ctypes, bin = btypes;
    cin.insert(cin.end(), carry_t.begin(), carry_t.end());
    bin.insert(bin.end(), carry_t.begin(), carry_t.end());
    std::vector<kir_vid> cv, bv;
    kir_program *c = SubProgram(s, cin, Int(0, 2), &cv);
    Scope cs{c, scratch_pool_, s.depth + 1};
    kir_vid pred = Predicate(cs, cv[ctypes.size()]);
    if (pred == KIR_NO_VAR) return;
    EXPECT_EQ(kir_set_outputs(c, 1, &pred), KILN_OK);
    kir_program *b = SubProgram(s, bin, Int(0, 3), &bv);
    Scope bs{b, scratch_pool_, s.depth + 1};
    std::vector<kir_vid> outs;
    for (size_t i = btypes.size(); i < bv.size(); i++) outs.push_back(Keep(bs, bv[i]));
    EXPECT_EQ(kir_set_outputs(b, (int)outs.size(), outs.data()), KILN_OK);
    kir_params par = Zero();
    par.while_loop.cond_jaxpr = c;
    par.while_loop.body_jaxpr = b;
    par.while_loop.cond_nconsts = (int64_t)cconsts.size();
    par.while_loop.body_nconsts = (int64_t)bconsts.size();
    std::vector<kir_vid> ops = cconsts;
    ops.insert(ops.end(), bconsts.begin(), bconsts.end());
    ops.insert(ops.end(), carry.begin(), carry.end());
    Add(s, KIR_PRIM_WHILE, &par, ops);
  }

  void Scan(Scope &s) {
    std::vector<kir_vid> consts = Operands(s, 0, 1), carry = Operands(s, 0, 2), xs;
    int64_t length = Int(0, 4);
    for (kir_vid v : s.pool) {
      const kir_aval &t = Type(s, v);
      if (xs.empty() && t.rank >= 1 && Coin(0.3)) length = t.shape[0];
      if (xs.size() < 2 && t.rank >= 1 && t.shape[0] == length && Coin()) xs.push_back(v);
    }
    std::vector<kir_aval> in = TypesOf(s, consts), ct = TypesOf(s, carry);
    in.insert(in.end(), ct.begin(), ct.end());
    for (kir_vid v : xs) {
      const kir_aval &t = Type(s, v);
      in.push_back(kir_aval_make(t.dtype, t.rank - 1, t.shape + 1, t.weak));
    }
    std::vector<kir_vid> bv;
    kir_program *body = SubProgram(s, in, Int(0, 3), &bv);
    Scope bs{body, scratch_pool_, s.depth + 1};
    std::vector<kir_vid> outs;
    for (size_t i = 0; i < carry.size(); i++) outs.push_back(Keep(bs, bv[consts.size() + i]));
    for (int y = Int(0, 2); y > 0; y--) {
      kir_vid v = Pick(bs.pool);
      if (Type(bs, v).rank < KIR_MAX_RANK) outs.push_back(v);
    }
    EXPECT_EQ(kir_set_outputs(body, (int)outs.size(), outs.data()), KILN_OK);
    kir_params par = Zero();
    par.scan.jaxpr = body;
    par.scan.length = length;
    par.scan.num_consts = (int64_t)consts.size();
    par.scan.num_carry = (int64_t)carry.size();
    par.scan.reverse = Coin();
    std::vector<kir_vid> ops = consts;
    ops.insert(ops.end(), carry.begin(), carry.end());
    ops.insert(ops.end(), xs.begin(), xs.end());
    Add(s, KIR_PRIM_SCAN, &par, ops);
  }

  // A sub-program over types that returns its invars picked by `outs`.
  kir_program *Passing(Scope &s, const std::vector<kir_aval> &types, const std::vector<int> &outs) {
    std::vector<kir_vid> iv, ov;
    kir_program *sub = SubProgram(s, types, 0, &iv);
    for (int i : outs) ov.push_back(iv[i]);
    EXPECT_EQ(kir_set_outputs(sub, (int)ov.size(), ov.data()), KILN_OK);
    return sub;
  }

  // checkpoint, custom_jvp_call, custom_vjp_call, custom_lin over 1-2 args:
  // each returns its first argument (checkpoint's body computes a little).
  void Calls(Scope &s) {
    std::vector<kir_vid> args = Operands(s, 1, 2);
    std::vector<kir_aval> in = TypesOf(s, args), twice = in, with_ct = in;
    int n = (int)in.size();
    twice.insert(twice.end(), in.begin(), in.end());
    with_ct.push_back(in[0]);
    std::vector<int> all;
    for (int i = 0; i < n; i++) all.push_back(i);
    kir_params par = Zero();
    switch (Int(0, 3)) {
      case 0: {
        std::vector<kir_vid> bv;
        kir_program *body = SubProgram(s, in, Int(0, 2), &bv);
        Scope bs{body, scratch_pool_, s.depth + 1};
        kir_vid out = Keep(bs, bv[0]);
        EXPECT_EQ(kir_set_outputs(body, 1, &out), KILN_OK);
        par.checkpoint.jaxpr = body;
        par.checkpoint.policy = Int(0, 2);
        par.checkpoint.prevent_cse = Coin();
        Add(s, KIR_PRIM_CHECKPOINT, &par, args);
        break;
      }
      case 1:
        par.custom_jvp.call_jaxpr = Passing(s, in, {0});
        par.custom_jvp.jvp_jaxpr = Passing(s, twice, {0, n});
        Add(s, KIR_PRIM_CUSTOM_JVP_CALL, &par, args);
        break;
      case 2: {
        std::vector<int> fwd = {0};
        fwd.insert(fwd.end(), all.begin(), all.end());
        par.custom_vjp.call_jaxpr = Passing(s, in, {0});
        par.custom_vjp.fwd_jaxpr = Passing(s, in, fwd);
        par.custom_vjp.bwd_jaxpr = Passing(s, with_ct, all);
        Add(s, KIR_PRIM_CUSTOM_VJP_CALL, &par, args);
        break;
      }
      default: {
        kir_aval out = in[0];
        out.weak = false;
        par.custom_lin.bwd_jaxpr = Passing(s, with_ct, all);
        par.custom_lin.num_res = n;
        par.custom_lin.out_avals.n = 1;
        par.custom_lin.out_avals.v = &out;
        std::vector<kir_vid> ops = args;
        ops.insert(ops.end(), args.begin(), args.end());
        Add(s, KIR_PRIM_CUSTOM_LIN, &par, ops);
      }
    }
  }

  // A shard_map over a random mesh whose body applies collectives to a
  // replicated operand (P() in, P() out: the types stay whole).
  void ShardMap(Scope &s) {
    static const char *meshes[] = {"i=2", "a=2,b=3", "data=4,model=1"};
    static const char *axes[][4] = {{"i"}, {"a", "b", "a,b", "b,a"}, {"data", "model", "data,model"}};
    static const int n_axes[] = {1, 4, 3};
    static const int64_t sizes[][4] = {{2}, {2, 3, 6, 6}, {4, 1, 4}};
    int m = Int(0, 2), k = Int(0, n_axes[m] - 1);
    kir_vid x = VarIn(s, KIR_DT_NUM);
    if (x == KIR_NO_VAR) return;
    std::vector<kir_vid> bv;
    kir_program *body = SubProgram(s, {Type(s, x)}, 0, &bv);
    Scope bs{body, {bv[0]}, s.depth + 1};
    kir_params par = Zero();
    const kir_aval &t = Type(s, x);
    int64_t size = sizes[m][k];
    switch (Int(0, 5)) {
      case 0:
        par.collective = {axes[m][k], size};
        Add(bs, Pick(std::vector<kir_prim>{KIR_PRIM_PSUM, KIR_PRIM_PMAX, KIR_PRIM_PMIN}), &par, {bv[0]});
        break;
      case 1:
        par.collective = {axes[m][k], size};
        Add(bs, KIR_PRIM_AXIS_INDEX, &par, {});
        break;
      case 2:
        par.all_gather = {Int(0, t.rank), axes[m][k], size, false};
        if (t.rank < KIR_MAX_RANK) Add(bs, KIR_PRIM_ALL_GATHER, &par, {bv[0]});
        break;
      case 3:
        par.ppermute = {axes[m][k], size, size > 1 ? "((0, 1), (1, 0))" : "((0, 0),)"};
        Add(bs, KIR_PRIM_PPERMUTE, &par, {bv[0]});
        break;
      case 4:
        if (t.rank == 0 || t.shape[0] % size) break;
        par.all_to_all = {axes[m][k], size, 0, 0, true};
        Add(bs, KIR_PRIM_ALL_TO_ALL, &par, {bv[0]});
        break;
      default:
        if (t.rank == 0 || t.shape[0] % size) break;
        par.psum_scatter = {axes[m][k], size, 0, true};
        Add(bs, KIR_PRIM_PSUM_SCATTER, &par, {bv[0]});
    }
    kir_vid out = bs.pool.back();
    EXPECT_EQ(kir_set_outputs(body, 1, &out), KILN_OK);
    par = Zero();
    par.device_put = {meshes[m], ""};  // moved to P() first, as jit does for another layout
    if (k == 0 && Add(s, KIR_PRIM_DEVICE_PUT, &par, {x})) x = s.pool.back();
    par = Zero();
    par.shard_map = {Coin(), "", body, meshes[m], ""};
    Add(s, KIR_PRIM_SHARD_MAP, &par, {x});
  }

  void Body(Scope &s, int n_eqns) {
    for (int i = 0; i < n_eqns; i++) {
      int r = Int(0, s.depth < 2 ? 11 : 6);
      if (r <= 2) Elementwise(s);
      else if (r <= 4) Structure(s);
      else if (r == 5) Reduction(s);
      else if (r == 6) Effects(s);
      else if (r == 7) Cond(s);
      else if (r == 8) While(s);
      else if (r == 9) Calls(s);
      else if (r == 10) Scan(s);
      else ShardMap(s);
    }
  }

  Program Make() {
    Program prog;
    kir_program *p = nullptr;
    EXPECT_EQ(kir_program_new(&p), KILN_OK);
    prog.reset(p);
    Scope s{p, {}, 0};
    for (int i = Int(0, 2); i > 0; i--) {
      kir_aval t = Aval();
      t.weak = false;
      kir_vid v;
      EXPECT_EQ(kir_add_const(p, &t, &v), KILN_OK);
      s.pool.push_back(v);
    }
    for (int i = Int(1, 4); i > 0; i--) {
      kir_aval t = Aval();
      kir_vid v;
      EXPECT_EQ(kir_add_invar(p, &t, &v), KILN_OK);
      s.pool.push_back(v);
    }
    Body(s, Int(1, 12));
    std::vector<kir_vid> outs;
    for (int i = Int(0, 3); i > 0; i--) outs.push_back(Coin(0.1) ? Literal(p, Dtype(), Coin()) : AnyVar(s));
    EXPECT_EQ(kir_set_outputs(p, (int)outs.size(), outs.data()), KILN_OK);
    return prog;
  }

  std::mt19937_64 rng_;
  std::set<kir_prim> covered_;
  int accepted_ = 0, rejected_ = 0;
  size_t next_unary_ = 0;  // cycles through the float unary ops
  std::vector<kir_vid> scratch_pool_;
};

TEST(IrParse, RandomProgramsRoundTrip) {
  Gen gen(20240611);
  int programs = 0, eqns = 0;
  for (int i = 0; i < 300; i++) {
    Program p = gen.Make();
    ASSERT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
    std::string text = Print(p.get());
    Program q = Parse(text);
    ASSERT_NE(q, nullptr) << text;
    EXPECT_TRUE(kir_program_equal(p.get(), q.get())) << text;
    EXPECT_TRUE(kir_program_equal(q.get(), p.get())) << text;
    EXPECT_EQ(Print(q.get()), text);
    programs++;
    eqns += p->n_eqns;
  }
  EXPECT_EQ(programs, 300);
  EXPECT_GT(eqns, 1000);
  // The generator reaches every primitive, and mostly builds valid equations.
  for (int prim = 0; prim < KIR_NUM_PRIMS; prim++)
    EXPECT_TRUE(gen.covered_.count((kir_prim)prim)) << kir_prim_name((kir_prim)prim);
  EXPECT_GT(gen.accepted_, 4 * gen.rejected_);
}

TEST(IrParse, EqualityNoticesDifferences) {
  Program a = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add a 1.0:f32[] in (b,) }");
  Program b = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add a 2.0:f32[] in (b,) }");
  Program c = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add 1.0:f32[] a in (b,) }");
  Program d = Parse("{ lambda ; x:f32[3]. let y:f32[3] = add x 1.0:f32[] in (y,) }");
  Program e = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add a 1.0:~f32[] in (b,) }");
  EXPECT_FALSE(kir_program_equal(a.get(), b.get()));
  EXPECT_FALSE(kir_program_equal(a.get(), c.get()));
  EXPECT_TRUE(kir_program_equal(a.get(), d.get()));  // names do not matter
  EXPECT_FALSE(kir_program_equal(a.get(), e.get()));
}

// Texts in the printer's canonical form read back and print identically.
TEST(IrParse, CanonicalTextsRoundTrip) {
  const char *texts[] = {
      "{ lambda ; a:f32[4,8] b:f32[4,8]. let c:f32[4,8] = add a b in (c,) }",
      "{ lambda ; . let  in () }",
      "{ lambda a:i64[2]; b:f32[4,3] c:~f32[]. let\n"
      "    d:f32[4,3] = mul b c\n"
      "    e:f32[4] = reduce_sum[axes=(1,)] d\n"
      "    f:i64[2] = neg a\n"
      "  in (e, f, 1:i64[]) }",
      "{ lambda ; a:f32[10,3] b:i32[2,4,1]. let\n"
      "    c:f32[2,4,3] = gather[\n"
      "      dimension_numbers=GatherDimensionNumbers(offset_dims=(2,), "
      "collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), "
      "start_indices_batching_dims=())\n"
      "      fill_value=nan\n"
      "      indices_are_sorted=False\n"
      "      mode=GatherScatterMode.FILL_OR_DROP\n"
      "      slice_sizes=(1, 3)\n"
      "      unique_indices=False\n"
      "    ] a b\n"
      "  in (c,) }",
      "{ lambda ; a:bf16[4,3] b:bf16[3,5]. let\n"
      "    c:f32[4,5] = dot_general[\n"
      "      dimension_numbers=(([1], [0]), ([], []))\n"
      "      preferred_element_type=float32\n"
      "    ] a b\n"
      "  in (c,) }",
      "{ lambda ; a:f32[4,3]. let\n"
      "    b:f32[7,5] = pad[padding_config=((1, 2, 0), (0, 0, 1))] a 0.0:f32[]\n"
      "  in (b,) }",
  };
  for (const char *t : texts) {
    Program p = Parse(t);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Print(p.get()), t);
  }
}

TEST(IrParse, WhitespaceIsInsignificant) {
  Program p = Parse("  {lambda;a:f32[4]  b:f32[4].let\n\n c:f32[4]=add a b\td:bool[4] = lt a "
                    "b in(c,d,)}  \n");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[4] b:f32[4]. let\n"
            "    c:f32[4] = add a b\n"
            "    d:bool[4] = lt a b\n"
            "  in (c, d) }");
}

// ---------------------------------------------------------------------------
// Malformed text

struct Bad {
  std::string text;
  kiln_status status;
  std::string message;
};

TEST(IrParse, MalformedTextNamesLineColumnAndExpectation) {
  const std::string ok_head = "{ lambda ; a:f32[4]. let ";
  std::string deep = "{ lambda ; . let in () }";
  for (int i = 0; i < 70; i++)
    deep = "{ lambda ; . let cond[branches=(" + deep + ")] 0:i32[] in () }";
  const Bad cases[] = {
      {"{ lambda ; a f32[4]. let in (a,) }", KILN_ERR_ARGUMENT,
       "1:14: expected ':' after variable name 'a', found 'f32[4].'"},
      {"", KILN_ERR_ARGUMENT, "1:1: expected '{' to start a program, found the end of the text"},
      {"{ lambda ; a:f32[4]. in (a,) }", KILN_ERR_ARGUMENT, "1:22: expected 'let', found 'in'"},
      {"{ lamda ; . let in () }", KILN_ERR_ARGUMENT, "1:3: expected 'lambda', found 'lamda'"},
      {ok_head + "b:f32[4] = frob a in (b,) }", KILN_ERR_ARGUMENT,
       "1:37: unknown primitive 'frob'"},
      {"{ lambda ; a:f33[4]. let in (a,) }", KILN_ERR_ARGUMENT, "1:14: unknown dtype 'f33'"},
      {"{ lambda ; a:f32 . let in (a,) }", KILN_ERR_ARGUMENT, "expected '[' after the dtype"},
      {"{ lambda ; a:f32[4. let in (a,) }", KILN_ERR_ARGUMENT,
       "1:18: expected a dimension size, found '4.'"},
      {"{ lambda ; a:f32[-1]. let in (a,) }", KILN_ERR_ARGUMENT, "dimension size -1 is negative"},
      {"{ lambda ; a:f32[1,1,1,1,1,1,1,1,1]. let in (a,) }", KILN_ERR_ARGUMENT,
       "type has more than 8 dimensions"},
      {ok_head + "b:f32[4] = neg c in (b,) }", KILN_ERR_ARGUMENT,
       "1:41: variable 'c' is not defined"},
      {"{ lambda ; a:f32[4] a:f32[4]. let in (a,) }", KILN_ERR_ARGUMENT,
       "1:21: variable 'a' is defined twice"},
      {ok_head + "b:f32[5] = neg a in (b,) }", KILN_ERR_ARGUMENT,
       "1:26: 'b' is declared f32[5] but neg gives f32[4]"},
      {ok_head + "b:f32[4] c:f32[4] = neg a in (b,) }", KILN_ERR_ARGUMENT,
       "1:26: neg gives 1 result but 2 are declared"},
      {"{ lambda ; a:f32[4] c:i32[4]. let b:f32[4] = add a c in (b,) }", KILN_ERR_DTYPE,
       "kir_parse: 1:35: add: operand types f32[4] and i32[4] have different dtypes"},
      {ok_head + "b:f32[] = reduce_sum a in (b,) }", KILN_ERR_ARGUMENT,
       "expected '[' and the params of reduce_sum"},
      {ok_head + "b:f32[] = reduce_sum[axis=(0,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "1:47: reduce_sum has no param 'axis'"},
      {ok_head + "b:i32[] = argmax[axes=(0,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "argmax is missing param 'index_dtype'"},
      {ok_head + "b:f32[] = reduce_sum[axes=(0,) axes=(0,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "param 'axes' is given twice"},
      {ok_head + "b:f32[4] = neg[x=1] a in (b,) }", KILN_ERR_ARGUMENT, "neg takes no params"},
      {ok_head + "b:f32[] = reduce_sum[axes=(0 1)] a in (b,) }", KILN_ERR_ARGUMENT,
       "expected ',' or ')', found '1)]'"},
      {ok_head + "b:f32[] = reduce_sum[axes=0] a in (b,) }", KILN_ERR_ARGUMENT,
       "expected '(', found '0]'"},
      {ok_head + "b:f32[4] = add a 2.0 in (b,) }", KILN_ERR_ARGUMENT,
       "expected ':' and a type after the literal"},
      {ok_head + "b:f32[4] = add a 2.0:f32[4] in (b,) }", KILN_ERR_ARGUMENT,
       "1:43: a literal must have a scalar type"},
      {"{ lambda ; . let b:u8[] = neg 300:u8[] in (b,) }", KILN_ERR_ARGUMENT,
       "kir_parse: 1:31: kir_add_literal: literal 300 does not fit in uint8"},
      {"{ lambda ; . let b:i32[] = neg 2.5:i32[] in (b,) }", KILN_ERR_ARGUMENT,
       "literal 2.5 does not fit type i32"},
      {"{ lambda ; . let b:u32[] = neg -1:u32[] in (b,) }", KILN_ERR_ARGUMENT,
       "literal -1 does not fit type u32"},
      {"{ lambda ; . let b:bool[] = not 1:bool[] in (b,) }", KILN_ERR_ARGUMENT,
       "literal 1 does not fit type bool"},
      {ok_head + "debug_print[fmt=\"abc] a in () }", KILN_ERR_ARGUMENT, "unterminated string"},
      {ok_head + "debug_print[fmt=\"a\\qb\"] a in () }", KILN_ERR_ARGUMENT,
       "unknown escape '\\q' in string"},
      {ok_head + "debug_print[fmt=\"a\\x0g\"] a in () }", KILN_ERR_ARGUMENT,
       "expected two hex digits (not 00) after \\x"},
      {ok_head + "in (a,) } extra", KILN_ERR_ARGUMENT,
       "1:36: expected the end of the text, found 'extra'"},
      {ok_head + "in (a,)", KILN_ERR_ARGUMENT,
       "expected '}' to end the program, found the end of the text"},
      {ok_head + "in a }", KILN_ERR_ARGUMENT, "expected '(' to start the outputs"},
      {ok_head + "in (a b) }", KILN_ERR_ARGUMENT, "expected ',' or ')' in the outputs"},
      {"{ lambda ; in:f32[]. let in (in,) }", KILN_ERR_ARGUMENT,
       "1:12: 'in' is reserved and cannot name a variable"},
      {"{ lambda ; add:f32[]. let in () }", KILN_ERR_ARGUMENT, "'add' is reserved"},
      {"{ lambda ; . let c:f32[] = cond[branches=({ lambda d:f32[]; . let  in (d,) })] "
       "0:i32[] in (c,) }",
       KILN_ERR_ARGUMENT, "kir_add_const: sub-programs are closed"},
      {"{ lambda ; . let c:f32[] = cond[branches=({ lambda ; . let in (1.0:f32[],) })] "
       "0:f32[] in (c,) }",
       KILN_ERR_DTYPE, "1:18: cond: index has type f32[], not i32[]"},
      {"{ lambda ; . let c:f32[] = cond[branches=(1)] 0:i32[] in (c,) }", KILN_ERR_ARGUMENT,
       "expected '{' to start a sub-program"},
      {deep, KILN_ERR_ARGUMENT, "sub-programs nest deeper than 64"},
      {"{ lambda ; a:f32[10,3] b:i32[5,1]. let c:f32[5,3] = gather[dimension_numbers="
       "GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),"
       " operand_batching_dims=(), start_indices_batching_dims=()) fill_value=None "
       "indices_are_sorted=False mode=GatherScatterMode.WRAP slice_sizes=(1, 3) "
       "unique_indices=False] a b in (c,) }",
       KILN_ERR_ARGUMENT, "expected CLIP, FILL_OR_DROP or PROMISE_IN_BOUNDS, found 'WRAP'"},
      {"{ lambda ; a:f32[10,3] b:i32[5,1]. let c:f32[5,3] = gather[dimension_numbers="
       "GatherDimensionNumbers(offset_dims=(1,), start_index_map=(0,))] a b in (c,) }",
       KILN_ERR_ARGUMENT, "1:119: expected 'collapsed_slice_dims', found 'start_index_map='"},
      {"{ lambda ; a:f32[4,3] b:f32[3,5]. let c:f32[4,5] = dot_general[dimension_numbers="
       "(([1], [0]), ([], [])) preferred_element_type=float33] a b in (c,) }",
       KILN_ERR_ARGUMENT, "unknown dtype 'float33'"},
      {ok_head + "b:f32[4] = convert_element_type[new_dtype=float32 weak_type=yes] a in (b,) }",
       KILN_ERR_ARGUMENT, "expected True or False, found 'yes]'"},
      {ok_head + "b:f32[4] = reduce_sum[axes=(300,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "axis 300 is out of range"},
      {"{ lambda ; a:f32[4]. let\n    b:f32[4] = neg a\n    c:f32[4] = sin z\n  in (c,) }",
       KILN_ERR_ARGUMENT, "kir_parse: 3:20: variable 'z' is not defined"},
      {"{ lambda ; a:f32[4]. let\n    b:f32[4] = neg a\n  c = sin b\n  in (c,) }",
       KILN_ERR_ARGUMENT, "kir_parse: 3:3: variable 'c' is not defined"},
  };
  for (const Bad &c : cases) {
    kir_program *p = reinterpret_cast<kir_program *>(0x1);
    kiln_status st = kir_parse(c.text.c_str(), &p);
    EXPECT_EQ(st, c.status) << c.text << "\n  " << kiln_last_error();
    EXPECT_TRUE(Contains(kiln_last_error(), c.message))
        << c.text << "\n  got:  " << kiln_last_error() << "\n  want: " << c.message;
    EXPECT_EQ(std::string(kiln_last_error()).rfind("kir_parse: ", 0), 0u) << kiln_last_error();
    EXPECT_EQ(p, reinterpret_cast<kir_program *>(0x1));  // untouched on failure
  }
  kir_program *p = nullptr;
  EXPECT_EQ(kir_parse(nullptr, &p), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_parse: text is NULL"));
}

TEST(IrParse, TypesAlone) {
  kir_aval a;
  ASSERT_EQ(kir_aval_parse("~bf16[2,0,3]", &a), KILN_OK);
  EXPECT_EQ(a.dtype, KILN_BF16);
  EXPECT_TRUE(a.weak);
  EXPECT_EQ(a.rank, 3);
  EXPECT_EQ(a.shape[1], 0);
  EXPECT_EQ(kir_aval_parse("f32[4", &a), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_parse: 1:6: expected ']' to close the shape"));
  EXPECT_EQ(kir_aval_parse("f32[4] x", &a), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "1:8: expected the end of the type, found 'x'"));
}

}  // namespace
