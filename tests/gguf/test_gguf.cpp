// GGUF reader and writer: round trips, the golden models, and every kind of malformed file
// refused with a message naming the field and byte offset.
#include <gtest/gtest.h>

#include "test_paths.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "edgellm/gguf.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

// Builds GGUF bytes by hand so a test can corrupt any single field.
struct Bytes {
    std::vector<uint8_t> b;
    template <typename T>
    size_t put(T v) {
        const size_t at = b.size();
        const uint8_t* p = (const uint8_t*)&v;
        b.insert(b.end(), p, p + sizeof(T));
        return at;
    }
    size_t str(const std::string& s) {
        const size_t at = put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return at;
    }
    void pad(size_t align) {
        while (b.size() % align) b.push_back(0);
    }
    template <typename T>
    void patch(size_t at, T v) {
        std::memcpy(b.data() + at, &v, sizeof v);
    }
};

// Offsets of the fields of a small valid file: one u32 kv, one string kv, two f32 tensors.
struct Layout {
    Bytes f;
    size_t version, n_tensors, n_kv, key0_len, key0, value_type0, str_len, t0_ndims, t0_ne0,
        t0_type, t0_offset, t1_offset;
};

Layout small_file() {
    Layout l;
    Bytes& f = l.f;
    f.b.insert(f.b.end(), {'G', 'G', 'U', 'F'});
    l.version = f.put<uint32_t>(3);
    l.n_tensors = f.put<uint64_t>(2);
    l.n_kv = f.put<uint64_t>(2);
    l.key0_len = f.str("general.architecture_id");
    l.key0 = l.key0_len + 8;
    l.value_type0 = f.put<uint32_t>((uint32_t)GgufType::UINT32);
    f.put<uint32_t>(7);
    f.str("general.name");
    f.put<uint32_t>((uint32_t)GgufType::STRING);
    l.str_len = f.str("tiny");
    // tensor a: f32 [8, 2] = 64 bytes at 0; tensor b: f32 [8] = 32 bytes at 64
    f.str("a");
    l.t0_ndims = f.put<uint32_t>(2);
    l.t0_ne0 = f.put<uint64_t>(8);
    f.put<uint64_t>(2);
    l.t0_type = f.put<uint32_t>(0);
    l.t0_offset = f.put<uint64_t>(0);
    f.str("b");
    f.put<uint32_t>(1);
    f.put<uint64_t>(8);
    f.put<uint32_t>(0);
    l.t1_offset = f.put<uint64_t>(64);
    f.pad(32);
    for (int i = 0; i < 24; ++i) f.put<float>((float)i);
    return l;
}

Result<std::unique_ptr<GgufFile>> parse(const Bytes& f) {
    return GgufFile::parse(std::span<const uint8_t>(f.b.data(), f.b.size()), "test.gguf");
}

// The file is refused and the message names `field` and says "offset".
void expect_refused(const Bytes& f, const std::string& field) {
    auto r = parse(f);
    ASSERT_FALSE(r.ok()) << "expected refusal mentioning " << field;
    EXPECT_NE(r.error().find(field), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("offset"), std::string::npos) << r.error();
}

std::string shared_dir() {
    return edgellm::test::shared_dir().string();
}

}  // namespace

TEST(GgufReader, ReadsHandBuiltFile) {
    Layout l = small_file();
    auto r = parse(l.f);
    ASSERT_TRUE(r.ok()) << r.error();
    const GgufFile& g = **r;
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.get_int("general.architecture_id"), 7);
    EXPECT_EQ(g.get_string("general.name"), "tiny");
    ASSERT_EQ(g.tensors().size(), 2u);
    const GgufTensorInfo* b = g.tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->n_bytes, 32u);
    float v;
    std::memcpy(&v, b->data, 4);
    EXPECT_EQ(v, 16.0f);
    EXPECT_EQ(g.tensor_bytes(), 96u);
}

