// dtypes: names, sizes, predicates, f16/bf16 conversions and JAX's promotion.
// Expected conversions come from independent methods (GCC's _Float16, exact
// arithmetic in double) and from XLA (tests/golden/float_conversions.txt);
// promotion from JAX itself (tests/golden/promotion.txt, see dtypes.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_dtype_shims.h"

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string Hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// One 16-bit float format, described by its field widths.
struct Format {
  const char *name;
  int exp_bits, man_bits;
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
  uint16_t quiet_bit() const { return uint16_t(1u << (man_bits - 1)); }
  uint16_t inf() const { return uint16_t(((1u << exp_bits) - 1) << man_bits); }
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  bool is_nan(uint16_t p) const { return (p & 0x7fff) > inf(); }
  // The exact value of a pattern, from its fields; the all-ones exponent
  // reads as a finite power of two, which gives the overflow midpoint.
  double value(uint16_t p) const {
    int e = (p & 0x7fff) >> man_bits;
    double m = p & ((1u << man_bits) - 1);
    double v = e == 0 ? std::ldexp(m, 1 - bias() - man_bits)
                      : std::ldexp(m + std::ldexp(1.0, man_bits), e - bias() - man_bits);
    return (p & 0x8000) ? -v : v;
  }
  // Round v to this format, to nearest even, in double (exact for f32 input):
  // returns the rounded value, or infinity past the largest finite.
  double round(double v) const {
    if (v == 0 || std::isinf(v)) return v;
    int e;
    std::frexp(v, &e);       // |v| in [2^(e-1), 2^e)
    int min_e = 2 - bias();  // frexp exponent of the smallest normal
    double quantum = std::ldexp(1.0, std::max(e, min_e) - man_bits - 1);
    double r = std::nearbyint(v / quantum) * quantum;  // default mode: ties to even
    double overflow = std::ldexp(1.0, bias() + 1);
    if (std::fabs(r) >= overflow) return std::copysign(INFINITY, v);
    return r;
  }
};

const Format kF16{"f16", 5, 10, kiln_f32_to_f16, kiln_f16_to_f32};
const Format kBF16{"bf16", 8, 7, kiln_f32_to_bf16, kiln_bf16_to_f32};

// The documented NaN results: quiet bit set, sign and top payload kept.
uint32_t WidenedNaN(const Format &f, uint16_t p) {
  uint32_t sign = uint32_t(p & 0x8000) << 16;
  uint32_t payload = uint32_t(p & ((1u << f.man_bits) - 1)) << (23 - f.man_bits);
  uint32_t quiet = &f == &kF16 ? 0x00400000u : 0u;  // bf16 -> f32 is the exact shift
  return sign | 0x7f800000u | quiet | payload;
}

uint16_t NarrowedNaN(const Format &f, uint32_t x) {
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint16_t payload = uint16_t((x & 0x007fffffu) >> (23 - f.man_bits));
  return uint16_t(sign | f.inf() | f.quiet_bit() | payload);
}

// Expected pattern for any f32, from the double reference.
uint16_t ExpectedNarrow(const Format &f, float x) {
  if (std::isnan(x)) return NarrowedNaN(f, Bits(x));
  double r = f.round(x);
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isinf(r)) return uint16_t(sign | f.inf());
  // Find the pattern whose value is r: the magnitude patterns are ordered.
  uint16_t lo = 0, hi = f.inf();
  double mag = std::fabs(r);
  while (lo < hi) {
    uint16_t mid = uint16_t((lo + hi) / 2);
    if (f.value(mid) < mag)
      lo = uint16_t(mid + 1);
    else
      hi = mid;
  }
  return uint16_t(sign | lo);
}

// ---- names, sizes, predicates ----

struct DtypeFacts {
  kiln_dtype d;
  const char *name, *short_name;
  size_t size;
  int is_bool, is_integer, is_signed, is_unsigned, is_float;
};

