// GgufValue helpers and the GGUF writer.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "edgellm/gguf.h"

namespace edgellm {

const char* gguf_type_name(GgufType t) {
    static const char* names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return (uint32_t)t < kGgufTypeCount ? names[(uint32_t)t] : "unknown";
}

size_t gguf_type_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::BOOL:
            return 1;
        case GgufType::UINT16:
        case GgufType::INT16:
            return 2;
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::FLOAT32:
            return 4;
        case GgufType::UINT64:
        case GgufType::INT64:
        case GgufType::FLOAT64:
            return 8;
        default:
            return 0;
    }
}

bool GgufValue::is_integer() const {
    switch (type()) {
        case GgufType::UINT8:
        case GgufType::INT8:
        case GgufType::UINT16:
        case GgufType::INT16:
        case GgufType::UINT32:
        case GgufType::INT32:
        case GgufType::UINT64:
        case GgufType::INT64:
            return true;
        default:
            return false;
    }
}

bool GgufValue::is_number() const {
    return is_integer() || type() == GgufType::FLOAT32 || type() == GgufType::FLOAT64;
}

std::optional<int64_t> GgufValue::as_int() const {
    switch (type()) {
        case GgufType::UINT8:
            return std::get<uint8_t>(v);
        case GgufType::INT8:
            return std::get<int8_t>(v);
        case GgufType::UINT16:
            return std::get<uint16_t>(v);
        case GgufType::INT16:
            return std::get<int16_t>(v);
        case GgufType::UINT32:
            return std::get<uint32_t>(v);
        case GgufType::INT32:
            return std::get<int32_t>(v);
        case GgufType::BOOL:
            return std::get<bool>(v) ? 1 : 0;
        case GgufType::UINT64: {
            const uint64_t u = std::get<uint64_t>(v);
            if (u > (uint64_t)INT64_MAX) return std::nullopt;
            return (int64_t)u;
        }
        case GgufType::INT64:
            return std::get<int64_t>(v);
        default:
            return std::nullopt;
    }
}

std::optional<double> GgufValue::as_float() const {
    if (type() == GgufType::FLOAT32) return std::get<float>(v);
    if (type() == GgufType::FLOAT64) return std::get<double>(v);
    if (is_integer()) {
        if (type() == GgufType::UINT64) return (double)std::get<uint64_t>(v);
        return (double)*as_int();
    }
    return std::nullopt;
}

const std::string* GgufValue::as_string() const {
    return std::get_if<std::string>(&v);
}

const GgufArray* GgufValue::as_array() const {
    const auto* p = std::get_if<std::shared_ptr<GgufArray>>(&v);
    return p ? p->get() : nullptr;
}

namespace {

std::string quote(const std::string& s, size_t max_len = 60) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size() && i < max_len; ++i) {
        const char c = s[i];
        if (c == '\n')
            out += "\\n";
        else if (c == '"')
            out += "\\\"";
        else if ((unsigned char)c < 32)
            out += '?';
        else
            out += c;
    }
    if (s.size() > max_len) out += "...";
    return out + "\"";
}

template <typename T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

}  // namespace

std::optional<int64_t> GgufArray::int_at(size_t i) const {
    if (i >= count || bytes.empty()) return std::nullopt;
    const uint8_t* p = bytes.data() + i * gguf_type_size(elem_type);
    switch (elem_type) {
        case GgufType::UINT8:
            return load<uint8_t>(p);
        case GgufType::INT8:
            return load<int8_t>(p);
        case GgufType::UINT16:
            return load<uint16_t>(p);
        case GgufType::INT16:
            return load<int16_t>(p);
        case GgufType::UINT32:
            return load<uint32_t>(p);
        case GgufType::INT32:
            return load<int32_t>(p);
        case GgufType::BOOL:
            return load<uint8_t>(p);
        case GgufType::UINT64:
            return (int64_t)load<uint64_t>(p);
        case GgufType::INT64:
            return load<int64_t>(p);
        default:
            return std::nullopt;
    }
}

std::optional<double> GgufArray::float_at(size_t i) const {
    if (i >= count || bytes.empty()) return std::nullopt;
    const uint8_t* p = bytes.data() + i * gguf_type_size(elem_type);
    if (elem_type == GgufType::FLOAT32) return load<float>(p);
    if (elem_type == GgufType::FLOAT64) return load<double>(p);
    const auto v = int_at(i);
    return v ? std::optional<double>((double)*v) : std::nullopt;
}

