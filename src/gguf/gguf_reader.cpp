#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "edgellm/gguf.h"

namespace edgellm {

namespace {

// Limits that no real model comes near, so a corrupt count fails fast instead of
// allocating gigabytes.
constexpr uint64_t kMaxKeyLength = 1 << 16;
constexpr uint64_t kMaxStringLength = 1ull << 30;
constexpr int kMaxArrayDepth = 8;

// Smallest encodings: a kv is key length (8) + a byte of key + type (4) + 1 byte of value;
// a tensor info is name length (8) + n_dims (4) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const uint8_t c = (uint8_t)s[i];
        int len;
        uint32_t cp;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > s.size()) return false;
        for (int k = 1; k < len; ++k) {
            const uint8_t cc = (uint8_t)s[i + k];
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

// Reads little-endian fields with bounds checks; every failure names the field and offset.
class Cursor {
  public:
    Cursor(const uint8_t* p, size_t n, const std::string& name) : p_(p), n_(n), name_(name) {}

    size_t pos() const { return pos_; }
    size_t left() const { return n_ - pos_; }

    [[noreturn]] void fail(const std::string& what, size_t at) const {
        throw Error(name_ + ": " + what + " (at byte offset " + std::to_string(at) + ")");
    }

    void need(size_t bytes, const std::string& field) const {
        if (bytes > left())
            fail("file truncated reading " + field + ": need " + std::to_string(bytes) +
                     " bytes, " + std::to_string(left()) + " left",
                 pos_);
    }

    template <typename T>
    T read(const std::string& field) {
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    const uint8_t* bytes(size_t n, const std::string& field) {
        need(n, field);
        const uint8_t* p = p_ + pos_;
        pos_ += n;
        return p;
    }

    std::string string(const std::string& field, uint64_t max_len) {
        const size_t at = pos_;
        const uint64_t len = read<uint64_t>(field + " length");
        if (len > max_len)
            fail(field + " length " + std::to_string(len) + " exceeds the limit of " +
                     std::to_string(max_len),
                 at);
        if (len > left())
            fail("file truncated reading " + field + ": length " + std::to_string(len) +
                     " but only " + std::to_string(left()) + " bytes left",
                 at);
        const uint8_t* p = bytes((size_t)len, field);
        return std::string((const char*)p, (size_t)len);
    }

  private:
    const uint8_t* p_;
    size_t n_;
    size_t pos_ = 0;
    const std::string& name_;
};

GgufType read_type(Cursor& c, const std::string& field) {
    const size_t at = c.pos();
    const uint32_t t = c.read<uint32_t>(field);
    if (t >= kGgufTypeCount) c.fail("unknown value type " + std::to_string(t) + " in " + field, at);
    return (GgufType)t;
}

GgufScalar read_scalar(Cursor& c, GgufType t, const std::string& field) {
    switch (t) {
        case GgufType::UINT8:
            return c.read<uint8_t>(field);
        case GgufType::INT8:
            return c.read<int8_t>(field);
        case GgufType::UINT16:
            return c.read<uint16_t>(field);
        case GgufType::INT16:
            return c.read<int16_t>(field);
        case GgufType::UINT32:
            return c.read<uint32_t>(field);
        case GgufType::INT32:
            return c.read<int32_t>(field);
        case GgufType::FLOAT32:
            return c.read<float>(field);
        case GgufType::BOOL: {
            const size_t at = c.pos();
            const uint8_t b = c.read<uint8_t>(field);
            if (b > 1) c.fail(field + ": bool value " + std::to_string(b) + " is not 0 or 1", at);
            return b != 0;
        }
        case GgufType::UINT64:
            return c.read<uint64_t>(field);
        case GgufType::INT64:
            return c.read<int64_t>(field);
        case GgufType::FLOAT64:
            return c.read<double>(field);
        default:
            break;
    }
    c.fail("internal: not a scalar type", c.pos());
}

GgufArray read_array(Cursor& c, const std::string& field, int depth) {
    const size_t at = c.pos();
    if (depth > kMaxArrayDepth)
        c.fail(field + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth), at);
    GgufArray a;
    a.elem_type = read_type(c, field + " element type");
    const size_t count_at = c.pos();
    a.count = c.read<uint64_t>(field + " element count");
    // Every element takes at least one byte (8 for a string or array header).
    const size_t min_elem = a.elem_type == GgufType::STRING  ? 8
                            : a.elem_type == GgufType::ARRAY ? 12
                                                             : gguf_type_size(a.elem_type);
    if (a.count > c.left() / min_elem)
        c.fail(field + ": element count " + std::to_string(a.count) + " cannot fit in the " +
                   std::to_string(c.left()) + " bytes left",
               count_at);
    if (a.elem_type == GgufType::STRING) {
        a.strings.reserve((size_t)a.count);
        for (uint64_t i = 0; i < a.count; ++i)
            a.strings.push_back(c.string(field + "[" + std::to_string(i) + "]", kMaxStringLength));
    } else if (a.elem_type == GgufType::ARRAY) {
        a.arrays.reserve((size_t)a.count);
        for (uint64_t i = 0; i < a.count; ++i)
            a.arrays.push_back(read_array(c, field + "[" + std::to_string(i) + "]", depth + 1));
    } else {
        const size_t n = (size_t)a.count * min_elem;
        const uint8_t* p = c.bytes(n, field + " elements");
        a.bytes.assign(p, p + n);
        if (a.elem_type == GgufType::BOOL)
            for (size_t i = 0; i < n; ++i)
                if (p[i] > 1) c.fail(field + ": bool element is not 0 or 1", c.pos() - n + i);
    }
    return a;
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& field) {
    if (t == GgufType::STRING) return {c.string(field, kMaxStringLength)};
    if (t == GgufType::ARRAY) return {std::make_shared<GgufArray>(read_array(c, field, 1))};
    return {read_scalar(c, t, field)};
}

}  // namespace

GgufFile::~GgufFile() {
    if (mapped_ && base_) munmap((void*)base_, size_);
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Result<std::unique_ptr<GgufFile>>::fail(path + ": " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return Result<std::unique_ptr<GgufFile>>::fail(path + ": not a regular file");
    }
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    f->size_ = (size_t)st.st_size;
    if (f->size_ > 0) {
        void* p = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            return Result<std::unique_ptr<GgufFile>>::fail(path + ": mmap: " + std::strerror(e));
        }
        f->base_ = (const uint8_t*)p;
        f->mapped_ = true;
    }
    ::close(fd);
    try {
        f->parse_all();
    } catch (const Error& e) {
        return Result<std::unique_ptr<GgufFile>>::fail(e.what());
    }
    return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(std::span<const uint8_t> bytes,
                                                  const std::string& name) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = name;
    f->base_ = bytes.data();
    f->size_ = bytes.size();
    try {
        f->parse_all();
    } catch (const Error& e) {
        return Result<std::unique_ptr<GgufFile>>::fail(e.what());
    }
    return f;
}