const DtypeFacts kFacts[] = {
    {KILN_BOOL, "bool", "bool", 1, 1, 0, 0, 0, 0},
    {KILN_I8, "int8", "i8", 1, 0, 1, 1, 0, 0},
    {KILN_I16, "int16", "i16", 2, 0, 1, 1, 0, 0},
    {KILN_I32, "int32", "i32", 4, 0, 1, 1, 0, 0},
    {KILN_I64, "int64", "i64", 8, 0, 1, 1, 0, 0},
    {KILN_U8, "uint8", "u8", 1, 0, 1, 0, 1, 0},
    {KILN_U16, "uint16", "u16", 2, 0, 1, 0, 1, 0},
    {KILN_U32, "uint32", "u32", 4, 0, 1, 0, 1, 0},
    {KILN_U64, "uint64", "u64", 8, 0, 1, 0, 1, 0},
    {KILN_F16, "float16", "f16", 2, 0, 0, 1, 0, 1},
    {KILN_BF16, "bfloat16", "bf16", 2, 0, 0, 1, 0, 1},
    {KILN_F32, "float32", "f32", 4, 0, 0, 1, 0, 1},
    {KILN_F64, "float64", "f64", 8, 0, 0, 1, 0, 1},
};

TEST(Dtype, NamesSizesAndPredicates) {
  ASSERT_EQ(sizeof kFacts / sizeof kFacts[0], size_t(KILN_NUM_DTYPES - 1));
  for (const DtypeFacts &f : kFacts) {
    SCOPED_TRACE(f.name);
    EXPECT_STREQ(kiln_dtype_name(f.d), f.name);
    EXPECT_STREQ(kiln_dtype_short_name(f.d), f.short_name);
    EXPECT_EQ(kiln_dtype_size(f.d), f.size);
    EXPECT_EQ(kiln_dtype_is_valid(f.d), 1);
    EXPECT_EQ(kiln_dtype_is_bool(f.d), f.is_bool);
    EXPECT_EQ(kiln_dtype_is_integer(f.d), f.is_integer);
    EXPECT_EQ(kiln_dtype_is_signed(f.d), f.is_signed);
    EXPECT_EQ(kiln_dtype_is_unsigned(f.d), f.is_unsigned);
    EXPECT_EQ(kiln_dtype_is_float(f.d), f.is_float);
  }
}

TEST(Dtype, FromNameParsesBothSpellings) {
  for (const DtypeFacts &f : kFacts) {
    kiln_dtype d = KILN_INVALID_DTYPE;
    ASSERT_EQ(kiln_dtype_from_name(f.name, &d), KILN_OK);
    EXPECT_EQ(d, f.d) << f.name;
    d = KILN_INVALID_DTYPE;
    ASSERT_EQ(kiln_dtype_from_name(f.short_name, &d), KILN_OK);
    EXPECT_EQ(d, f.d) << f.short_name;
  }
}

TEST(Dtype, FromNameRejectsUnknownNames) {
  for (const char *bad : {"", "float", "F32", "f32 ", "int", "float128", "complex64", "invalid"}) {
    kiln_dtype d = KILN_F32;
    kiln_clear_error();
    EXPECT_EQ(kiln_dtype_from_name(bad, &d), KILN_ERR_DTYPE) << "'" << bad << "'";
    EXPECT_EQ(d, KILN_F32) << "out must be left alone";
    EXPECT_NE(std::strstr(kiln_last_error(), "kiln_dtype_from_name"), nullptr) << kiln_last_error();
    EXPECT_NE(std::strstr(kiln_last_error(), (std::string("'") + bad + "'").c_str()), nullptr)
        << kiln_last_error();
  }
}

TEST(Dtype, FromNameRejectsNullArguments) {
  kiln_dtype d;
  EXPECT_EQ(kiln_dtype_from_name(nullptr, &d), KILN_ERR_ARGUMENT);
  EXPECT_NE(std::strstr(kiln_last_error(), "kiln_dtype_from_name: name"), nullptr);
  EXPECT_EQ(kiln_dtype_from_name("f32", nullptr), KILN_ERR_ARGUMENT);
  EXPECT_NE(std::strstr(kiln_last_error(), "kiln_dtype_from_name: out"), nullptr);
}