TEST(GgufReader, RefusesBadMagic) {
    Layout l = small_file();
    l.f.b[0] = 'X';
    expect_refused(l.f, "magic");
}

TEST(GgufReader, RefusesBadVersion) {
    Layout l = small_file();
    l.f.patch<uint32_t>(l.version, 1);
    expect_refused(l.f, "version");
    l.f.patch<uint32_t>(l.version, 99);
    expect_refused(l.f, "version");
}

TEST(GgufReader, RefusesAbsurdCounts) {
    Layout l = small_file();
    l.f.patch<uint64_t>(l.n_kv, 1ull << 60);
    expect_refused(l.f, "metadata count");
    l = small_file();
    l.f.patch<uint64_t>(l.n_tensors, ~0ull);
    expect_refused(l.f, "tensor count");
}

TEST(GgufReader, RefusesAbsurdStringLengths) {
    Layout l = small_file();
    l.f.patch<uint64_t>(l.key0_len, 1ull << 62);
    expect_refused(l.f, "metadata entry 0 key length");
    l = small_file();
    l.f.patch<uint64_t>(l.str_len, 5000);  // longer than the rest of the file
    expect_refused(l.f, "value of \"general.name\"");
}

TEST(GgufReader, RefusesInvalidUtf8Key) {
    Layout l = small_file();
    l.f.b[l.key0 + 3] = (uint8_t)0xC0;  // overlong lead byte
    expect_refused(l.f, "UTF-8");
    l = small_file();
    l.f.b[l.key0] = (uint8_t)0xE2;  // truncated 3-byte sequence
    expect_refused(l.f, "UTF-8");
}

TEST(GgufReader, RefusesUnknownValueType) {
    Layout l = small_file();
    l.f.patch<uint32_t>(l.value_type0, 13);
    expect_refused(l.f, "unknown value type 13");
}

TEST(GgufReader, RefusesUnknownTensorType) {
    Layout l = small_file();
    l.f.patch<uint32_t>(l.t0_type, 4);  // a removed ggml type id
    expect_refused(l.f, "unknown tensor type 4");
    l.f.patch<uint32_t>(l.t0_type, 1000);
    expect_refused(l.f, "unknown tensor type 1000");
}

TEST(GgufReader, RefusesBadDimensions) {
    Layout l = small_file();
    l.f.patch<uint32_t>(l.t0_ndims, 5);
    expect_refused(l.f, "n_dims");
    l = small_file();
    l.f.patch<uint64_t>(l.t0_ne0, 1ull << 40);
    l.f.patch<uint64_t>(l.t0_ne0 + 8, 1ull << 40);
    expect_refused(l.f, "overflows");
    l = small_file();
    l.f.patch<uint64_t>(l.t0_ne0, 0);
    expect_refused(l.f, "dimension 0");
    l = small_file();
    l.f.patch<uint32_t>(l.t0_type, 8);  // q8_0 rows must be multiples of 32
    expect_refused(l.f, "block size");
}

TEST(GgufReader, RefusesOffsetsPastEndMisalignedAndOverlapping) {
    Layout l = small_file();
    l.f.patch<uint64_t>(l.t1_offset, 1u << 20);
    expect_refused(l.f, "past the end");
    l = small_file();
    l.f.patch<uint64_t>(l.t1_offset, 48);
    expect_refused(l.f, "not a multiple of the alignment");
    l = small_file();
    l.f.patch<uint64_t>(l.t1_offset, 32);  // inside tensor a's 64 bytes
    expect_refused(l.f, "overlaps");
    l = small_file();
    l.f.b.resize(l.f.b.size() - 4);  // last tensor cut short
    expect_refused(l.f, "past the end");
}