std::string GgufValue::to_string(size_t max_items) const {
    if (const std::string* s = as_string()) return quote(*s);
    if (const GgufArray* a = as_array()) {
        std::string out = std::string("[") + gguf_type_name(a->elem_type) + " x " +
                          std::to_string(a->count) + ":";
        for (size_t i = 0; i < a->count && i < max_items; ++i) {
            out += i ? ", " : " ";
            if (a->elem_type == GgufType::STRING)
                out += quote(a->strings[i], 24);
            else if (a->elem_type == GgufType::ARRAY)
                out += "[...]";
            else if (a->elem_type == GgufType::FLOAT32 || a->elem_type == GgufType::FLOAT64) {
                char buf[32];
                std::snprintf(buf, sizeof buf, "%g", *a->float_at(i));
                out += buf;
            } else
                out += std::to_string(*a->int_at(i));
        }
        if (a->count > max_items) out += ", ...";
        return out + "]";
    }
    if (type() == GgufType::BOOL) return std::get<bool>(v) ? "true" : "false";
    if (type() == GgufType::FLOAT32 || type() == GgufType::FLOAT64) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", *as_float());
        return buf;
    }
    if (type() == GgufType::UINT64) return std::to_string(std::get<uint64_t>(v));
    return std::to_string(*as_int());
}

std::string GgufTensorInfo::shape_string() const {
    std::string s = "[";
    for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
    return s + "]";
}

GgufValue gguf_value(uint32_t v) {
    return {v};
}
GgufValue gguf_value(int32_t v) {
    return {v};
}
GgufValue gguf_value(uint64_t v) {
    return {v};
}
GgufValue gguf_value(float v) {
    return {v};
}
GgufValue gguf_value(bool v) {
    return {v};
}
GgufValue gguf_value(std::string v) {
    return {std::move(v)};
}
GgufValue gguf_value(const char* v) {
    return {std::string(v)};
}
GgufValue gguf_value(GgufArray a) {
    return {std::make_shared<GgufArray>(std::move(a))};
}

GgufArray gguf_string_array(std::vector<std::string> v) {
    GgufArray a;
    a.elem_type = GgufType::STRING;
    a.count = v.size();
    a.strings = std::move(v);
    return a;
}

GgufArray gguf_float_array(const std::vector<float>& v) {
    GgufArray a;
    a.elem_type = GgufType::FLOAT32;
    a.count = v.size();
    a.bytes.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
}

GgufArray gguf_bool_array(const std::vector<bool>& v) {
    GgufArray a;
    a.elem_type = GgufType::BOOL;
    a.count = v.size();
    for (bool b : v) a.bytes.push_back(b ? 1 : 0);
    return a;
}

GgufArray gguf_int32_array(const std::vector<int32_t>& v) {
    GgufArray a;
    a.elem_type = GgufType::INT32;
    a.count = v.size();
    a.bytes.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
}

// ---------------------------------------------------------------------------------------
// Writer

void GgufWriter::set(const std::string& key, GgufValue value) {
    for (auto& [k, v] : kv_)
        if (k == key) {
            v = std::move(value);
            return;
        }
    kv_.emplace_back(key, std::move(value));
}

void GgufWriter::remove(const std::string& key) {
    std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; });
}

namespace {

size_t tensor_bytes(TensorType type, const std::vector<int64_t>& ne) {
    EDGELLM_ASSERT(!ne.empty() && ne.size() <= (size_t)kMaxDims, "tensor needs 1..4 dimensions");
    int64_t rows = 1;
    for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
    return row_size(type, ne[0]) * (size_t)rows;
}

}  // namespace

void GgufWriter::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                            const void* data) {
    const size_t n_bytes = tensor_bytes(type, ne);
    tensors_.push_back({name, type, std::move(ne), data, n_bytes, nullptr});
}

void GgufWriter::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                            FillFn fill) {
    const size_t n_bytes = tensor_bytes(type, ne);
    tensors_.push_back({name, type, std::move(ne), nullptr, n_bytes, std::move(fill)});
}

void GgufWriter::copy_metadata(const GgufFile& f) {
    for (const auto& [k, v] : f.metadata()) set(k, v);
}

