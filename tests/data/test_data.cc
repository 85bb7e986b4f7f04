// src/data: IDX and .npy loaders, jax.random.permutation's order, batches.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/kiln.h"

namespace {

std::string temp_path(const char *name) {
  const char *dir = getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/kiln_test_data_" + std::to_string(getpid()) +
         "_" + name;
}

// An IDX file of u8[rows, cols] (value (r*cols+c)*7 mod 256) written through
// gzip (gz = true) or plain, with `cut` bytes removed from the end.
std::string write_idx(const char *name, int rows, int cols, bool gz, size_t cut = 0) {
  std::string b = {0, 0, 0x08, 2};
  for (int d : {rows, cols})
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((d >> s) & 0xff));
  for (int i = 0; i < rows * cols; i++) b.push_back(static_cast<char>(i * 7));
  b.resize(b.size() - cut);
  std::string p = temp_path(name);
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  }
  return p;
}

TEST(DataIdx, GzipAndPlainReadTheSame) {
  for (bool gz : {true, false}) {
    std::string p = write_idx(gz ? "a.gz" : "a", 5, 3, gz);
    kiln_host_data d{};
    ASSERT_EQ(kiln_load_idx(p.c_str(), &d), KILN_OK) << kiln_last_error();
    EXPECT_EQ(d.dtype, KILN_U8);
    ASSERT_EQ(d.rank, 2);
    EXPECT_EQ(d.shape[0], 5);
    EXPECT_EQ(d.shape[1], 3);
    ASSERT_EQ(d.nbytes, 15u);
    for (int i = 0; i < 15; i++) EXPECT_EQ(static_cast<uint8_t *>(d.data)[i], uint8_t(i * 7));
    kiln_host_data_free(&d);
    unlink(p.c_str());
  }
}

TEST(DataIdx, BigEndianValuesAreConverted) {
  // i32[2] = {-2, 70000} and f32[1] = {1.5}, big-endian.
  std::string p = temp_path("be");
  const unsigned char i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xfe, 0, 1, 0x11, 0x70};
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(i32), sizeof i32);
  kiln_host_data d{};
  ASSERT_EQ(kiln_load_idx(p.c_str(), &d), KILN_OK) << kiln_last_error();
  EXPECT_EQ(d.dtype, KILN_I32);
  EXPECT_EQ(static_cast<int32_t *>(d.data)[0], -2);
  EXPECT_EQ(static_cast<int32_t *>(d.data)[1], 70000);
  kiln_host_data_free(&d);
  const unsigned char f32[] = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3f, 0xc0, 0, 0};
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(f32), sizeof f32);
  ASSERT_EQ(kiln_load_idx(p.c_str(), &d), KILN_OK) << kiln_last_error();
  EXPECT_EQ(static_cast<float *>(d.data)[0], 1.5f);
  kiln_host_data_free(&d);
  unlink(p.c_str());
}

