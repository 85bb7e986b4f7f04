// Random programs planned under every option set: every invariant of
// fuse.h holds (fuse_checks.h).
#include <gtest/gtest.h>

#include "fuse_checks.h"

using namespace fuse_test;

namespace {

// ---------------------------------------------------------------------------
// Random programs: every invariant, under every option set

class RandomProgram {
 public:
  explicit RandomProgram(uint64_t seed) : rng_(seed) {
    for (const char *t :
         {"f32[4,8]", "f32[4,8]", "f32[8]", "f32[4]", "f32[]", "f32[8,4]", "f32[8,8]"})
      pool_.push_back(b_.In(t));
    int steps = Int(5, 40);
    for (int i = 0; i < steps; i++) Step();
    std::vector<kir_vid> outs;
    int n_out = Int(1, 4);
    for (int i = 0; i < n_out; i++) outs.push_back(Coin(0.8) ? Latest() : Pick(pool_));
    b_.Out(outs);
  }
  const kir_program *get() const { return b_.get(); }
  int n_invars() const { return b_.get()->n_invars; }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  kir_vid Pick(const std::vector<kir_vid> &v) { return v[(size_t)Int(0, (int)v.size() - 1)]; }
  kir_vid Latest() {
    return pool_[(size_t)Int(std::max(0, (int)pool_.size() - 4), (int)pool_.size() - 1)];
  }

  std::string Type(kir_vid v) {
    char buf[KIR_AVAL_STR_CAP];
    return kir_aval_str(&b_.get()->vars[v].aval, buf, sizeof buf);
  }
  // A var of the type, recent ones preferred (longer chains); or -1.
  kir_vid Of(const std::string &type) {
    std::vector<kir_vid> c;
    for (kir_vid v : pool_)
      if (Type(v) == type) c.push_back(v);
    if (c.empty()) return KIR_NO_VAR;
    return Coin(0.6) ? c.back() : Pick(c);
  }
  void Keep(kir_vid v) {
    if (v != KIR_NO_VAR) pool_.push_back(v);
  }

  void Step() {
    static const char *unary[] = {"neg", "exp", "tanh", "log", "abs", "sqrt", "logistic"};
    static const char *binary[] = {"add", "mul", "max", "sub", "div"};
    static const char *types[] = {"f32[4,8]", "f32[8]",   "f32[4]",
                                  "f32[8,4]", "f32[4,4]", "f32[8,8]"};
    kir_vid x = Pick(pool_);
    std::string t = Type(x);
    switch (Int(0, 15)) {
      case 0:
      case 1:
      case 2: Keep(b_.Op(unary[Int(0, 6)], {x})); break;
      case 3:
      case 4:
      case 5: {
        kir_vid y = Coin(0.3) ? b_.Lit(1.5) : Of(t);
        Keep(b_.Op(binary[Int(0, 4)], {x, y == KIR_NO_VAR ? x : y}));
        break;
      }
      case 6:  // broadcasts into [4,8]
        if ((x = Of("f32[8]")) != KIR_NO_VAR && Coin())
          Keep(b_.Op("broadcast_in_dim", {x}, kCol));
        else if ((x = Of("f32[4]")) != KIR_NO_VAR)
          Keep(b_.Op("broadcast_in_dim", {x}, kRow));
        break;
      case 7: {  // reductions of [4,8]
        if ((x = Of("f32[4,8]")) == KIR_NO_VAR) break;
        const char *prim = Coin() ? "reduce_sum" : "reduce_max";
        Keep(b_.Op(prim, {x}, Coin(0.7) ? "axes=(1,)" : "axes=(0,)"));
        break;
      }
      case 8:
        if (t == "f32[4,8]" || t == "f32[8,4]")
          Keep(b_.Op("transpose", {x}, "permutation=(1, 0)"));
        else if (t == "f32[4]" || t == "f32[8]")
          Keep(b_.Op("reduce_sum", {x}, "axes=(0,)"));
        break;
      case 9:
        if (t == "f32[4,8]")
          Keep(b_.Op("reshape", {x}, "new_sizes=(8, 4)"));
        else if (t == "f32[4]")
          Keep(b_.Op("expand_dims", {x}, "dimensions=(1,)"));
        else if (t == "f32[4,1]" && (x = Of("f32[4,8]")) != KIR_NO_VAR)
          Keep(b_.Op("sub", {x, Of("f32[4,1]")}));
        break;
      case 10:
        if (t == "f32[4,8]")
          Keep(b_.Op("rev", {x}, "dimensions=(1,)"));
        else if (t == "f32[8,8]")
          Keep(b_.Op("slice", {x}, "start_indices=(2, 0) limit_indices=(6, 8) strides=(1, 1)"));
        else
          Keep(b_.Op("iota", {}, "dimension=0 dtype=float32 shape=(4, 8)"));
        break;
      case 11: {  // a dense layer, sometimes with bias and relu
        kir_vid a = Of("f32[4,8]"), w = Of("f32[8,8]");
        if (a == KIR_NO_VAR || w == KIR_NO_VAR) break;
        kir_vid d = b_.Op("dot_general", {a, w}, kMatmul);
        if (Coin(0.6) && (x = Of("f32[8]")) != KIR_NO_VAR) {
          d = b_.Op("add", {d, b_.Op("broadcast_in_dim", {x}, kCol)});
          if (Coin()) d = b_.Op("max", {d, b_.Lit(0.0)});
        }
        Keep(d);
        break;
      }
      case 12:
        if (t == "f32[4,8]")
          Keep(b_.Op("sort", {x}, "dimension=1 is_stable=True num_keys=1"));
        else if (t == "f32[8]")
          Keep(b_.Op("cumsum", {x}, "axis=0 reverse=False"));
        else
          Keep(b_.Op("exp", {x}));
        break;
      case 13:
        if (t == "f32[4,8]")
          Keep(b_.Op("convert_element_type", {b_.Op("argmax", {x}, "axes=(1,) index_dtype=int32")},
                     "new_dtype=float32 weak_type=False"));
        break;
      case 14: {
        kir_params par;
        memset(&par, 0, sizeof par);
        par.debug_print.fmt = "{}";
        b_.Add(KIR_PRIM_DEBUG_PRINT, &par, {x});
        break;
      }
      default:
        if ((x = Of(types[Int(0, 5)])) != KIR_NO_VAR) Keep(b_.Op("mul", {x, x}));
        break;
    }
  }

