// Register use of the generated ROW and REDUCE kernels, read from the
// ptxas report NVRTC gives for -Xptxas=-v while it builds the cubin (no GPU
// needed), for sm_80 and sm_90: no kernel spills or keeps a stack frame, and
// each uses few enough registers that its block size reaches the occupancy
// it was designed for on an H100 (sm_90: 64K registers, 2048 threads and 32
// blocks per SM). The figures are printed as a table.
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <cstdio>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "codegen_test_programs.h"
#include "kiln/kiln.h"

using namespace codegen_test;

namespace {

struct Figures {
  int regs = -1, spill_stores = -1, spill_loads = -1, stack = -1, smem = 0;
};

// The numbers the first match of `pattern` in `log` captures.
bool Scan(const std::string &log, const char *pattern, std::vector<int *> into) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(pattern))) return false;
  for (size_t i = 0; i < into.size(); i++) *into[i] = std::stoi(m[i + 1].str());
  return true;
}

Figures Ptxas(const kcg_kernel &k, const std::string &arch) {
  Figures f;
  nvrtcProgram prog;
  EXPECT_EQ(nvrtcCreateProgram(&prog, k.source, k.name, 0, nullptr, nullptr), NVRTC_SUCCESS);
  std::string a = "-arch=" + arch;
  const char *opts[] = {a.c_str(), "-Xptxas=-v"};
  nvrtcResult rc = nvrtcCompileProgram(prog, 2, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, log.data());
  nvrtcDestroyProgram(&prog);
  EXPECT_EQ(rc, NVRTC_SUCCESS) << k.name << " for " << arch << ":\n" << log;
  // "Used 40 registers, used 1 barriers, 2048 bytes smem" and
  // "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
  EXPECT_TRUE(Scan(log, R"(Used (\d+) registers)", {&f.regs})) << log;
  EXPECT_TRUE(Scan(log, R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)",
                   {&f.stack, &f.spill_stores, &f.spill_loads}))
      << log;
  Scan(log, R"((\d+) bytes smem)", {&f.smem});
  return f;
}

// Blocks per SM on sm_90 (H100) for this register count, block and static
// shared memory: registers are given per warp in units of 256, shared
// memory per block with 1 KiB reserved, out of 228 KiB.
double Occupancy(const Figures &f, int threads) {
  int warps = (threads + 31) / 32;
  int per_warp = (f.regs * 32 + 255) / 256 * 256;
  int by_regs = per_warp ? (65536 / per_warp) / warps : 32;
  int by_threads = 2048 / threads;
  int by_smem = (228 * 1024) / (f.smem + 1024);
  int blocks = std::min(std::min(by_regs, by_threads), std::min(by_smem, 32));
  return (double)(blocks * threads) / 2048.0;
}

struct Row {
  std::string what, text;
  kfuse_kind kind;
  double occupancy;  // the design's floor on sm_90
};

}  // namespace

