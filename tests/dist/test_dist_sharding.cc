// Meshes, partition specs and named shardings against JAX on 8 CPU devices
// (golden/dist_sharding.txt): shard shapes and every device's index ranges,
// the errors JAX raises, and kiln's own argument checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "kiln/kiln.h"

namespace {

using dist_test::Contains;
using dist_test::Ints;
using dist_test::Split;

class DistSharding : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = 8;
    ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << kiln_last_error();
  }
  void TearDown() override { kiln_ctx_free(ctx_); }

  kiln_mesh *Mesh(const std::vector<int64_t> &shape, const std::vector<const char *> &names,
                  kiln_device *const *devices = nullptr) {
    kiln_mesh *m = nullptr;
    EXPECT_EQ(kiln_mesh_new(ctx_, (int)shape.size(), shape.data(), names.data(), devices, &m), KILN_OK)
        << kiln_last_error();
    return m;
  }

  kiln_ctx *ctx_ = nullptr;
};

TEST_F(DistSharding, MatchesJaxIndexMaps) {
  std::ifstream in(KILN_GOLDEN_DIR "/dist_sharding.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int cases = 0, errors = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = Split(line, '|');
    ASSERT_EQ(f.size(), 6u) << line;
    std::vector<int64_t> mshape = Ints(f[0], 'x');
    std::vector<std::string> names = Split(f[1], ',');
    std::vector<const char *> cnames;
    for (const std::string &n : names) cnames.push_back(n.c_str());
    std::vector<int64_t> shape = Ints(f[3], ',');
    SCOPED_TRACE(line);
    kiln_mesh *mesh = Mesh(mshape, cnames);
    kiln_pspec *spec = nullptr;
    ASSERT_EQ(kiln_pspec_parse(f[2].c_str(), &spec), KILN_OK) << kiln_last_error();
    kiln_sharding *s = nullptr;
    kiln_status st = kiln_sharding_named(mesh, spec, &s);
    std::vector<int64_t> shard(shape.size());
    if (st == KILN_OK) st = kiln_sharding_shard_shape(s, (int)shape.size(), shape.data(), shard.data());
    if (f[4] == "ERR") {
      EXPECT_NE(st, KILN_OK);
      if (f[5] == "IndivisibleError") {
        EXPECT_EQ(st, KILN_ERR_SHAPE);
        EXPECT_TRUE(Contains(kiln_last_error(), "does not divide evenly")) << kiln_last_error();
      } else {
        EXPECT_TRUE(Contains(kiln_last_error(), "more than once")) << kiln_last_error();
      }
      errors++;
    } else {
      ASSERT_EQ(st, KILN_OK) << kiln_last_error();
      EXPECT_EQ(shard, Ints(f[4], ','));
      std::vector<std::string> ranges = Split(f[5], ';');
      ASSERT_EQ((int64_t)ranges.size(), kiln_sharding_device_count(s));
      for (size_t i = 0; i < ranges.size(); i++) {
        std::vector<int64_t> start(shape.size()), stop(shape.size());
        ASSERT_EQ(kiln_sharding_device_indices(s, (int64_t)i, (int)shape.size(), shape.data(),
                                               start.data(), stop.data()),
                  KILN_OK);
        EXPECT_EQ(kiln_device_index(kiln_sharding_device(s, (int64_t)i)), (int)i);
        std::vector<std::string> dims = Split(ranges[i], ',');
        for (size_t d = 0; d < shape.size(); d++)
          EXPECT_EQ(std::to_string(start[d]) + ":" + std::to_string(stop[d]), dims[d])
              << "device " << i << " dim " << d;
      }
    }
    cases++;
    kiln_sharding_free(s);
    kiln_pspec_free(spec);
    kiln_mesh_free(mesh);
  }
  EXPECT_GT(cases, 200);
  EXPECT_GT(errors, 10);
}

