// GGUF v2/v3 files: a memory-mapped, zero-copy reader that validates everything it reads,
// and a writer that lays out and aligns tensors and writes atomically.
//
// File layout (all little-endian):
//   "GGUF" u32 version  u64 n_tensors  u64 n_kv
//   n_kv x      { string key, u32 value_type, value }
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
//   padding to `general.alignment` (default 32)
//   tensor data; each tensor at data_start + offset, offset a multiple of the alignment
// string = u64 length + bytes (no terminator); array = u32 elem_type, u64 count, elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};
inline constexpr uint32_t kGgufTypeCount = 13;
const char* gguf_type_name(GgufType t);
// Bytes of one scalar value of type t; 0 for STRING and ARRAY (variable length).
size_t gguf_type_size(GgufType t);

struct GgufArray;

// A metadata value. The variant index equals the GgufType id.
using GgufScalar = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                                std::string, std::shared_ptr<GgufArray>, uint64_t, int64_t, double>;

struct GgufValue {
    GgufScalar v;

    GgufType type() const { return (GgufType)v.index(); }
    bool is_integer() const;
    bool is_number() const;
    std::optional<int64_t> as_int() const;   // any integer type (and bool); nullopt otherwise
    std::optional<double> as_float() const;  // any number
    const std::string* as_string() const;
    const GgufArray* as_array() const;
    std::string to_string(size_t max_items = 8) const;  // for `inspect`
};

// An array: elements of one type. Numbers are kept as their little-endian bytes.
struct GgufArray {
    GgufType elem_type = GgufType::UINT8;
    uint64_t count = 0;
    std::vector<uint8_t> bytes;        // numeric / bool elements
    std::vector<std::string> strings;  // STRING elements
    std::vector<GgufArray> arrays;     // ARRAY elements (nested)

    std::optional<int64_t> int_at(size_t i) const;
    std::optional<double> float_at(size_t i) const;
};

GgufValue gguf_value(uint32_t v);
GgufValue gguf_value(int32_t v);
GgufValue gguf_value(uint64_t v);
GgufValue gguf_value(float v);
GgufValue gguf_value(bool v);
GgufValue gguf_value(std::string v);
GgufValue gguf_value(const char* v);
GgufValue gguf_value(GgufArray a);
GgufArray gguf_string_array(std::vector<std::string> v);
GgufArray gguf_float_array(const std::vector<float>& v);
GgufArray gguf_int32_array(const std::vector<int32_t>& v);
GgufArray gguf_bool_array(const std::vector<bool>& v);

inline constexpr int kMaxDims = 4;

struct GgufTensorInfo {
    std::string name;
    TensorType type = TensorType::F32;
    int n_dims = 0;
    int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is the row length (contiguous)
    uint64_t offset = 0;                  // from the start of the data section
    size_t n_bytes = 0;
    const uint8_t* data = nullptr;  // into the mapping

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    std::string shape_string() const;  // "[896, 151936]"
};

class GgufFile {
  public:
    // Map and validate a file. Every problem is an error naming the field and byte offset.
    static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
    // Validate a buffer the caller keeps alive (fuzzing, tests).
    static Result<std::unique_ptr<GgufFile>> parse(std::span<const uint8_t> bytes,
                                                   const std::string& name = "<memory>");
    ~GgufFile();
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    size_t data_offset() const { return data_offset_; }
    size_t file_size() const { return size_; }
    const uint8_t* data() const { return base_; }

    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    const GgufArray* get_array(std::string_view key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* tensor(std::string_view name) const;
    size_t tensor_bytes() const;  // sum of all tensors' bytes

  private:
    GgufFile() = default;
    void parse_all();

    std::string path_;
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    size_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<GgufTensorInfo> tensors_;
};

// Builds a GGUF file. Tensor data is borrowed until write() returns.
class GgufWriter {
  public:
    void set(const std::string& key, GgufValue value);  // replaces an existing key in place
    void remove(const std::string& key);
    // ne[0] is the row length; data must hold row_size(type, ne[0]) * rows bytes.
    void add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                    const void* data);
    // A tensor whose bytes are produced while writing: fill(dst) writes all of them into a
    // buffer of the tensor's size. Tensors are filled one at a time, in order, so a large
    // model is written with one tensor in memory. fill returns false (with a message in
    // *err) to abort the write.
    using FillFn = std::function<bool(uint8_t* dst, std::string* err)>;
    void add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne, FillFn fill);
    // Copy every metadata entry of `f` (tensors are added separately).
    void copy_metadata(const GgufFile& f);

    // Write to `path` through a temporary file in the same directory and a rename, so a
    // reader never sees half a file and an existing file survives a failed write.
    Result<std::monostate> write(const std::string& path) const;
    // The metadata alone as a GGUF file without tensors (GgufFile::parse reads it back).
    std::vector<uint8_t> metadata_bytes() const;
    // What write() puts before the tensors' data (metadata, tensor index, padding), and the
    // data's size: a reader's view of the file before it is written.
    std::vector<uint8_t> header_bytes() const;
    size_t data_bytes() const;

  private:
    size_t alignment() const;
    template <typename S>
    void write_head(S& s) const;
    struct Tensor {
        std::string name;
        TensorType type;
        std::vector<int64_t> ne;
        const void* data;
        size_t n_bytes;
        FillFn fill;
    };
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace edgellm
