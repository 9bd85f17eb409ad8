#include "model/repack_cache.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>

#include "model/digest.h"

namespace edgellm {

namespace {

constexpr char kMagic[8] = {'E', 'D', 'G', 'E', 'X', '1', '6', 'C'};
// The file's format, and the x16 layouts it holds (kernels/x16.h): a change to either
// makes older files not match, and they are written again.
constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
constexpr size_t kSampleStride = 64 << 10, kSampleBytes = 64;

struct Header {
    char magic[8];
    uint32_t version;
    uint32_t n_entries;
    char fingerprint[32];
    uint64_t model_size;
    int64_t model_mtime_ns;
    uint64_t data_offset;
    uint64_t data_bytes;
    uint64_t data_digest;
};
struct EntryRecord {
    uint32_t type;
    uint32_t reserved;
    int64_t ne0, ne1;
    uint64_t offset, bytes;
};

size_t header_bytes(size_t n_entries) {
    return sizeof(Header) + n_entries * sizeof(EntryRecord) + sizeof(uint64_t);
}
size_t data_offset_for(size_t n_entries) {
    return (header_bytes(n_entries) + kPage - 1) / kPage * kPage;
}
uint64_t data_bytes_for(const std::vector<RepackEntry>& entries) {
    uint64_t end = 0;
    for (const RepackEntry& e : entries) end = std::max<uint64_t>(end, e.offset + e.bytes);
    return end;
}

uint64_t sample_digest(const uint8_t* data, size_t bytes) {
    Digest d;
    d.add(&bytes, sizeof bytes);
    for (size_t off = 0; off < bytes; off += kSampleStride)
        d.add(data + off, std::min(kSampleBytes, bytes - off));
    return d.value();
}

// The header's bytes for these entries (the digest of the rest at the end).
std::vector<uint8_t> make_header(const RepackKey& key, const std::vector<RepackEntry>& entries,
                                 uint64_t data_digest) {
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kVersion;
    h.n_entries = (uint32_t)entries.size();
    std::strncpy(h.fingerprint, key.fingerprint.c_str(), sizeof h.fingerprint - 1);
    h.model_size = key.model_size;
    h.model_mtime_ns = key.model_mtime_ns;
    h.data_offset = data_offset_for(entries.size());
    h.data_bytes = data_bytes_for(entries);
    h.data_digest = data_digest;
    std::vector<uint8_t> out(header_bytes(entries.size()));
    std::memcpy(out.data(), &h, sizeof h);
    size_t at = sizeof h;
    for (const RepackEntry& e : entries) {
        const EntryRecord r{(uint32_t)e.type, 0, e.ne0, e.ne1, e.offset, e.bytes};
        std::memcpy(out.data() + at, &r, sizeof r);
        at += sizeof r;
    }
    Digest d;
    d.add(out.data(), at);
    const uint64_t v = d.value();
    std::memcpy(out.data() + at, &v, sizeof v);
    return out;
}

std::string errno_text() {
    return std::strerror(errno);
}

bool write_all(int fd, const uint8_t* p, size_t n, off_t at) {
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, p, n, at);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = ENOSPC;  // (no progress: say so, not a stale errno)
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return true;
}

}  // namespace

Result<RepackMapping> open_repack_cache(const std::string& path, const RepackKey& key,
                                        const std::vector<RepackEntry>& entries) {
    using R = Result<RepackMapping>;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return R::fail(errno == ENOENT ? "no such file" : errno_text());
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return R::fail(errno_text());
    // The header this model's entries give, with the stored data digest spliced in: equal
    // bytes then mean the same model, layouts and format.
    const std::vector<uint8_t> want = make_header(key, entries, 0);
    std::vector<uint8_t> have(want.size());
    const ssize_t got = ::pread(fd, have.data(), have.size(), 0);
    if (got < (ssize_t)sizeof kMagic || std::memcmp(have.data(), kMagic, sizeof kMagic) != 0)
        return R::fail("not a repack cache file");
    if (got != (ssize_t)have.size()) return R::fail("shorter than its header");
    Header h{};
    std::memcpy(&h, have.data(), sizeof h);
    if (h.version != kVersion)
        return R::fail("written by another edgellm (format " + std::to_string(h.version) + ")");
    if (std::strncmp(h.fingerprint, key.fingerprint.c_str(), sizeof h.fingerprint) != 0 ||
        h.model_size != key.model_size || h.model_mtime_ns != key.model_mtime_ns)
        return R::fail("made from another model file (or one changed since)");
    if (h.n_entries != entries.size())
        return R::fail("made for other kernels (the repacked matrices differ)");
    Digest d;
    d.add(have.data(), have.size() - sizeof(uint64_t));
    uint64_t stored = 0;
    std::memcpy(&stored, have.data() + have.size() - sizeof stored, sizeof stored);
    if (d.value() != stored) return R::fail("damaged header (digest mismatch)");
    const std::vector<uint8_t> expect = make_header(key, entries, h.data_digest);
    if (expect != have) return R::fail("made for other kernels (the repacked matrices differ)");
    const size_t size = (size_t)(h.data_offset + h.data_bytes);
    if ((size_t)st.st_size < size)
        return R::fail("truncated (" + std::to_string(st.st_size) + " of " + std::to_string(size) +
                       " bytes)");
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return R::fail("mmap: " + errno_text());
    RepackMapping m{(uint8_t*)map, size, (uint8_t*)map + h.data_offset, (size_t)h.data_bytes};
    if (sample_digest(m.data, m.bytes) != h.data_digest) {
        ::munmap(map, size);
        return R::fail("damaged data (digest mismatch)");
    }
    // Used now: the directory's pruning keeps the most recently used files.
    (void)::futimens(fd, nullptr);
    return m;
}