TEST_F(DistSharding, MeshAccessorsAndDeviceOrder) {
  std::vector<kiln_device *> devs(8);
  for (int i = 0; i < 8; i++) ASSERT_EQ(kiln_device_get(ctx_, 7 - i, &devs[i]), KILN_OK);
  kiln_mesh *m = Mesh({2, 4}, {"data", "model"}, devs.data());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(kiln_mesh_ndim(m), 2);
  EXPECT_EQ(kiln_mesh_axis_size(m, 1), 4);
  EXPECT_EQ(kiln_mesh_axis_size(m, 2), -1);
  EXPECT_STREQ(kiln_mesh_axis_name(m, 0), "data");
  EXPECT_EQ(kiln_mesh_axis_index(m, "model"), 1);
  EXPECT_EQ(kiln_mesh_axis_index(m, "x"), -1);
  EXPECT_EQ(kiln_mesh_device_count(m), 8);
  kiln_device *d = nullptr;
  int64_t at[2] = {1, 2};
  ASSERT_EQ(kiln_mesh_device_at(m, at, &d), KILN_OK);
  EXPECT_EQ(kiln_device_index(d), 7 - 6);
  at[1] = 4;
  EXPECT_EQ(kiln_mesh_device_at(m, at, &d), KILN_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(Contains(kiln_last_error(), "'model'")) << kiln_last_error();
  kiln_mesh_free(m);
}

TEST_F(DistSharding, MeshErrors) {
  kiln_mesh *m = nullptr;
  int64_t s3[1] = {3}, s24[2] = {2, 4};
  const char *one[1] = {"data"}, *dup[2] = {"data", "data"}, *empty[2] = {"data", ""};
  EXPECT_EQ(kiln_mesh_new(ctx_, 1, s3, one, nullptr, &m), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "3 devices")) << kiln_last_error();
  EXPECT_EQ(kiln_mesh_new(ctx_, 2, s24, dup, nullptr, &m), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "both named 'data'")) << kiln_last_error();
  EXPECT_EQ(kiln_mesh_new(ctx_, 2, s24, empty, nullptr, &m), KILN_ERR_ARGUMENT);
  std::vector<kiln_device *> devs(8);
  for (int i = 0; i < 8; i++) ASSERT_EQ(kiln_device_get(ctx_, i % 7, &devs[i]), KILN_OK);
  const char *two[2] = {"data", "model"};
  EXPECT_EQ(kiln_mesh_new(ctx_, 2, s24, two, devs.data(), &m), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "listed twice")) << kiln_last_error();
  kiln_ctx *other = nullptr;
  ASSERT_EQ(kiln_ctx_new(nullptr, &other), KILN_OK);
  ASSERT_EQ(kiln_device_get(other, 0, &devs[7]), KILN_OK);
  devs[0] = devs[7], devs[7] = nullptr;
  for (int i = 1; i < 8; i++) ASSERT_EQ(kiln_device_get(ctx_, i, &devs[i]), KILN_OK);
  int64_t s8[1] = {8};
  EXPECT_EQ(kiln_mesh_new(ctx_, 1, s8, one, devs.data(), &m), KILN_ERR_WRONG_DEVICE);
  EXPECT_EQ(m, nullptr);
  kiln_ctx_free(other);
}

TEST_F(DistSharding, SpecParsingAndBuilding) {
  struct Case {
    const char *text;
    const char *jax;
  } cases[] = {
      {"", "PartitionSpec()"},
      {"data, None", "PartitionSpec('data', None)"},
      {" (data, model) ", "PartitionSpec(('data', 'model'))"},
      {"'data', ('a',), None,", "PartitionSpec('data', 'a', None)"},
      {"(), data", "PartitionSpec(None, 'data')"},
  };
  for (const Case &c : cases) {
    kiln_pspec *p = nullptr;
    ASSERT_EQ(kiln_pspec_parse(c.text, &p), KILN_OK) << c.text << ": " << kiln_last_error();
    char buf[256];
    EXPECT_STREQ(kiln_pspec_format(p, buf, sizeof buf), c.jax);
    kiln_pspec_free(p);
  }
  kiln_pspec *p = nullptr;
  ASSERT_EQ(kiln_pspec_new(&p), KILN_OK);
  const char *axes[2] = {"data", "model"};
  ASSERT_EQ(kiln_pspec_append_none(p), KILN_OK);
  ASSERT_EQ(kiln_pspec_append(p, 2, axes), KILN_OK);
  EXPECT_EQ(kiln_pspec_rank(p), 2);
  EXPECT_EQ(kiln_pspec_entry_axes(p, 0), 0);
  EXPECT_STREQ(kiln_pspec_entry_axis(p, 1, 1), "model");
  EXPECT_EQ(kiln_pspec_entry_axis(p, 1, 2), nullptr);
  const char *bad[1] = {""};
  EXPECT_EQ(kiln_pspec_append(p, 1, bad), KILN_ERR_ARGUMENT);
  kiln_pspec_free(p);

  struct Bad {
    const char *text;
    const char *msg;
  } bads[] = {
      {"data,,", "position 6 of \"data,,\""},
      {"data model", "expected ','"},
      {"(data, None)", "None inside parentheses"},
      {"(data", "expected ',' or ')' at position 6"},
      {"(data,", "expected an axis name"},
      {"'data", "unterminated"},
  };
  for (const Bad &b : bads) {
    kiln_pspec *q = reinterpret_cast<kiln_pspec *>(1);
    EXPECT_EQ(kiln_pspec_parse(b.text, &q), KILN_ERR_ARGUMENT) << b.text;
    EXPECT_EQ(q, nullptr);
    EXPECT_TRUE(Contains(kiln_last_error(), b.msg)) << b.text << ": " << kiln_last_error();
  }
}