TEST(Dtype, InvalidValuesAnswerZeroAndInvalid) {
  for (int d : {int(KILN_INVALID_DTYPE), int(KILN_NUM_DTYPES), 15, -1, 1000, INT32_MIN}) {
    SCOPED_TRACE(d);
    EXPECT_EQ(dtype_test_predicates(d), 0);
    EXPECT_EQ(dtype_test_size(d), 0u);
    EXPECT_STREQ(dtype_test_name(d), "invalid");
    EXPECT_STREQ(dtype_test_short_name(d), "invalid");
    kiln_clear_error();
    EXPECT_EQ(dtype_test_check("some_op", d), KILN_ERR_DTYPE);
    EXPECT_NE(std::strstr(kiln_last_error(), "some_op: invalid dtype"), nullptr)
        << kiln_last_error();
  }
  EXPECT_EQ(dtype_test_check("some_op", KILN_BF16), KILN_OK);
}

// ---- f16 / bf16 -> f32, every pattern ----

TEST(Conversion, F16ToF32EveryPatternMatchesGccAndArithmetic) {
  for (uint32_t p = 0; p <= 0xffff; p++) {
    uint16_t h = uint16_t(p);
    float got = kiln_f16_to_f32(h);
    _Float16 gh;
    std::memcpy(&gh, &h, sizeof gh);
    float gcc = float(gh);
    if (kF16.is_nan(h)) {
      ASSERT_TRUE(std::isnan(gcc)) << Hex(p);
      ASSERT_EQ(Bits(got), WidenedNaN(kF16, h)) << Hex(p);
      continue;
    }
    ASSERT_EQ(Bits(got), Bits(gcc)) << Hex(p);
    double ref = (h & 0x7fff) == kF16.inf() ? std::copysign(INFINITY, (h & 0x8000) ? -1.0 : 1.0)
                                            : kF16.value(h);
    ASSERT_EQ(double(got), ref) << Hex(p);
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << Hex(p);
  }
}

TEST(Conversion, BF16ToF32EveryPatternMatchesArithmetic) {
  for (uint32_t p = 0; p <= 0xffff; p++) {
    uint16_t b = uint16_t(p);
    float got = kiln_bf16_to_f32(b);
    if (kBF16.is_nan(b)) {
      ASSERT_EQ(Bits(got), WidenedNaN(kBF16, b)) << Hex(p);
      ASSERT_TRUE(std::isnan(got)) << Hex(p);
      continue;
    }
    double ref = (b & 0x7fff) == kBF16.inf() ? std::copysign(INFINITY, (b & 0x8000) ? -1.0 : 1.0)
                                             : kBF16.value(b);
    ASSERT_EQ(double(got), ref) << Hex(p);
    ASSERT_EQ(std::signbit(got), (b & 0x8000) != 0) << Hex(p);
  }
}

// ---- f16/bf16 -> f32 -> f16/bf16 ----

void CheckRoundTrip(const Format &f) {
  for (uint32_t p = 0; p <= 0xffff; p++) {
    uint16_t want = f.is_nan(uint16_t(p)) ? uint16_t(p | f.quiet_bit()) : uint16_t(p);
    ASSERT_EQ(f.narrow(f.widen(uint16_t(p))), want) << f.name << " " << Hex(p);
  }
}

TEST(Conversion, F16RoundTripsEveryPattern) { CheckRoundTrip(kF16); }
TEST(Conversion, BF16RoundTripsEveryPattern) { CheckRoundTrip(kBF16); }

// ---- f32 -> f16/bf16: rounding boundaries ----