TEST(GgufReader, RefusesEveryTruncation) {
    Layout l = small_file();
    const size_t data_start = l.f.b.size() - 96;
    for (size_t n = 0; n < l.f.b.size(); ++n) {
        Bytes cut;
        cut.b.assign(l.f.b.begin(), l.f.b.begin() + (long)n);
        auto r = parse(cut);
        if (n >= data_start && r.ok()) ADD_FAILURE() << "accepted a file cut at " << n;
        if (n < data_start) {
            ASSERT_FALSE(r.ok()) << "accepted a file cut at " << n;
            EXPECT_NE(r.error().find("offset"), std::string::npos) << r.error();
        } else {
            EXPECT_FALSE(r.ok());
        }
    }
}

TEST(GgufReader, RefusesDuplicateKeysAndDeepArrays) {
    Bytes f;
    f.b.insert(f.b.end(), {'G', 'G', 'U', 'F'});
    f.put<uint32_t>(3);
    f.put<uint64_t>(0);
    f.put<uint64_t>(2);
    f.str("k");
    f.put<uint32_t>((uint32_t)GgufType::UINT8);
    f.put<uint8_t>(1);
    f.str("k");
    f.put<uint32_t>((uint32_t)GgufType::UINT8);
    f.put<uint8_t>(1);
    expect_refused(f, "duplicate key");

    Bytes d;
    d.b.insert(d.b.end(), {'G', 'G', 'U', 'F'});
    d.put<uint32_t>(3);
    d.put<uint64_t>(0);
    d.put<uint64_t>(1);
    d.str("deep");
    d.put<uint32_t>((uint32_t)GgufType::ARRAY);
    for (int i = 0; i < 20; ++i) {
        d.put<uint32_t>((uint32_t)GgufType::ARRAY);
        d.put<uint64_t>(1);
    }
    d.put<uint32_t>((uint32_t)GgufType::UINT8);
    d.put<uint64_t>(0);
    expect_refused(d, "nested deeper");
}

TEST(GgufReader, RefusesHugeArrayCount) {
    Bytes f;
    f.b.insert(f.b.end(), {'G', 'G', 'U', 'F'});
    f.put<uint32_t>(3);
    f.put<uint64_t>(0);
    f.put<uint64_t>(1);
    f.str("tokenizer.ggml.tokens");
    f.put<uint32_t>((uint32_t)GgufType::ARRAY);
    f.put<uint32_t>((uint32_t)GgufType::STRING);
    f.put<uint64_t>(1ull << 50);
    expect_refused(f, "element count");
}

// Random corruption never crashes or hangs; whatever is accepted is self-consistent.
TEST(GgufReader, SurvivesRandomCorruption) {
    const Layout l = small_file();
    std::mt19937 rng(42);
    int refused = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        Bytes f = l.f;
        const int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; ++k) f.b[rng() % f.b.size()] = (uint8_t)rng();
        auto r = parse(f);
        if (!r.ok()) {
            ++refused;
            continue;
        }
        for (const auto& t : (*r)->tensors()) {
            ASSERT_GE(t.data, f.b.data());
            ASSERT_LE(t.data + t.n_bytes, f.b.data() + f.b.size());
        }
    }
    EXPECT_GT(refused, 1000);
}

