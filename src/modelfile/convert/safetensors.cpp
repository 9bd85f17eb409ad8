#include "modelfile/convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace edgellm::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A header above this is not a checkpoint's (real ones are well under a megabyte per
// thousand tensors).
constexpr uint64_t kMaxHeader = 256ull << 20;

bool parse_type(const std::string& s, StType* t) {
    static const std::pair<const char*, StType> names[] = {
        {"F32", StType::F32}, {"F16", StType::F16}, {"BF16", StType::BF16}, {"F64", StType::F64}};
    for (const auto& [n, v] : names)
        if (s == n) {
            *t = v;
            return true;
        }
    return false;
}

std::string shape_string(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

}  // namespace

const char* st_type_name(StType t) {
    switch (t) {
        case StType::F32: return "F32";
        case StType::F16: return "F16";
        case StType::BF16: return "BF16";
        case StType::F64: return "F64";
    }
    return "?";
}

size_t st_type_size(StType t) {
    switch (t) {
        case StType::F32: return 4;
        case StType::F16: return 2;
        case StType::BF16: return 2;
        case StType::F64: return 8;
    }
    return 0;
}

int64_t StTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

void StTensor::release() const {
    if (file) file->release(data, n_bytes);
}

StFile::~StFile() {
    if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

void StFile::release(const uint8_t* p, size_t n) const {
    // Whole pages inside the range only: a page shared with the next tensor stays.
    const auto page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = ((uintptr_t)p + page - 1) / page * page;
    const uintptr_t end = ((uintptr_t)p + n) / page * page;
    if (end > begin) madvise((void*)begin, end - begin, MADV_DONTNEED);
}

Result<std::unique_ptr<StFile>> StFile::open(const std::string& path) {
    using R = Result<std::unique_ptr<StFile>>;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return R::fail(path + ": " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        return R::fail(path + ": " + std::strerror(e));
    }
    std::unique_ptr<StFile> f(new StFile());
    f->path_ = path;
    f->size_ = (size_t)st.st_size;
    if (f->size_ < 8) {
        ::close(fd);
        return R::fail(path + ": " + std::to_string(f->size_) +
                       " bytes: too short for a safetensors file (its header length is 8 bytes at "
                       "offset 0)");
    }
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);
    if (m == MAP_FAILED) return R::fail(path + ": mmap: " + std::strerror(e));
    f->base_ = (const uint8_t*)m;
    madvise(m, f->size_, MADV_SEQUENTIAL);

    uint64_t n_header = 0;
    std::memcpy(&n_header, f->base_, 8);
    if (n_header > kMaxHeader || 8 + n_header > f->size_)
        return R::fail(path + ": the header (" + std::to_string(n_header) +
                       " bytes at offset 8) runs past the end of the file at " +
                       std::to_string(f->size_) + ": truncated, or not a safetensors file");
    json h;
    try {
        h = json::parse(f->base_ + 8, f->base_ + 8 + n_header);
    } catch (const json::exception& ex) {
        return R::fail(path + ": the header at offset 8 is not JSON: " + ex.what());
    }
    if (!h.is_object()) return R::fail(path + ": the header at offset 8 is not a JSON object");
    const size_t data_start = 8 + (size_t)n_header;
    for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const std::string where = path + ": tensor \"" + it.key() + "\": ";
        const json& v = it.value();
        StTensor t;
        t.name = it.key();
        t.file = f.get();
        if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
            !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
            v["data_offsets"].size() != 2)
            return R::fail(where + "needs \"dtype\", \"shape\" and \"data_offsets\" [begin, end]");
        const std::string dtype = v["dtype"].get<std::string>();
        if (!parse_type(dtype, &t.type))
            return R::fail(where + "type " + dtype +
                           " is not one convert reads (F32, F16, BF16, F64; a quantized checkpoint "
                           "must be dequantized first)");
        for (const json& d : v["shape"]) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40))
                return R::fail(where + "shape " + v["shape"].dump() + " is not a list of sizes");
            t.shape.push_back(d.get<int64_t>());
        }
        const json& off = v["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
            off[0].get<uint64_t>() > off[1].get<uint64_t>())
            return R::fail(where + "data_offsets " + off.dump() + " is not [begin, end]");
        const uint64_t b = off[0].get<uint64_t>(), e2 = off[1].get<uint64_t>();
        if (e2 > f->size_ - data_start)
            return R::fail(where + "its data at offsets " + std::to_string(data_start + b) + ".." +
                           std::to_string(data_start + e2) + " runs past the end of the file at " +
                           std::to_string(f->size_) + ": the file is truncated");
        t.offset = data_start + (size_t)b;
        t.n_bytes = (size_t)(e2 - b);
        t.data = f->base_ + t.offset;
        const uint64_t want = (uint64_t)t.n_elements() * st_type_size(t.type);
        if (want != t.n_bytes)
            return R::fail(where + "shape " + shape_string(t.shape) + " of " + dtype + " needs " +
                           std::to_string(want) + " bytes, its data_offsets give " +
                           std::to_string(t.n_bytes));
        f->tensors_.push_back(std::move(t));
    }
    std::sort(f->tensors_.begin(), f->tensors_.end(),
              [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
    return f;
}

const StTensor* Checkpoint::find(const std::string& name) const {
    for (const StTensor* t : order_)
        if (t->name == name) return t;
    return nullptr;
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
    using R = Result<std::unique_ptr<Checkpoint>>;
    auto c = std::make_unique<Checkpoint>();
    const fs::path root(dir);
    const fs::path index = root / "model.safetensors.index.json";
    std::vector<std::string> parts;
    std::map<std::string, std::string> weight_map;  // tensor -> file
    std::error_code ec;
    if (fs::is_regular_file(index, ec)) {
        json j;
        try {
            std::ifstream in(index);
            j = json::parse(in);
        } catch (const json::exception& ex) {
            return R::fail(index.string() + ": not JSON: " + ex.what());
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            return R::fail(index.string() + ": no \"weight_map\" object");
        std::set<std::string> files;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                return R::fail(index.string() + ": weight_map[\"" + it.key() + "\"] is not a file name");
            weight_map[it.key()] = it.value().get<std::string>();
            files.insert(it.value().get<std::string>());
        }
        parts.assign(files.begin(), files.end());
        for (const std::string& p : parts) {
            if (p.find('/') != std::string::npos || p == "..")
                return R::fail(index.string() + ": \"" + p + "\" is not a file of the directory");
            if (!fs::is_regular_file(root / p, ec)) {
                size_t n = 0;
                std::string example;
                for (const auto& [t, file] : weight_map)
                    if (file == p && n++ == 0) example = t;
                return R::fail((root / p).string() + " is missing (model.safetensors.index.json puts " +
                               std::to_string(n) + " tensors there, " + example + " among them)");
            }
        }
    } else {
        for (const auto& e : fs::directory_iterator(root, ec)) {
            const std::string n = e.path().filename().string();
            if (n.starts_with("model") && n.ends_with(".safetensors")) parts.push_back(n);
        }
        if (ec) return R::fail(dir + ": " + ec.message());
        std::sort(parts.begin(), parts.end());
        if (parts.empty())
            return R::fail(dir + ": no model*.safetensors (a pytorch_model.bin checkpoint must be "
                                 "saved as safetensors first)");
    }
    std::map<std::string, const StTensor*> seen;
    for (const std::string& p : parts) {
        auto f = StFile::open((root / p).string());
        if (!f) return R::fail(f.error());
        for (const StTensor& t : (*f)->tensors()) {
            if (seen.count(t.name))
                return R::fail(dir + ": tensor \"" + t.name + "\" is in both " +
                               seen[t.name]->file->path() + " and " + (*f)->path());
            if (!weight_map.empty()) {
                auto it = weight_map.find(t.name);
                if (it == weight_map.end() || it->second != p)
                    return R::fail((*f)->path() + ": tensor \"" + t.name +
                                   "\" is not where model.safetensors.index.json says (" +
                                   (it == weight_map.end() ? std::string("not listed") : it->second) + ")");
            }
            seen[t.name] = &t;
            c->order_.push_back(&t);
        }
        c->files_.push_back(std::move(*f));
    }
    for (const auto& [t, file] : weight_map)
        if (!seen.count(t))
            return R::fail((root / file).string() + ": tensor \"" + t +
                           "\" is missing (model.safetensors.index.json lists it there): an "
                           "incomplete or wrong shard");
    return c;
}

}  // namespace edgellm::convert