void expect_io_error(kiln_status s, const std::string &path, const char *what) {
  EXPECT_EQ(s, KILN_ERR_IO);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(DataIdx, ErrorsNameTheFileAndTheProblem) {
  kiln_host_data d{};
  std::string p = write_idx("trunc.gz", 4, 4, true, 3);
  expect_io_error(kiln_load_idx(p.c_str(), &d), p, "truncated");
  EXPECT_EQ(d.data, nullptr);
  unlink(p.c_str());
  p = temp_path("magic");
  std::ofstream(p, std::ios::binary) << "hello world";
  expect_io_error(kiln_load_idx(p.c_str(), &d), p, "bad magic");
  const char bad_type[] = {0, 0, 0x42, 1, 0, 0, 0, 0};
  std::ofstream(p, std::ios::binary).write(bad_type, sizeof bad_type);
  expect_io_error(kiln_load_idx(p.c_str(), &d), p, "unknown IDX data type 0x42");
  unlink(p.c_str());
  expect_io_error(kiln_load_idx("/nonexistent/x.gz", &d), "/nonexistent/x.gz", "cannot open");
}

// A gzip member of `data` made by zlib's deflate (windowBits 31: gzip
// wrapper, its trailer the CRC-32 and the length mod 2^32, little-endian).
std::string gzip_member(const std::string &data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(data.size())) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef *>(&out[0]);
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Each gzip member's trailer is checked: cut off, or not matching its data,
// the file is KILN_ERR_IO naming it; members concatenate (as gzip -d does)
// and zero padding after the last is allowed, other bytes are not.
TEST(DataIdx, GzipTrailersAreChecked) {
  std::string idx = {0, 0, 0x08, 1, 0, 0, 0x01, 0x00};  // u8[256]
  for (int i = 0; i < 256; i++) idx.push_back(static_cast<char>(i * 13));
  const std::string gz = gzip_member(idx);
  ASSERT_EQ(gz.size() > 18, true);
  const size_t n = gz.size();
  // The trailer zlib wrote is the CRC-32 and ISIZE of the data.
  uLong crc = crc32(0, reinterpret_cast<const Bytef *>(idx.data()), static_cast<uInt>(idx.size()));
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(static_cast<unsigned char>(gz[n - 8 + i]), (crc >> (8 * i)) & 0xff);
    EXPECT_EQ(static_cast<unsigned char>(gz[n - 4 + i]), (idx.size() >> (8 * i)) & 0xff);
  }
  std::string p = temp_path("trailer.gz");
  auto load = [&](const std::string &bytes, kiln_host_data *d) {
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return kiln_load_idx(p.c_str(), d);
  };
  kiln_host_data d{};
  auto flip = [&](size_t at) {
    std::string b = gz;
    b[at] = static_cast<char>(b[at] ^ 0x04);
    return b;
  };
  struct Bad {
    const char *name;
    std::string bytes;
    const char *what;
  } bad[] = {
      {"no trailer", gz.substr(0, n - 8), "gzip member 1 is truncated"},
      {"half a trailer", gz.substr(0, n - 4), "gzip member 1 is truncated"},
      {"data cut short", gz.substr(0, n / 2), "gzip member 1 is truncated"},
      {"CRC-32 flipped", flip(n - 7), "gzip member 1 fails its CRC-32 check"},
      {"ISIZE flipped", flip(n - 2), "gzip member 1 fails its ISIZE check"},
      {"second member without trailer", gz + gz.substr(0, n - 8), "gzip member 2 is truncated"},
      {"trailing garbage", gz + "junk", "4 bytes of trailing garbage after gzip member 1"},
  };
  for (const Bad &b : bad) {
    expect_io_error(load(b.bytes, &d), p, b.what);
    EXPECT_EQ(d.data, nullptr) << b.name;
  }
  // A flipped bit inside the deflate data: corrupt or a CRC mismatch, never loaded.
  for (size_t at = 10; at < n - 8; at += 7) {
    EXPECT_EQ(load(flip(at), &d), KILN_ERR_IO) << "byte " << at;
    EXPECT_NE(std::string(kiln_last_error()).find(p), std::string::npos);
    kiln_host_data_free(&d);
  }
  // Two members (header and data split) and zero padding: the same data.
  std::string split = gzip_member(idx.substr(0, 5)) + gzip_member(idx.substr(5));
  for (const std::string &ok : {gz, split, gz + std::string(16, '\0')}) {
    ASSERT_EQ(load(ok, &d), KILN_OK) << kiln_last_error();
    ASSERT_EQ(d.nbytes, 256u);
    EXPECT_EQ(memcmp(d.data, idx.data() + 8, 256), 0);
    kiln_host_data_free(&d);
  }
  unlink(p.c_str());
}