TEST(GgufWriter, RoundTripsEveryValueType) {
    const fs::path path = fs::temp_directory_path() / "edgellm_test_roundtrip.gguf";
    GgufWriter w;
    w.set("general.alignment", gguf_value((uint32_t)64));
    w.set("u8", {(uint8_t)200});
    w.set("i8", {(int8_t)-100});
    w.set("u16", {(uint16_t)60000});
    w.set("i16", {(int16_t)-30000});
    w.set("u32", gguf_value((uint32_t)4000000000u));
    w.set("i32", gguf_value((int32_t)-7));
    w.set("f32", gguf_value(1.5f));
    w.set("bool", gguf_value(true));
    w.set("str", gguf_value("héllo"));
    w.set("u64", gguf_value((uint64_t)1 << 40));
    w.set("i64", {(int64_t) - (1ll << 40)});
    w.set("f64", {3.25});
    w.set("strings", gguf_value(gguf_string_array({"a", "", "<|im_start|>"})));
    w.set("floats", gguf_value(gguf_float_array({1.0f, -2.0f})));
    GgufArray nested;
    nested.elem_type = GgufType::ARRAY;
    nested.count = 2;
    nested.arrays = {gguf_int32_array({1, 2, 3}), gguf_string_array({"x"})};
    w.set("nested", gguf_value(nested));
    std::vector<float> a(64 * 3), b(32);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (float)i;
    for (size_t i = 0; i < b.size(); ++i) b[i] = -(float)i;
    w.add_tensor("a", TensorType::F32, {64, 3}, a.data());
    w.add_tensor("b", TensorType::F32, {32}, b.data());
    auto ok = w.write(path.string());
    ASSERT_TRUE(ok.ok()) << ok.error();

    auto r = GgufFile::open(path.string());
    ASSERT_TRUE(r.ok()) << r.error();
    const GgufFile& g = **r;
    EXPECT_EQ(g.alignment(), 64u);
    EXPECT_EQ(g.get_int("u8"), 200);
    EXPECT_EQ(g.get_int("i8"), -100);
    EXPECT_EQ(g.get_int("u16"), 60000);
    EXPECT_EQ(g.get_int("i16"), -30000);
    EXPECT_EQ(g.get_int("u32"), 4000000000ll);
    EXPECT_EQ(g.get_int("i32"), -7);
    EXPECT_EQ(g.get_float("f32"), 1.5);
    EXPECT_EQ(g.get_bool("bool"), true);
    EXPECT_EQ(g.get_string("str"), "héllo");
    EXPECT_EQ(g.get_int("u64"), 1ll << 40);
    EXPECT_EQ(g.get_int("i64"), -(1ll << 40));
    EXPECT_EQ(g.get_float("f64"), 3.25);
    const GgufArray* s = g.get_array("strings");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->strings, (std::vector<std::string>{"a", "", "<|im_start|>"}));
    EXPECT_EQ(g.get_array("floats")->float_at(1), -2.0);
    const GgufArray* n = g.get_array("nested");
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->arrays.size(), 2u);
    EXPECT_EQ(n->arrays[0].int_at(2), 3);
    EXPECT_EQ(n->arrays[1].strings[0], "x");
    ASSERT_NE(g.tensor("b"), nullptr);
    EXPECT_EQ((size_t)(g.tensor("b")->data - g.data()) % 64, 0u);
    EXPECT_EQ(std::memcmp(g.tensor("a")->data, a.data(), a.size() * 4), 0);
    EXPECT_EQ(std::memcmp(g.tensor("b")->data, b.data(), b.size() * 4), 0);
    fs::remove(path);
}

TEST(GgufWriter, FailedWriteReportsPathAndLeavesNothing) {
    const fs::path dir = fs::temp_directory_path() / "edgellm_no_such_dir_xyz";
    GgufWriter w;
    w.set("k", gguf_value((uint32_t)1));
    auto r = w.write((dir / "x.gguf").string());
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(fs::exists(dir));
}

TEST(GgufReader, OpensEveryGoldenModel) {
    const fs::path dir = fs::path(shared_dir()) / "reference" / "golden";
    if (!fs::exists(dir)) GTEST_SKIP() << "no reference data at " << dir;
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() != ".gguf") continue;
        auto r = GgufFile::open(e.path().string());
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_TRUE((*r)->get_string("general.architecture").has_value());
        EXPECT_NE((*r)->tensor("token_embd.weight"), nullptr);
        ++n;
    }
    EXPECT_GE(n, 18);
}

TEST(GgufReader, ReportsMissingFile) {
    auto r = GgufFile::open("/nonexistent/model.gguf");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("/nonexistent/model.gguf"), std::string::npos);
}