  std::mt19937_64 rng_;
  Builder b_;
  std::vector<kir_vid> pool_;
};

TEST(FuseRandom, PlansKeepEveryInvariant) {
  std::vector<kfuse_options> variants;
  kfuse_options o = Defaults();
  variants.push_back(o);
  o.fuse = false;
  variants.push_back(o);
  o = Defaults();
  o.allow_row = false;
  variants.push_back(o);
  o = Defaults();
  o.max_group_eqns = 3;
  o.max_group_args = 5;
  variants.push_back(o);
  o = Defaults();
  o.row_max_elements = 4;
  variants.push_back(o);
  std::map<kfuse_kind, int> kinds;
  for (uint64_t seed = 1; seed <= 150; seed++) {
    RandomProgram r(seed);
    std::unique_ptr<bool[]> donated(new bool[(size_t)r.n_invars()]);
    std::mt19937 flip((unsigned)seed);
    for (int i = 0; i < r.n_invars(); i++) donated[i] = flip() % 2 == 1;
    for (size_t vi = 0; vi < variants.size(); vi++) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " variant " + std::to_string(vi));
      Plan plan = Build(r.get(), variants[vi], donated.get());
      ASSERT_TRUE(plan);
      for (int gi = 0; gi < plan->n_groups; gi++) kinds[plan->groups[gi].kind]++;
      Plan again = Build(r.get(), variants[vi], donated.get());
      ASSERT_EQ(Text(r.get(), plan.get()), Text(r.get(), again.get()))
          << "planning is not deterministic";
      if (::testing::Test::HasFailure()) {
        char *text = nullptr;
        kir_print(r.get(), &text);
        ADD_FAILURE() << text << "\n" << Text(r.get(), plan.get());
        free(text);
        return;
      }
    }
  }
  for (kfuse_kind k : {KFUSE_LOOP, KFUSE_REDUCE, KFUSE_ROW, KFUSE_DOT, KFUSE_OPAQUE})
    EXPECT_GT(kinds[k], 10) << "random programs rarely make " << kfuse_kind_name(k) << " groups";
}

}  // namespace