TEST_F(DistSharding, ShardingErrorsAndKinds) {
  kiln_mesh *m = Mesh({2, 4}, {"data", "model"});
  kiln_pspec *p = nullptr;
  kiln_sharding *s = nullptr;
  ASSERT_EQ(kiln_pspec_parse("batch", &p), KILN_OK);
  EXPECT_EQ(kiln_sharding_named(m, p, &s), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "'batch'")) << kiln_last_error();
  kiln_pspec_free(p);
  ASSERT_EQ(kiln_pspec_parse("None, (data, model)", &p), KILN_OK);
  ASSERT_EQ(kiln_sharding_named(m, p, &s), KILN_OK);
  int64_t g[2] = {4, 12}, shard[2];
  EXPECT_EQ(kiln_sharding_shard_shape(s, 2, g, shard), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "dimension 1 of size 12")) << kiln_last_error();
  EXPECT_TRUE(Contains(kiln_last_error(), "'data', 'model' (8 devices)")) << kiln_last_error();
  EXPECT_EQ(kiln_sharding_shard_shape(s, 1, g, shard), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "rank 1")) << kiln_last_error();
  kiln_sharding_free(s);
  kiln_pspec_free(p);

  ASSERT_EQ(kiln_sharding_replicated(m, &s), KILN_OK);
  int64_t start[2], stop[2];
  ASSERT_EQ(kiln_sharding_device_indices(s, 5, 2, g, start, stop), KILN_OK);
  EXPECT_EQ(stop[0] - start[0], 4);
  EXPECT_EQ(stop[1], 12);
  EXPECT_EQ(kiln_sharding_device_indices(s, 8, 2, g, start, stop), KILN_ERR_OUT_OF_RANGE);
  kiln_sharding_free(s);

  kiln_device *d3 = nullptr;
  ASSERT_EQ(kiln_device_get(ctx_, 3, &d3), KILN_OK);
  ASSERT_EQ(kiln_sharding_single(d3, &s), KILN_OK);
  EXPECT_EQ(kiln_sharding_device_count(s), 1);
  EXPECT_EQ(kiln_sharding_device(s, 0), d3);
  EXPECT_EQ(kiln_sharding_device(s, 1), nullptr);
  ASSERT_EQ(kiln_sharding_device_indices(s, 0, 2, g, start, stop), KILN_OK);
  EXPECT_EQ(stop[1], 12);
  kiln_sharding_free(s);
  kiln_mesh_free(m);
}

TEST_F(DistSharding, Visualize) {
  kiln_mesh *m = Mesh({2, 4}, {"data", "model"});
  kiln_pspec *p = nullptr;
  kiln_sharding *s = nullptr;
  ASSERT_EQ(kiln_pspec_parse("data, model", &p), KILN_OK);
  ASSERT_EQ(kiln_sharding_named(m, p, &s), KILN_OK);
  int64_t g[2] = {8, 8};
  char *text = nullptr;
  ASSERT_EQ(kiln_visualize_sharding(s, 2, g, &text), KILN_OK) << kiln_last_error();
  EXPECT_STREQ(text,
               "+-------+-------+-------+-------+\n"
               "| CPU 0 | CPU 1 | CPU 2 | CPU 3 |\n"
               "+-------+-------+-------+-------+\n"
               "| CPU 4 | CPU 5 | CPU 6 | CPU 7 |\n"
               "+-------+-------+-------+-------+\n");
  free(text);
  kiln_sharding_free(s);
  kiln_pspec_free(p);

  ASSERT_EQ(kiln_pspec_parse("model", &p), KILN_OK);  // 1-D, replicated over data
  ASSERT_EQ(kiln_sharding_named(m, p, &s), KILN_OK);
  ASSERT_EQ(kiln_visualize_sharding(s, 1, g, &text), KILN_OK);
  EXPECT_STREQ(text,
               "+---------+---------+---------+---------+\n"
               "| CPU 0,4 | CPU 1,5 | CPU 2,6 | CPU 3,7 |\n"
               "+---------+---------+---------+---------+\n");
  free(text);
  int64_t g3[3] = {8, 8, 8};
  EXPECT_EQ(kiln_visualize_sharding(s, 3, g3, &text), KILN_ERR_SHAPE);
  kiln_sharding_free(s);
  kiln_pspec_free(p);
  kiln_mesh_free(m);
}

}  // namespace