// For every pair of adjacent finite patterns (and the largest finite with
// the pattern past it, which overflows to infinity), both signs: the exact
// midpoint ties to the even pattern, one f32 ulp either side goes to the
// nearer pattern. The pair (0, smallest subnormal) covers underflow to zero.
void CheckMidpoints(const Format &f, bool against_gcc) {
  for (uint16_t lo = 0; lo < f.inf(); lo++) {
    uint16_t hi = uint16_t(lo + 1);
    double mid = (f.value(lo) + f.value(hi)) / 2;
    float m = float(mid);
    ASSERT_EQ(double(m), mid) << "midpoint not exact in f32: " << Hex(lo);
    const float cases[3] = {m, std::nextafter(m, INFINITY), std::nextafter(m, 0.0f)};
    const uint16_t want[3] = {(lo & 1) ? hi : lo, hi, lo};
    for (int i = 0; i < 3; i++) {
      for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
        float x = sign ? -cases[i] : cases[i];
        uint16_t got = f.narrow(x);
        ASSERT_EQ(got, uint16_t(want[i] | sign))
            << f.name << " lo=" << Hex(lo) << " case " << i << " x=" << Hex(Bits(x));
        if (against_gcc) {
          _Float16 g = _Float16(x);
          uint16_t gb;
          std::memcpy(&gb, &g, sizeof gb);
          ASSERT_EQ(got, gb) << "gcc disagrees at x=" << Hex(Bits(x));
        }
      }
    }
  }
}

TEST(Conversion, F32ToF16RoundsEveryMidpointToNearestEven) { CheckMidpoints(kF16, true); }
TEST(Conversion, F32ToBF16RoundsEveryMidpointToNearestEven) { CheckMidpoints(kBF16, false); }

