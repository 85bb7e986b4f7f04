// Virtual CPU devices share the machine: each of N devices gets its share of
// the cores for its own worker pool and reports it, and running programs on
// every device starts no more threads than those shares add up to.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "dist_test_support.h"

namespace {

int Cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

int ThreadsNow() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key)
    if (key == "Threads:") {
      int n = 0;
      in >> n;
      return n;
    }
  return -1;
}

class DistCpuDevices : public dist_test::CpuDevices {};

TEST_F(DistCpuDevices, EachDeviceReportsItsShareOfTheCores) {
  int cores = Cores(), total = 0, lo = 1 << 30, hi = 0;
  for (int i = 0; i < n_; i++) {
    kiln_device_info info;
    ASSERT_EQ(kiln_device_info_get(Dev(i), &info), KILN_OK);
    EXPECT_GE(info.multiprocessors, 1);
    total += info.multiprocessors;
    lo = std::min(lo, info.multiprocessors);
    hi = std::max(hi, info.multiprocessors);
  }
  EXPECT_EQ(total, std::max(cores, n_)) << cores << " cores, " << n_ << " devices";
  EXPECT_LE(hi - lo, 1);  // shares as even as the count allows
}

// The host BLAS's own thread pool (OpenBLAS: one per process) is capped to
// a device's share, since every device thread may call it at once; unless
// the user sized it with OPENBLAS_NUM_THREADS or the BLAS is not OpenBLAS.
TEST_F(DistCpuDevices, TheBlasPoolIsCappedToADevicesShare) {
  auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!get || getenv("OPENBLAS_NUM_THREADS") || n_ < 2)
    GTEST_SKIP() << "not OpenBLAS, sized by the user, or one device";
  EXPECT_LE(get(), std::max(1, Cores() / n_)) << Cores() << " cores, " << n_ << " devices";
}

// One device gets every core.
TEST(DistCpuDevicesAlone, OneDeviceGetsEveryCore) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CPU;
  opts.num_cpu_devices = 1;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK);
  kiln_device *d = nullptr;
  kiln_device_info info;
  ASSERT_EQ(kiln_device_get(ctx, 0, &d), KILN_OK);
  ASSERT_EQ(kiln_device_info_get(d, &info), KILN_OK);
  EXPECT_EQ(info.multiprocessors, Cores());
  kiln_ctx_free(ctx);
}

// Programs on every device: the workers started are each device's share
// minus the calling thread, in all no more than the machine's cores.
TEST_F(DistCpuDevices, RunningOnEveryDeviceStartsOnlyTheSharedWorkers) {
  int before = ThreadsNow();
  ASSERT_GT(before, 0);
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new([](kiln_trace *t, const kiln_tree *args, void *) -> kiln_tree * {
              kiln_val *x = kiln_arg(args, 0);
              return kiln_tree_val(kiln_mul(t, kiln_exp(t, x), x));
            }, nullptr, "exp_times", &f),
            KILN_OK);
  int workers = 0;
  std::vector<float> host(1 << 16, 0.5f);
  int64_t shape[1] = {1 << 16};
  for (int i = 0; i < n_; i++) {
    kiln_device_info info;
    ASSERT_EQ(kiln_device_info_get(Dev(i), &info), KILN_OK);
    workers += info.multiprocessors - 1;
    kiln_jit_options o = {};
    o.device = i;
    kiln_jit *jit = nullptr;
    ASSERT_EQ(kiln_jit_new(ctx_, f, &o, &jit), KILN_OK);
    kiln_array *a = nullptr, *out = nullptr;
    ASSERT_EQ(kiln_array_from_host(Dev(i), KILN_F32, 1, shape, host.data(), host.size() * 4, &a),
              KILN_OK);
    ASSERT_EQ(kiln_jit_call_arrays(jit, 1, &a, 1, &out), KILN_OK) << kiln_last_error();
    std::vector<float> got(host.size());
    ASSERT_EQ(kiln_array_to_host(out, got.data(), got.size() * 4), KILN_OK);
    EXPECT_NEAR(got.back(), 0.5f * 1.6487213f, 1e-6f);
    kiln_array_release(a);
    kiln_array_release(out);
    kiln_jit_free(jit);
  }
  kiln_func_free(f);
  EXPECT_EQ(ThreadsNow() - before, workers);
  EXPECT_LE(workers + n_, std::max(Cores(), n_));
}

}  // namespace