namespace {

class Sink {
  public:
    explicit Sink(FILE* f) : f_(f) {}
    explicit Sink(std::vector<uint8_t>* out) : out_(out) {}
    void raw(const void* p, size_t n) {
        if (out_ && n)
            out_->insert(out_->end(), (const uint8_t*)p, (const uint8_t*)p + n);
        else if (ok_ && n && std::fwrite(p, 1, n, f_) != n)
            ok_ = false;
        pos_ += n;
    }
    template <typename T>
    void put(T v) {
        raw(&v, sizeof v);
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        raw(s.data(), s.size());
    }
    void pad_to(size_t align) {
        static const uint8_t zeros[64] = {};
        while (pos_ % align) raw(zeros, std::min(sizeof zeros, align - pos_ % align));
    }
    void array(const GgufArray& a) {
        put<uint32_t>((uint32_t)a.elem_type);
        put<uint64_t>(a.count);
        if (a.elem_type == GgufType::STRING)
            for (const auto& s : a.strings) str(s);
        else if (a.elem_type == GgufType::ARRAY)
            for (const auto& sub : a.arrays) array(sub);
        else
            raw(a.bytes.data(), a.bytes.size());
    }
    void value(const GgufValue& v) {
        put<uint32_t>((uint32_t)v.type());
        std::visit(
            [&](const auto& x) {
                using X = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<X, std::string>)
                    str(x);
                else if constexpr (std::is_same_v<X, std::shared_ptr<GgufArray>>)
                    array(*x);
                else if constexpr (std::is_same_v<X, bool>)
                    put<uint8_t>(x ? 1 : 0);
                else
                    put<X>(x);
            },
            v.v);
    }
    bool ok() const { return ok_; }

  private:
    FILE* f_ = nullptr;
    std::vector<uint8_t>* out_ = nullptr;
    size_t pos_ = 0;
    bool ok_ = true;
};

}  // namespace

size_t GgufWriter::alignment() const {
    for (const auto& [k, v] : kv_)
        if (k == "general.alignment" && v.as_int() && *v.as_int() > 0) return (size_t)*v.as_int();
    return 32;
}

template <typename S>
void GgufWriter::write_head(S& s) const {
    const size_t align = alignment();
    s.raw("GGUF", 4);
    s.template put<uint32_t>(3);
    s.template put<uint64_t>(tensors_.size());
    s.template put<uint64_t>(kv_.size());
    for (const auto& [k, v] : kv_) {
        s.str(k);
        s.value(v);
    }
    size_t offset = 0;
    for (const auto& t : tensors_) {
        s.str(t.name);
        s.template put<uint32_t>((uint32_t)t.ne.size());
        for (int64_t n : t.ne) s.template put<uint64_t>((uint64_t)n);
        s.template put<uint32_t>((uint32_t)t.type);
        s.template put<uint64_t>(offset);
        offset += (t.n_bytes + align - 1) / align * align;
    }
    s.pad_to(align);
}

std::vector<uint8_t> GgufWriter::metadata_bytes() const {
    std::vector<uint8_t> out;
    Sink s(&out);
    GgufWriter meta;
    meta.kv_ = kv_;
    meta.write_head(s);
    return out;
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
    std::vector<uint8_t> out;
    Sink s(&out);
    write_head(s);
    return out;
}

size_t GgufWriter::data_bytes() const {
    const size_t align = alignment();
    size_t n = 0;
    for (const auto& t : tensors_) n += (t.n_bytes + align - 1) / align * align;
    return n;
}

Result<std::monostate> GgufWriter::write(const std::string& path) const {
    using R = Result<std::monostate>;
    const size_t alignment = this->alignment();
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return R::fail(tmp + ": " + std::strerror(errno));
    Sink s(f);
    write_head(s);
    std::vector<uint8_t> buf;
    std::string fill_err;
    for (const auto& t : tensors_) {
        if (t.fill) {
            buf.resize(t.n_bytes);
            if (!t.fill(buf.data(), &fill_err)) {
                std::fclose(f);
                std::remove(tmp.c_str());
                return R::fail(path + ": tensor \"" + t.name + "\": " + fill_err);
            }
            s.raw(buf.data(), t.n_bytes);
        } else {
            s.raw(t.data, t.n_bytes);
        }
        s.pad_to(alignment);
    }
    bool ok = s.ok() && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
        const int e = errno;
        std::remove(tmp.c_str());
        return R::fail(path + ": write failed: " + std::strerror(e));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        std::remove(tmp.c_str());
        return R::fail(path + ": rename failed: " + std::strerror(e));
    }
    return std::monostate{};
}

}  // namespace edgellm