TEST(Conversion, NamedBoundaries) {
  // f16: 65504 is the largest finite, 65520 the first value that overflows.
  EXPECT_EQ(kiln_f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(kiln_f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(kiln_f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(kiln_f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(kiln_f32_to_f16(FLT_MAX), 0x7c00);
  EXPECT_EQ(kiln_f32_to_f16(INFINITY), 0x7c00);
  // f16 underflow: 2^-25 (half the smallest subnormal) ties to zero, with sign.
  EXPECT_EQ(kiln_f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(kiln_f32_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(kiln_f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(kiln_f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp ties up to even
  EXPECT_EQ(kiln_f32_to_f16(FromBits(0x00000001)), 0x0000);   // f32 subnormals vanish
  EXPECT_EQ(kiln_f32_to_f16(-0.0f), 0x8000);
  // The largest subnormal rounding up into the smallest normal.
  EXPECT_EQ(kiln_f32_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  // bf16: overflow past 0x7f7f, f32 subnormals keep their rounded bits.
  EXPECT_EQ(kiln_f32_to_bf16(FromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(kiln_f32_to_bf16(FromBits(0x7f7f8000)), 0x7f80);
  EXPECT_EQ(kiln_f32_to_bf16(FLT_MAX), 0x7f80);
  EXPECT_EQ(kiln_f32_to_bf16(FromBits(0x00018000)), 0x0002);  // tie, up to even
  EXPECT_EQ(kiln_f32_to_bf16(FromBits(0x00008000)), 0x0000);  // tie, down to even
  EXPECT_EQ(kiln_f32_to_bf16(FromBits(0x807fffff)), 0x8080);  // largest subnormal -> min normal
  EXPECT_EQ(kiln_f32_to_bf16(-0.0f), 0x8000);
}

TEST(Conversion, NaNStaysQuietNaNNeverInfinity) {
  // Signaling NaNs whose payload lives only in bits the narrow type drops.
  for (uint32_t x : {0x7f800001u, 0xff800001u, 0x7f801fffu, 0x7f80ffffu, 0x7fc00000u, 0xffffffffu,
                     0x7fa00000u, 0x7f812345u}) {
    uint16_t h = kiln_f32_to_f16(FromBits(x)), b = kiln_f32_to_bf16(FromBits(x));
    EXPECT_EQ(h, NarrowedNaN(kF16, x)) << Hex(x);
    EXPECT_EQ(b, NarrowedNaN(kBF16, x)) << Hex(x);
    EXPECT_TRUE(std::isnan(kiln_f16_to_f32(h)) && std::isnan(kiln_bf16_to_f32(b))) << Hex(x);
  }
  EXPECT_EQ(kiln_f32_to_f16(FromBits(0x7f812345u)), 0x7e09);  // payload 0x012345 >> 13
  EXPECT_EQ(Bits(kiln_f16_to_f32(0x7c01)), 0x7fc02000u) << "sNaN is quieted";
}

// A strided sweep over all f32 bit patterns against the double reference
// (and GCC for f16): catches errors between the boundaries tested above.
TEST(Conversion, F32SweepMatchesReferences) {
  const uint32_t stride = 4099;  // prime: varied low bits
  for (uint64_t i = 0; i <= 0xffffffffull; i += stride) {
    float x = FromBits(uint32_t(i));
    uint16_t h = kiln_f32_to_f16(x), b = kiln_f32_to_bf16(x);
    ASSERT_EQ(h, ExpectedNarrow(kF16, x)) << Hex(uint32_t(i));
    ASSERT_EQ(b, ExpectedNarrow(kBF16, x)) << Hex(uint32_t(i));
    if (!std::isnan(x)) {
      _Float16 g = _Float16(x);
      uint16_t gb;
      std::memcpy(&gb, &g, sizeof gb);
      ASSERT_EQ(h, gb) << Hex(uint32_t(i));
    }
  }
}

// ---- XLA's conversions (tests/golden/float_conversions.txt) ----

TEST(Conversion, MatchesXlaGoldenSample) {
  std::ifstream in(KILN_GOLDEN_DIR "/float_conversions.txt");
  ASSERT_TRUE(in) << "missing golden file; run tests/golden/dtypes.py";
  std::string line;
  int widened = 0, narrowed = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string kind;
    s >> kind >> std::hex;
    if (kind == "f16" || kind == "bf16") {
      uint32_t p, want;
      ASSERT_TRUE(s >> p >> want) << line;
      float got = kind == "f16" ? kiln_f16_to_f32(uint16_t(p)) : kiln_bf16_to_f32(uint16_t(p));
      ASSERT_EQ(Bits(got), want) << line;
      widened++;
    } else if (kind == "f32") {
      uint32_t x, want_h, want_b;
      ASSERT_TRUE(s >> x >> want_h >> want_b) << line;
      ASSERT_EQ(kiln_f32_to_f16(FromBits(x)), want_h) << line;
      uint16_t b = kiln_f32_to_bf16(FromBits(x));
      if (std::isnan(FromBits(x))) {
        // XLA returns sign|0x7fc0 for every NaN; kiln keeps the payload.
        ASSERT_TRUE(kBF16.is_nan(uint16_t(want_b))) << line;
        ASSERT_EQ(b & 0x8000, want_b & 0x8000) << line;
        ASSERT_TRUE(kBF16.is_nan(b) && (b & kBF16.quiet_bit())) << line;
      } else {
        ASSERT_EQ(b, want_b) << line;
      }
      narrowed++;
    } else {
      FAIL() << "bad line: " << line;
    }
  }
  EXPECT_GT(widened, 2000);
  EXPECT_GT(narrowed, 2000);
}

// ---- promotion ----

kiln_wdtype W(kiln_dtype d, int weak) { return kiln_wdtype{d, weak}; }

std::string Describe(kiln_wdtype t) {
  return std::string(t.weak ? "weak " : "") + kiln_dtype_short_name(t.dtype);
}

kiln_wdtype ParseW(std::istringstream &s) {
  std::string name;
  int weak = 0;
  s >> name >> weak;
  kiln_dtype d = KILN_INVALID_DTYPE;
  EXPECT_EQ(kiln_dtype_from_name(name.c_str(), &d), KILN_OK) << name;
  return W(d, weak);
}

// Reads "<dtype> <weak>" or "error -"; false for error.
bool ParseResult(std::istringstream &s, kiln_wdtype *out) {
  std::string colon, name;
  s >> colon;
  EXPECT_EQ(colon, ":");
  std::streampos at = s.tellg();
  s >> name;
  if (name == "error") {
    s >> name;
    return false;
  }
  s.seekg(at);
  *out = ParseW(s);
  return true;
}

void CheckPromotion(const char *op, kiln_status st, const kiln_wdtype &got, bool ok,
                    const kiln_wdtype &want, kiln_wdtype a, kiln_wdtype b,
                    const std::string &line) {
  if (ok) {
    ASSERT_EQ(st, KILN_OK) << op << ": " << line << " / " << kiln_last_error();
    ASSERT_EQ(got.dtype, want.dtype) << op << ": " << line << " got " << Describe(got);
    ASSERT_EQ(got.weak, want.weak) << op << ": " << line << " got " << Describe(got);
    return;
  }
  ASSERT_EQ(st, KILN_ERR_PROMOTION) << op << ": " << line;
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find(op), std::string::npos) << msg;
  EXPECT_NE(msg.find(Describe(a)), std::string::npos) << msg;
  EXPECT_NE(msg.find(Describe(b)), std::string::npos) << msg;
  EXPECT_NE(msg.find("strict"), std::string::npos) << msg;
}

// Every (dtype, weak) pair in both modes, as JAX computes it: the result of
// a jnp binary op (kiln_promote_types) and dtypes.result_type
// (kiln_result_type).
TEST(Promotion, MatchesJaxForEveryPairInBothModes) {
  std::ifstream in(KILN_GOLDEN_DIR "/promotion.txt");
  ASSERT_TRUE(in) << "missing golden file; run tests/golden/dtypes.py";
  std::string line;
  int rows = 0, refused = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string mode_name;
    s >> mode_name;
    ASSERT_TRUE(mode_name == "standard" || mode_name == "strict") << line;
    kiln_promotion_mode mode =
        mode_name == "strict" ? KILN_PROMOTION_STRICT : KILN_PROMOTION_STANDARD;
    kiln_wdtype a = ParseW(s), b = ParseW(s), want_op{}, want_rt{};
    bool ok_op = ParseResult(s, &want_op), ok_rt = ParseResult(s, &want_rt);
    ASSERT_FALSE(s.fail()) << line;

    kiln_wdtype got{KILN_INVALID_DTYPE, -1};
    kiln_clear_error();
    kiln_status st = kiln_promote_types(a, b, mode, &got);
    CheckPromotion("kiln_promote_types", st, got, ok_op, want_op, a, b, line);
    got = kiln_wdtype{KILN_INVALID_DTYPE, -1};
    st = kiln_result_type(a, b, mode, &got);
    CheckPromotion("kiln_result_type", st, got, ok_rt, want_rt, a, b, line);
    rows++;
    refused += !ok_op;
  }
  EXPECT_EQ(rows, 2 * 26 * 26);
  EXPECT_GT(refused, 0);
}

// A few rules spelled out, so a reader sees what the table encodes.
TEST(Promotion, WeakScalarsKeepTheArrayType) {
  kiln_wdtype r;
  ASSERT_EQ(kiln_promote_types(W(KILN_F16, 0), W(KILN_F64, 1), KILN_PROMOTION_STANDARD, &r),
            KILN_OK);
  EXPECT_EQ(r.dtype, KILN_F16);  // x_f16 * 2.0 stays f16
  EXPECT_EQ(r.weak, 0);
  ASSERT_EQ(kiln_promote_types(W(KILN_U8, 0), W(KILN_I64, 1), KILN_PROMOTION_STRICT, &r), KILN_OK);
  EXPECT_EQ(r.dtype, KILN_U8);  // strict still lets a weak int meet any int
  ASSERT_EQ(kiln_promote_types(W(KILN_I32, 1), W(KILN_F32, 1), KILN_PROMOTION_STANDARD, &r),
            KILN_OK);
  EXPECT_EQ(r.dtype, KILN_F32);  // all weak: join the concrete dtypes, stay weak
  EXPECT_EQ(r.weak, 1);
  ASSERT_EQ(kiln_result_type(W(KILN_I32, 1), W(KILN_F32, 1), KILN_PROMOTION_STANDARD, &r), KILN_OK);
  EXPECT_EQ(r.dtype, KILN_F64);  // result_type reports the default width
  ASSERT_EQ(kiln_promote_types(W(KILN_I64, 0), W(KILN_U64, 0), KILN_PROMOTION_STANDARD, &r),
            KILN_OK);
  EXPECT_EQ(r.dtype, KILN_F64);  // no integer holds both: a weak float
  EXPECT_EQ(r.weak, 1);
}

TEST(Promotion, StrictRefusalNamesBothDtypes) {
  kiln_wdtype r{KILN_BOOL, 0};
  kiln_clear_error();
  EXPECT_EQ(kiln_promote_types(W(KILN_I32, 0), W(KILN_F32, 1), KILN_PROMOTION_STRICT, &r),
            KILN_ERR_PROMOTION);
  EXPECT_STREQ(kiln_last_error(),
               "kiln_promote_types: no implicit promotion between i32 and weak f32 under strict "
               "dtype promotion; cast one operand explicitly");
  EXPECT_EQ(r.dtype, KILN_BOOL) << "out must be left alone";
}

TEST(Promotion, InvalidArguments) {
  for (int rt : {0, 1}) {
    const char *op = rt ? "kiln_result_type" : "kiln_promote_types";
    kiln_wdtype r{KILN_BOOL, 0};
    for (int bad : {0, int(KILN_NUM_DTYPES), 15, -1, 999}) {
      kiln_clear_error();
      EXPECT_EQ(dtype_test_promote(bad, 0, KILN_F32, 0, 0, rt, &r), KILN_ERR_DTYPE);
      EXPECT_NE(std::strstr(kiln_last_error(), op), nullptr) << kiln_last_error();
      EXPECT_NE(std::strstr(kiln_last_error(), "first operand"), nullptr) << kiln_last_error();
      kiln_clear_error();
      EXPECT_EQ(dtype_test_promote(KILN_F32, 1, bad, 1, 1, rt, &r), KILN_ERR_DTYPE);
      EXPECT_NE(std::strstr(kiln_last_error(), op), nullptr) << kiln_last_error();
      EXPECT_NE(std::strstr(kiln_last_error(), "second operand"), nullptr) << kiln_last_error();
    }
    for (int mode : {-1, 2, 7}) {
      kiln_clear_error();
      EXPECT_EQ(dtype_test_promote(KILN_F32, 0, KILN_F16, 0, mode, rt, &r), KILN_ERR_ARGUMENT);
      EXPECT_NE(std::strstr(kiln_last_error(), op), nullptr) << kiln_last_error();
      EXPECT_NE(std::strstr(kiln_last_error(), "mode"), nullptr) << kiln_last_error();
    }
    EXPECT_EQ(r.dtype, KILN_BOOL) << "out must be left alone";
    kiln_clear_error();
    EXPECT_EQ(dtype_test_promote(KILN_F32, 0, KILN_F16, 0, 0, rt, nullptr), KILN_ERR_ARGUMENT);
    EXPECT_NE(std::strstr(kiln_last_error(), op), nullptr) << kiln_last_error();
  }
}

// Any nonzero weak flag means weak.
TEST(Promotion, NonzeroWeakFlagIsWeak) {
  kiln_wdtype r;
  ASSERT_EQ(kiln_promote_types(W(KILN_F16, 0), W(KILN_F32, 7), KILN_PROMOTION_STANDARD, &r),
            KILN_OK);
  EXPECT_EQ(r.dtype, KILN_F16);
  EXPECT_EQ(r.weak, 0);
  ASSERT_EQ(kiln_promote_types(W(KILN_F16, -1), W(KILN_F16, 2), KILN_PROMOTION_STANDARD, &r),
            KILN_OK);
  EXPECT_EQ(r.dtype, KILN_F16);
  EXPECT_EQ(r.weak, 1);
}

}  // namespace