std::string write_repack_cache(const std::string& path, const RepackKey& key,
                               const std::vector<RepackEntry>& entries, const uint8_t* data,
                               const std::atomic<bool>* stop) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = fs::path(path).parent_path();
    if (!dir.empty()) fs::create_directories(dir, ec);
    if (ec) return "cannot create " + dir.string() + ": " + ec.message();
    // A name of its own (O_EXCL): two writers of one cache never share a temporary file.
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) return "cannot create " + tmp + ": " + errno_text();
    (void)::fchmod(fd, 0644);
    const size_t offset = data_offset_for(entries.size());
    const size_t bytes = data_bytes_for(entries);
    const std::vector<uint8_t> header = make_header(key, entries, sample_digest(data, bytes));
    std::string why;
    if (const int e = ::posix_fallocate(fd, 0, (off_t)(offset + bytes)); e != 0)
        why = "cannot reserve " + std::to_string((offset + bytes) >> 20) + " MiB in " + tmp + ": " +
              std::strerror(e);
    constexpr size_t kChunk = 4 << 20;
    for (size_t at = 0; why.empty() && at < bytes; at += kChunk) {
        if (stop && stop->load(std::memory_order_relaxed)) why = "stopped";
        else if (!write_all(fd, data + at, std::min(kChunk, bytes - at), (off_t)(offset + at)))
            why = "cannot write " + tmp + ": " + errno_text();
    }
    // the header last: a file cut short by a crash has none, or damage the digests find
    if (why.empty() && !write_all(fd, header.data(), header.size(), 0))
        why = "cannot write " + tmp + ": " + errno_text();
    if (why.empty() && stop && stop->load(std::memory_order_relaxed)) why = "stopped";
    if (why.empty() && ::fdatasync(fd) != 0) why = "cannot sync " + tmp + ": " + errno_text();
    ::close(fd);
    if (why.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
        why = "cannot rename " + tmp + ": " + errno_text();
    if (!why.empty()) ::unlink(tmp.c_str());
    if (why.empty()) prune_repack_cache_dir(dir.empty() ? "." : dir.string(), path);
    return why;
}

std::vector<std::string> prune_repack_cache_dir(const std::string& dir, const std::string& keep,
                                                uint64_t max_bytes) {
    namespace fs = std::filesystem;
    std::vector<std::string> removed;
    struct File {
        fs::path path;
        fs::file_time_type when;
        uint64_t bytes;
    };
    std::vector<File> caches;
    const auto now = fs::file_time_type::clock::now();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        std::error_code e2;
        if (!e.is_regular_file(e2)) continue;
        const std::string name = e.path().filename().string();
        const auto when = fs::last_write_time(e.path(), e2);
        if (e2) continue;
        if (name.find(".x16.tmp.") != std::string::npos) {
            // a temporary file of any model's writer, older than any write takes: left by a
            // writer that was killed (a live one's is younger)
            if (now - when > std::chrono::minutes(30) && fs::remove(e.path(), e2))
                removed.push_back(e.path().string());
        } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".x16") == 0) {
            const uint64_t bytes = e.file_size(e2);
            if (!e2) caches.push_back({e.path(), when, bytes});
        }
    }
    // Newest first; the one just written or mapped always stays.
    std::sort(caches.begin(), caches.end(),
              [](const File& a, const File& b) { return a.when > b.when; });
    uint64_t total = 0;
    std::error_code e3;
    const fs::path kept = keep.empty() ? fs::path() : fs::weakly_canonical(keep, e3);
    for (const File& f : caches) {
        std::error_code e2;
        const bool is_kept = !keep.empty() && fs::weakly_canonical(f.path, e2) == kept;
        if (is_kept || total + f.bytes <= max_bytes) {
            total += f.bytes;
            continue;
        }
        if (fs::remove(f.path, e2)) removed.push_back(f.path.string());
    }
    return removed;
}

}  // namespace edgellm