// Debian's dataset-fashion-mnist (scripts/install-deps installs it).
TEST(DataIdx, FashionMnistWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (access((dir + "train-labels-idx1-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (auto [split, n] : {std::pair<const char *, int64_t>{"train", 60000}, {"t10k", 10000}}) {
    kiln_host_data img{}, lab{};
    ASSERT_EQ(kiln_load_idx((dir + split + "-images-idx3-ubyte.gz").c_str(), &img), KILN_OK)
        << kiln_last_error();
    ASSERT_EQ(kiln_load_idx((dir + split + "-labels-idx1-ubyte.gz").c_str(), &lab), KILN_OK)
        << kiln_last_error();
    EXPECT_EQ(img.dtype, KILN_U8);
    ASSERT_EQ(img.rank, 3);
    EXPECT_EQ(img.shape[0], n);
    EXPECT_EQ(img.shape[1], 28);
    EXPECT_EQ(img.shape[2], 28);
    ASSERT_EQ(lab.rank, 1);
    ASSERT_EQ(lab.shape[0], n);
    // Fashion-MNIST is balanced: n / 10 examples of each of the 10 classes.
    std::vector<int64_t> count(256, 0);
    for (int64_t i = 0; i < n; i++) count[static_cast<uint8_t *>(lab.data)[i]]++;
    for (int c = 0; c < 10; c++) EXPECT_EQ(count[c], n / 10) << split << " class " << c;
    kiln_host_data_free(&img);
    kiln_host_data_free(&lab);
  }
}

// ---- .npy, against files numpy.save wrote (tests/golden/data.py) ----

std::string npy(const char *name) { return std::string(KILN_GOLDEN_DIR) + "/data_npy/" + name; }

double element(const kiln_host_data &d, int64_t i) {
  const void *p = d.data;
  switch (d.dtype) {
    case KILN_BOOL: return static_cast<const bool *>(p)[i];
    case KILN_I8: return static_cast<const int8_t *>(p)[i];
    case KILN_I16: return static_cast<const int16_t *>(p)[i];
    case KILN_I32: return static_cast<const int32_t *>(p)[i];
    case KILN_I64: return static_cast<double>(static_cast<const int64_t *>(p)[i]);
    case KILN_U8: return static_cast<const uint8_t *>(p)[i];
    case KILN_U16: return static_cast<const uint16_t *>(p)[i];
    case KILN_U32: return static_cast<const uint32_t *>(p)[i];
    case KILN_U64: return static_cast<double>(static_cast<const uint64_t *>(p)[i]);
    case KILN_F16: return kiln_f16_to_f32(static_cast<const uint16_t *>(p)[i]);
    case KILN_F32: return static_cast<const float *>(p)[i];
    case KILN_F64: return static_cast<const double *>(p)[i];
    default: return NAN;
  }
}

// data.py's values: i*0.5-3 for floats, i*3-5 signed, i*3 unsigned, i%3==0 bool.
double expected(kiln_dtype dt, int64_t i) {
  if (dt == KILN_BOOL) return i % 3 == 0;
  if (kiln_dtype_is_float(dt)) return static_cast<double>(i) * 0.5 - 3;
  return static_cast<double>(i * 3 - (kiln_dtype_is_unsigned(dt) ? 0 : 5));
}

TEST(DataNpy, EveryDtypeAndByteOrderNumpyWrites) {
  struct Case {
    const char *file;
    kiln_dtype dtype;
    std::vector<int64_t> shape;
  } cases[] = {
      {"f4_2x3.npy", KILN_F32, {2, 3}},     {"f8_4.npy", KILN_F64, {4}},
      {"f2_3x2.npy", KILN_F16, {3, 2}},     {"i8_5.npy", KILN_I64, {5}},
      {"i4_2x2x2.npy", KILN_I32, {2, 2, 2}}, {"u1_7.npy", KILN_U8, {7}},
      {"i1_3.npy", KILN_I8, {3}},           {"u2_2.npy", KILN_U16, {2}},
      {"b1_5.npy", KILN_BOOL, {5}},         {"i2_3.npy", KILN_I16, {3}},
      {"u4_2.npy", KILN_U32, {2}},          {"u8_2.npy", KILN_U64, {2}},
      {"be_f4_2x3.npy", KILN_F32, {2, 3}},  {"be_i8_2x3.npy", KILN_I64, {2, 3}},
      {"be_u2_2x3.npy", KILN_U16, {2, 3}},  {"v2_f4_2x3.npy", KILN_F32, {2, 3}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.file);
    kiln_host_data d{};
    ASSERT_EQ(kiln_load_npy(npy(c.file).c_str(), &d), KILN_OK) << kiln_last_error();
    EXPECT_EQ(d.dtype, c.dtype);
    ASSERT_EQ(d.rank, static_cast<int>(c.shape.size()));
    int64_t n = 1;
    for (int i = 0; i < d.rank; i++) {
      EXPECT_EQ(d.shape[i], c.shape[i]);
      n *= c.shape[i];
    }
    EXPECT_EQ(d.nbytes, static_cast<size_t>(n) * kiln_dtype_size(c.dtype));
    for (int64_t i = 0; i < n; i++) EXPECT_EQ(element(d, i), expected(c.dtype, i)) << "at " << i;
    kiln_host_data_free(&d);
  }
  kiln_host_data s{};
  ASSERT_EQ(kiln_load_npy(npy("scalar_f8.npy").c_str(), &s), KILN_OK) << kiln_last_error();
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(*static_cast<double *>(s.data), 2.5);
  kiln_host_data_free(&s);
}

TEST(DataNpy, ErrorsNameTheFileAndTheProblem) {
  kiln_host_data d{};
  std::string f = npy("fortran_f4_2x3.npy");
  expect_io_error(kiln_load_npy(f.c_str(), &d), f, "Fortran order");
  f = npy("complex_c8_2.npy");
  expect_io_error(kiln_load_npy(f.c_str(), &d), f, "unknown dtype '<c8'");
  // Truncated: the f4 file without its last two bytes.
  std::ifstream in(npy("f4_2x3.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string p = temp_path("trunc.npy");
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 2));
  expect_io_error(kiln_load_npy(p.c_str(), &d), p, "truncated");
  std::ofstream(p, std::ios::binary) << "NUMPY but not quite";
  expect_io_error(kiln_load_npy(p.c_str(), &d), p, "bad magic");
  unlink(p.c_str());
  EXPECT_EQ(d.data, nullptr);
}

// ---- permutation: jax.random.permutation, bit for bit ----

TEST(DataPermutation, MatchesJax) {
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/data.txt");
  ASSERT_TRUE(in) << "missing tests/golden/data.txt";
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    if (line.rfind("perm ", 0) != 0) continue;
    std::istringstream ss(line.substr(5));
    uint32_t key[2];
    int64_t n, step;
    std::string colon;
    ss >> std::hex >> key[0] >> key[1] >> std::dec >> n >> step >> colon;
    std::vector<int64_t> got(static_cast<size_t>(n));
    ASSERT_EQ(kiln_permutation(key, n, got.data()), KILN_OK) << kiln_last_error();
    int64_t v, i = 0;
    for (; ss >> v; i += step) ASSERT_EQ(got[static_cast<size_t>(i)], v) << line.substr(0, 40) << " at " << i;
    EXPECT_EQ(i, (n + step - 1) / step * step);
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (int64_t x : got) seen[static_cast<size_t>(x)]++;
    for (char c : seen) ASSERT_EQ(c, 1);
    records++;
  }
  EXPECT_GE(records, 9);
}

// ---- batches ----

TEST(DataBatch, DropRemainderOrFinalPartialBatch) {
  EXPECT_EQ(kiln_batch_count(10, 4, 1), 2);
  EXPECT_EQ(kiln_batch_count(10, 4, 0), 3);
  EXPECT_EQ(kiln_batch_count(8, 4, 0), 2);
  EXPECT_EQ(kiln_batch_count(0, 4, 0), 0);
  std::vector<int16_t> rows(10 * 2);
  for (int i = 0; i < 20; i++) rows[i] = static_cast<int16_t>(i);
  kiln_host_data src{KILN_I16, 2, {10, 2}, rows.data(), rows.size() * 2};
  const uint32_t key[2] = {0, 9};
  int64_t order[10];
  ASSERT_EQ(kiln_permutation(key, 10, order), KILN_OK);
  std::vector<int> seen;
  for (int64_t b = 0; b < kiln_batch_count(10, 4, 0); b++) {
    kiln_host_data out{};
    ASSERT_EQ(kiln_host_data_batch(&src, order, 4, b, &out), KILN_OK) << kiln_last_error();
    EXPECT_EQ(out.shape[0], b < 2 ? 4 : 2);
    EXPECT_EQ(out.shape[1], 2);
    for (int64_t r = 0; r < out.shape[0]; r++) {
      const int16_t *row = static_cast<int16_t *>(out.data) + 2 * r;
      EXPECT_EQ(row[0], 2 * order[b * 4 + r]);
      EXPECT_EQ(row[1], 2 * order[b * 4 + r] + 1);
      seen.push_back(row[0] / 2);
    }
    kiln_host_data_free(&out);
  }
  EXPECT_EQ(seen.size(), 10u);
  kiln_host_data out{};
  EXPECT_EQ(kiln_host_data_batch(&src, order, 4, 3, &out), KILN_ERR_OUT_OF_RANGE);
  EXPECT_NE(std::string(kiln_last_error()).find("batch 3 of 3"), std::string::npos);
  // In order (NULL), onto a device.
  ASSERT_EQ(kiln_host_data_batch(&src, nullptr, 4, 1, &out), KILN_OK);
  EXPECT_EQ(static_cast<int16_t *>(out.data)[0], 8);
  kiln_ctx *ctx = nullptr;
  kiln_options opts{};
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CPU;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK) << kiln_last_error();
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_host_data_to_array(&out, dev, &a), KILN_OK) << kiln_last_error();
  int16_t back[8];
  ASSERT_EQ(kiln_array_to_host(a, back, sizeof back), KILN_OK);
  EXPECT_EQ(back[0], 8);
  EXPECT_EQ(back[7], 15);
  kiln_array_release(a);
  kiln_ctx_free(ctx);
  kiln_host_data_free(&out);
}

}  // namespace