TEST(CodegenRegisters, RowAndReductionKernelsDoNotSpill) {
  std::vector<Row> rows;
  // Row kernels keep half the SM's threads resident (64 registers each);
  // lengths that do and do not divide the block, up to rows too long to
  // keep in registers.
  for (int64_t len : {100, 1000, 4096, 8500, 10240, 16384, 30000, 32768})
    rows.push_back({"softmax f32 L=" + std::to_string(len), Softmax(8, len), KFUSE_ROW, 0.5});
  for (int64_t len : {4096, 20000, 32768})
    rows.push_back({"softmax bf16 L=" + std::to_string(len), Softmax(8, len, "bf16"), KFUSE_ROW, 0.5});
  for (int64_t len : {1024, 8192, 24576})
    rows.push_back({"layernorm f32 L=" + std::to_string(len), LayerNorm(8, len), KFUSE_ROW, 0.5});
  // Three kept values (c, d, e) per element.
  for (int64_t len : {3000, 12000, 24576}) {
    std::string l = std::to_string(len), row = "f32[8," + l + "]";
    rows.push_back({"3 kept f32 L=" + l,
                    "{ lambda ; a:" + row + " b:" + row + ". let c:" + row + " = mul a b\n"
                    " d:" + row + " = tanh c\n e:" + row + " = exp d\n"
                    " s:f32[8] = reduce_sum[axes=(1,)] e\n t:f32[8] = reduce_max[axes=(1,)] d\n"
                    " u:f32[8] = add s t\n"
                    " w:f32[8,1] = broadcast_in_dim[broadcast_dimensions=(0,) shape=(8, 1)] u\n"
                    " x:" + row + " = mul e w\n y:" + row + " = add x d\n z:" + row + " = add y c\n"
                    " in (z,) }",
                    KFUSE_ROW, 0.5});
  }
  // Reductions: 256-thread tiles at full occupancy, half with many accumulators.
  rows.push_back({"full sum f32 16M",
                  "{ lambda ; a:f32[16777216]. let b:f32[] = reduce_sum[axes=(0,)] a in (b,) }",
                  KFUSE_REDUCE, 1.0});
  rows.push_back({"full sum+max bf16 16M",
                  "{ lambda ; a:bf16[16777216]. let b:bf16[] = reduce_sum[axes=(0,)] a\n"
                  " c:bf16[] = reduce_max[axes=(0,)] a in (b, c) }",
                  KFUSE_REDUCE, 1.0});
  rows.push_back({"full sum f64 4M",
                  "{ lambda ; a:f64[4194304]. let b:f64[] = reduce_sum[axes=(0,)] a in (b,) }",
                  KFUSE_REDUCE, 1.0});
  rows.push_back({"rows sum f32 [8,1M]",
                  "{ lambda ; a:f32[8,1048576]. let b:f32[8] = reduce_sum[axes=(1,)] a in (b,) }",
                  KFUSE_REDUCE, 1.0});
  rows.push_back({"columns sum f32 [8192,1024]",
                  "{ lambda ; a:f32[8192,1024]. let b:f32[1024] = reduce_sum[axes=(0,)] a in (b,) }",
                  KFUSE_REDUCE, 1.0});
  rows.push_back({"columns max i32 [100000,7]",
                  "{ lambda ; a:i32[100000,7]. let b:i32[7] = reduce_max[axes=(0,)] a in (b,) }",
                  KFUSE_REDUCE, 1.0});
  rows.push_back({"6 column reductions [4096,512]",
                  "{ lambda ; a:f32[4096,512] b:i32[4096,512]. let\n"
                  " s:f32[512] = reduce_sum[axes=(0,)] a\n m:f32[512] = reduce_max[axes=(0,)] a\n"
                  " n:f32[512] = reduce_min[axes=(0,)] a\n p:f32[512] = reduce_prod[axes=(0,)] a\n"
                  " t:i32[512] = reduce_sum[axes=(0,)] b\n u:i32[512] = reduce_max[axes=(0,)] b\n"
                  " in (s, m, n, p, t, u) }",
                  KFUSE_REDUCE, 0.5});
  rows.push_back({"middle sum f32 [32,4096,64]",
                  "{ lambda ; a:f32[32,4096,64]. let b:f32[32,64] = reduce_sum[axes=(1,)] a in (b,) }",
                  KFUSE_REDUCE, 1.0});

  printf("%-30s %-6s %5s %6s %6s %6s %6s %5s %9s\n", "kernel", "arch", "regs", "spillS",
         "spillL", "stack", "smem", "block", "occ sm90");
  for (const Row &r : rows) {
    SCOPED_TRACE(r.what);
    Program p = Parse(r.text);
    ASSERT_TRUE(p);
    Group g(p.get(), r.kind);
    for (int sm : {80, 90}) {
      kcg_kernel k{};
      kcg_target_info t{KCG_TARGET_CUDA, sm};
      ASSERT_EQ(kcg_emit(p.get(), g.get(), &t, &k), KILN_OK) << kiln_last_error();
      std::string arch = "sm_" + std::to_string(sm);
      Figures f = Ptxas(k, arch);
      double occ = Occupancy(f, k.block_threads);
      std::string occ_text = sm == 90 ? std::to_string((int)(occ * 100 + 0.5)) + "%" : "-";
      printf("%-30s %-6s %5d %6d %6d %6d %6d %5d %9s\n", r.what.c_str(), arch.c_str(), f.regs,
             f.spill_stores, f.spill_loads, f.stack, f.smem, k.block_threads, occ_text.c_str());
      EXPECT_EQ(f.spill_stores, 0) << k.name << " " << arch;
      EXPECT_EQ(f.spill_loads, 0) << k.name << " " << arch;
      EXPECT_EQ(f.stack, 0) << k.name << " " << arch;
      if (sm == 90) {
        EXPECT_GE(occ, r.occupancy) << k.name << ": " << f.regs << " registers";
      }
      kcg_kernel_free(&k);
    }
  }
}