void GgufFile::parse_all() {
    Cursor c(base_, size_, path_);
    if (size_ < 4) c.need(4, "magic");
    const uint32_t magic = c.read<uint32_t>("magic");
    if (std::memcmp(&magic, "GGUF", 4) != 0) {
        char found[5] = {};
        std::memcpy(found, &magic, 4);
        for (char& ch : std::span<char>(found, 4))
            if ((unsigned char)ch < 32 || (unsigned char)ch > 126) ch = '?';
        c.fail(
            std::string("bad magic: expected \"GGUF\", found \"") + found + "\" (not a GGUF file)",
            0);
    }
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3)
        c.fail("unsupported GGUF version " + std::to_string(version_) + " (expected 2 or 3)", 4);
    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    if (n_kv > c.left() / kMinKvBytes)
        c.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the file", 16);
    if (n_tensors > c.left() / kMinTensorInfoBytes)
        c.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the file", 8);

    std::unordered_set<std::string> keys;
    kv_.reserve((size_t)n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        const size_t at = c.pos();
        const std::string field = "metadata entry " + std::to_string(i);
        std::string key = c.string(field + " key", kMaxKeyLength);
        if (key.empty()) c.fail(field + ": empty key", at);
        if (!valid_utf8(key)) c.fail(field + ": key is not valid UTF-8", at + 8);
        if (!keys.insert(key).second) c.fail(field + ": duplicate key \"" + key + "\"", at);
        const GgufType t = read_type(c, "type of \"" + key + "\"");
        kv_.emplace_back(key, read_value(c, t, "value of \"" + key + "\""));
    }

    if (const GgufValue* a = find("general.alignment")) {
        const auto v = a->as_int();
        if (a->type() != GgufType::UINT32 || !v || *v <= 0 || (*v & (*v - 1)) != 0 || *v > 65536)
            throw Error(path_ + ": general.alignment must be a power of two (uint32), found " +
                        a->to_string());
        alignment_ = (size_t)*v;
    }

    std::unordered_set<std::string> names;
    tensors_.reserve((size_t)n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        const size_t at = c.pos();
        const std::string field = "tensor " + std::to_string(i);
        GgufTensorInfo t;
        t.name = c.string(field + " name", kMaxKeyLength);
        if (t.name.empty()) c.fail(field + ": empty name", at);
        if (!valid_utf8(t.name)) c.fail(field + ": name is not valid UTF-8", at + 8);
        if (!names.insert(t.name).second) c.fail(field + ": duplicate name \"" + t.name + "\"", at);
        const std::string tf = "tensor \"" + t.name + "\"";
        const size_t dims_at = c.pos();
        const uint32_t n_dims = c.read<uint32_t>(tf + " n_dims");
        if (n_dims == 0 || n_dims > (uint32_t)kMaxDims)
            c.fail(tf + ": n_dims " + std::to_string(n_dims) + " is not in 1.." +
                       std::to_string(kMaxDims),
                   dims_at);
        t.n_dims = (int)n_dims;
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const size_t ne_at = c.pos();
            const uint64_t ne = c.read<uint64_t>(tf + " ne[" + std::to_string(d) + "]");
            if (ne == 0 || ne > (uint64_t)std::numeric_limits<int64_t>::max())
                c.fail(tf + ": dimension " + std::to_string(d) + " is " + std::to_string(ne),
                       ne_at);
            if ((uint64_t)n_elements > (uint64_t)std::numeric_limits<int64_t>::max() / ne)
                c.fail(tf + ": element count overflows (dimension " + std::to_string(d) + " = " +
                           std::to_string(ne) + ")",
                       ne_at);
            t.ne[d] = (int64_t)ne;
            n_elements *= (int64_t)ne;
        }
        const size_t type_at = c.pos();
        const uint32_t type_id = c.read<uint32_t>(tf + " type");
        const auto info = tensor_type_info(type_id);
        if (!info) c.fail(tf + ": unknown tensor type " + std::to_string(type_id), type_at);
        t.type = (TensorType)type_id;
        if (t.ne[0] % info->block_size != 0)
            c.fail(tf + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                       info->name + " block size " + std::to_string(info->block_size),
                   dims_at);
        const uint64_t rows = (uint64_t)(n_elements / t.ne[0]);
        const uint64_t row_bytes = (uint64_t)(t.ne[0] / info->block_size) * info->type_size;
        if (row_bytes != 0 && rows > std::numeric_limits<uint64_t>::max() / row_bytes)
            c.fail(tf + ": byte size overflows", dims_at);
        t.n_bytes = (size_t)(rows * row_bytes);
        const size_t off_at = c.pos();
        t.offset = c.read<uint64_t>(tf + " offset");
        if (t.offset % alignment_ != 0)
            c.fail(tf + ": data offset " + std::to_string(t.offset) + " is not a multiple of the " +
                       "alignment " + std::to_string(alignment_),
                   off_at);
        tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment.
    const size_t header_end = c.pos();
    data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
    if (!tensors_.empty() && data_offset_ > size_)
        c.fail("file truncated: data section would start at " + std::to_string(data_offset_) +
                   " but the file has " + std::to_string(size_) + " bytes",
               header_end);
    const uint64_t data_size = size_ > data_offset_ ? size_ - data_offset_ : 0;

    // Bounds and overlaps: sort by offset and check each tensor ends before the next.
    std::vector<size_t> order(tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t k = 0; k < order.size(); ++k) {
        GgufTensorInfo& t = tensors_[order[k]];
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            throw Error(path_ + ": tensor \"" + t.name + "\" data [" +
                        std::to_string(data_offset_ + t.offset) + ", " +
                        std::to_string(data_offset_ + t.offset + t.n_bytes) +
                        ") runs past the end of the file (" + std::to_string(size_) +
                        " bytes) (at byte offset " + std::to_string(data_offset_ + t.offset) + ")");
        if (k + 1 < order.size()) {
            const GgufTensorInfo& next = tensors_[order[k + 1]];
            if (t.offset + t.n_bytes > next.offset)
                throw Error(path_ + ": tensor \"" + t.name + "\" (" + std::to_string(t.n_bytes) +
                            " bytes) overlaps tensor \"" + next.name + "\" (at byte offset " +
                            std::to_string(data_offset_ + next.offset) + ")");
        }
        t.data = base_ + data_offset_ + t.offset;
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    for (const auto& [k, v] : kv_)
        if (k == key) return &v;
    return nullptr;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? v->as_int() : std::nullopt;
}
std::optional<double> GgufFile::get_float(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? v->as_float() : std::nullopt;
}
std::optional<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || !v->as_string()) return std::nullopt;
    return *v->as_string();
}
std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || v->type() != GgufType::BOOL) return std::nullopt;
    return std::get<bool>(v->v);
}
const GgufArray* GgufFile::get_array(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? v->as_array() : nullptr;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
    for (const auto& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

size_t GgufFile::tensor_bytes() const {
    size_t n = 0;
    for (const auto& t : tensors_) n += t.n_bytes;
    return n;
}

}  // namespace edgellm
