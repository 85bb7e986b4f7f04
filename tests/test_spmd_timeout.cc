// The CPU rendezvous honours KILN_COLLECTIVE_TIMEOUT (default 300 s): a
// device stuck before a collective (an injected host callback that sleeps)
// fails the call with KILN_ERR_COLLECTIVE naming the collective, the axis,
// the shape and the devices, and the context runs the next call fine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

bool Contains(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

std::atomic<int> stuck_device{-1};

// Sleeps past the timeout on the stuck device, then passes its input on.
kiln_status SleepOn(void *, int, const kiln_host_buffer *in, int, kiln_host_buffer *out) {
  int32_t d;
  memcpy(&d, in[0].data, 4);
  if (d == stuck_device.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  memcpy(out[0].data, in[0].data, 4);
  return KILN_OK;
}

kiln_tree *Stuck(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *i = kiln_axis_index(t, "i"), *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_I32;
  kiln_host_callback(t, SleepOn, nullptr, 1, &i, 1, &a, &r);
  kiln_val *x = kiln_add(t, kiln_arg(args, 0), kiln_convert(t, r, KILN_F32));
  return kiln_tree_val(kiln_psum(t, x, "i"));
}

TEST(SpmdTimeout, AStuckCpuDeviceTimesOutTheCollective) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CPU;
  opts.num_cpu_devices = 4;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK) << kiln_last_error();
  int64_t n = 4;
  const char *names[] = {"i"};
  kiln_mesh *mesh = nullptr;
  ASSERT_EQ(kiln_mesh_new(ctx, 1, &n, names, nullptr, &mesh), KILN_OK) << kiln_last_error();
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(Stuck, nullptr, "stuck", &f), KILN_OK);
  kiln_pspec *ps = nullptr, *po = nullptr;
  ASSERT_EQ(kiln_pspec_parse("i", &ps), KILN_OK);
  ASSERT_EQ(kiln_pspec_parse("", &po), KILN_OK);
  kiln_tree *leaf = kiln_tree_ptr(ps), *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(po);
  ASSERT_EQ(kiln_shard_map(f, mesh, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, sm, nullptr, &j), KILN_OK) << kiln_last_error();
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  std::vector<float> v = {1, 2, 3, 4};
  int64_t shape[] = {4};
  kiln_array *x = nullptr, *y = nullptr;
  ASSERT_EQ(kiln_array_from_host(dev, KILN_F32, 1, shape, v.data(), 16, &x), KILN_OK);

  setenv("KILN_COLLECTIVE_TIMEOUT", "0.3", 1);
  stuck_device = 2;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &y), KILN_ERR_COLLECTIVE);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string msg = kiln_last_error();
  for (const char *want : {"psum", "axis 'i'", "float32[1]", "device 0", "participant(s) 2",
                           "did not arrive within 0.3 s"})
    EXPECT_TRUE(Contains(msg, want)) << want << " missing from: " << msg;
  EXPECT_LT(s, 10.0);  // not the 300 s default

  stuck_device = -1;
  ASSERT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &y), KILN_OK) << kiln_last_error();
  float sum = 0;
  ASSERT_EQ(kiln_array_to_host(y, &sum, 4), KILN_OK);
  EXPECT_EQ(sum, 1 + 2 + 3 + 4 + 0 + 1 + 2 + 3);
  unsetenv("KILN_COLLECTIVE_TIMEOUT");

  kiln_array_release(x), kiln_array_release(y);
  kiln_jit_free(j);
  kiln_tree_free(ins), kiln_tree_free(outs);
  kiln_pspec_free(ps), kiln_pspec_free(po);
  kiln_func_free(sm), kiln_func_free(f);
  kiln_mesh_free(mesh);
  kiln_ctx_free(ctx);
}

}  // namespace
