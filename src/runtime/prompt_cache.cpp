#include "edgellm/prompt_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "model/digest.h"

namespace edgellm {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'E', 'D', 'G', 'P', 'C', 0, 0, 1};
// 2: Context::snapshot holds a hybrid's recurrent state after the KV cache (a file of
// version 1 is refused by its version, never read as one).
constexpr uint32_t kVersion = 2;
constexpr const char* kExt = ".kvc";
constexpr size_t kMaxKey = 4096;
constexpr uint64_t kMaxTokens = 1u << 24;

// What precedes the KV bytes: magic, version, key, tokens, the KV byte count.
size_t head_bytes(size_t key, size_t n_tokens) {
    return 8 + 4 + 4 + key + 8 + n_tokens * 4 + 8;
}

size_t file_bytes(size_t key, const KvState& s) {
    return head_bytes(key, s.tokens.size()) + s.kv.size() + 8;
}

struct File {
    std::FILE* f = nullptr;
    explicit File(std::FILE* p) : f(p) {}
    ~File() {
        if (f) std::fclose(f);
    }
};

// A file to read that is a regular file itself: not a symbolic link (never followed,
// wherever it points), nor a FIFO or a device that would block or never end. Null: *why.
std::FILE* open_to_read(const std::string& path, std::string* why) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ELOOP ? "it is a symbolic link (not followed)" : std::strerror(errno);
        return nullptr;
    }
    struct stat st;
    std::FILE* f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? ::fdopen(fd, "rb") : nullptr;
    if (!f) {
        *why = "it is not a regular file";
        ::close(fd);
    }
    return f;
}

bool read_exact(std::FILE* f, void* p, size_t n, Digest* d) {
    if (std::fread(p, 1, n, f) != n) return false;
    if (d) d->add(p, n);
    return true;
}

// The head of an open file (left positioned at the KV bytes); "" or the fault.
std::string read_head(std::FILE* f, size_t size, KvFileHead* h, uint64_t* kv_len, Digest* d) {
    char magic[8];
    uint32_t version = 0, key_len = 0;
    uint64_t n_tokens = 0;
    if (!read_exact(f, magic, 8, d) || std::memcmp(magic, kMagic, 8) != 0)
        return "it is not an edgellm KV cache file";
    if (!read_exact(f, &version, 4, d) || version != kVersion)
        return "it has format version " + std::to_string(version) + " (this build reads " +
               std::to_string(kVersion) + ")";
    if (!read_exact(f, &key_len, 4, d) || key_len > kMaxKey) return "it is damaged (key)";
    h->key.resize(key_len);
    if (!read_exact(f, h->key.data(), key_len, d)) return "it is truncated";
    if (!read_exact(f, &n_tokens, 8, d)) return "it is truncated";
    if (n_tokens > kMaxTokens) return "it is damaged (token count)";
    h->tokens.resize((size_t)n_tokens);
    if (!read_exact(f, h->tokens.data(), (size_t)n_tokens * 4, d)) return "it is truncated";
    if (!read_exact(f, kv_len, 8, d)) return "it is truncated";
    const size_t want = head_bytes(key_len, (size_t)n_tokens) + 8;
    if (*kv_len > size || size != want + *kv_len)
        return size < want + *kv_len ? "it is truncated" : "it is damaged (size)";
    h->file_bytes = size;
    return "";
}

size_t file_size(std::FILE* f) {
    struct stat st;
    return fstat(fileno(f), &st) == 0 ? (size_t)st.st_size : 0;
}

int64_t mtime_of(const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return 0;
    return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return (int64_t)n;
}

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& of) {
    return a.size() <= of.size() && std::equal(a.begin(), a.end(), of.begin());
}

}  // namespace

std::string kv_cache_key(const Context& ctx, std::string_view extra) {
    const ContextParams& p = ctx.params();
    // (quantized K and V are stored turned by a Hadamard matrix: a file of a build that did
    // not turn them must not be restored, hence the mark)
    auto type = [](TensorType t) {
        return std::string(tensor_type_name(t)) + (tensor_type_info(t).quantized ? " hadamard" : "");
    };
    std::string k = "model " + ctx.model().fingerprint() + "; kv " + type(p.type_k) + " / " +
                    type(p.type_v) + "; n_ctx " + std::to_string(p.n_ctx);
    if (ctx.model().hparams().n_swa > 0)
        k += p.swa_full ? "; swa full" : "; swa ring " + std::to_string(p.n_batch);
    if (!extra.empty()) {
        Digest d;
        d.add(extra.data(), extra.size());
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)d.value());
        k += "; template ";
        k += hex;
    }
    return k;
}

Result<size_t> write_kv_file(const std::string& path, const std::string& key, const KvState& s) {
    using R = Result<size_t>;
    if (key.size() > kMaxKey) return R::fail("the cache key is too long");
    // A fresh name of its own (O_EXCL: never a link or another writer's file that was there),
    // renamed over `path` (which replaces a link there, never writes through it).
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    std::FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "wb");
    if (!f) {
        const std::string why = std::strerror(errno);
        if (fd >= 0) {
            ::close(fd);
            std::remove(tmp.c_str());
        }
        return R::fail("cannot write " + path + ": " + why);
    }
    Digest d;
    bool ok = true;
    auto put = [&](const void* p, size_t n) {
        if (!ok) return;
        d.add(p, n);
        ok = std::fwrite(p, 1, n, f) == n;
    };
    const uint32_t version = kVersion, key_len = (uint32_t)key.size();
    const uint64_t n_tokens = s.tokens.size(), kv_len = s.kv.size();
    put(kMagic, 8);
    put(&version, 4);
    put(&key_len, 4);
    put(key.data(), key.size());
    put(&n_tokens, 8);
    put(s.tokens.data(), s.tokens.size() * 4);
    put(&kv_len, 8);
    put(s.kv.data(), s.kv.size());
    const uint64_t digest = d.value();
    ok = ok && std::fwrite(&digest, 8, 1, f) == 1 && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
    const int close_rc = std::fclose(f);
    std::string why = ok && close_rc == 0 ? "" : std::strerror(errno);
    if (why.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) why = std::strerror(errno);
    if (!why.empty()) {
        std::remove(tmp.c_str());
        return R::fail("cannot write " + path + ": " + why);
    }
    // The rename itself reaches the disk with the directory.
    const std::string dir = fs::path(path).parent_path().string();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
    return file_bytes(key.size(), s);
}

Result<KvFileHead> read_kv_head(const std::string& path) {
    using R = Result<KvFileHead>;
    std::string why;
    File f(open_to_read(path, &why));
    if (!f.f) return R::fail("cannot read " + path + ": " + why);
    KvFileHead h;
    uint64_t kv_len = 0;
    const std::string err = read_head(f.f, file_size(f.f), &h, &kv_len, nullptr);
    if (!err.empty()) return R::fail(path + ": " + err);
    return h;
}

Result<KvState> read_kv_file(const std::string& path, const std::string& key) {
    using R = Result<KvState>;
    std::string why;
    File f(open_to_read(path, &why));
    if (!f.f) return R::fail("cannot read " + path + ": " + why);
    KvFileHead h;
    uint64_t kv_len = 0;
    Digest d;
    std::string err = read_head(f.f, file_size(f.f), &h, &kv_len, &d);
    if (!err.empty()) return R::fail(path + ": " + err);
    if (h.key != key)
        return R::fail(path + " was saved under another configuration (" + h.key +
                       "; this server: " + key + ")");
    KvState s;
    s.tokens = std::move(h.tokens);
    s.kv.resize((size_t)kv_len);
    uint64_t digest = 0;
    if (!read_exact(f.f, s.kv.data(), s.kv.size(), &d) || std::fread(&digest, 8, 1, f.f) != 1)
        return R::fail(path + ": it is truncated");
    if (digest != d.value()) return R::fail(path + ": it is damaged (its digest does not match)");
    return s;
}

KvState save_state(const KvSequence& seq) {
    KvState s;
    s.tokens = seq.tokens();
    s.kv = seq.context().snapshot(seq.seq());
    return s;
}

Result<int64_t> restore_state(KvSequence& seq, const KvState& s) {
    return seq.restore(s.tokens, s.kv);
}

// ---- PromptCache ----------------------------------------------------------------------

PromptCache::PromptCache(PromptCacheOptions o) : o_(std::move(o)) {
    if (!o_.dir.empty()) thread_ = std::thread([this] { writer(); });
}

PromptCache::~PromptCache() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::vector<std::string> PromptCache::open() {
    std::vector<std::string> warnings;
    if (o_.dir.empty()) return warnings;
    std::error_code ec;
    fs::create_directories(o_.dir, ec);
    if (ec) {
        warnings.push_back("cannot create the prompt cache directory " + o_.dir + ": " + ec.message());
        return warnings;
    }
    std::vector<Entry> found;
    for (const auto& de : fs::directory_iterator(o_.dir, ec)) {
        const std::string path = de.path().string();
        const std::string name = de.path().filename().string();
        if (de.is_symlink(ec)) {
            // Never followed: what it points to is not the cache's to read or delete.
            warnings.push_back("skipped " + path + ": it is a symbolic link (not followed)");
            continue;
        }
        if (!de.is_regular_file(ec)) continue;
        if (name.find(std::string(kExt) + ".tmp") != std::string::npos) {
            // A write that a power cut or a kill interrupted.
            fs::remove(de.path(), ec);
            warnings.push_back("removed " + path + ", an unfinished write");
            continue;
        }
        if (!name.ends_with(kExt)) continue;
        auto h = read_kv_head(path);
        if (!h) {
            warnings.push_back("skipped " + h.error());
            continue;
        }
        Entry e;
        e.file = name;
        e.file_bytes = h->file_bytes;
        e.mtime = mtime_of(path);
        if (h->key != o_.key) {
            // Another model's or configuration's: it counts against the budget (the
            // oldest files go first whoever wrote them) but is never restored.
            warnings.push_back("skipped " + path + ": saved under another configuration (" +
                               h->key + ")");
            e.tokens.clear();
            e.id = 0;
        } else {
            e.tokens = std::move(h->tokens);
        }
        found.push_back(std::move(e));
    }
    std::sort(found.begin(), found.end(), [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : found) {
        e.used = ++clock_;
        e.id = e.tokens.empty() ? 0 : next_id_++;
        disk_used_ += e.file_bytes;
        entries_.push_back(std::move(e));
    }
    evict_disk_locked();
    return warnings;
}

std::optional<PromptCache::Hit> PromptCache::find(std::span<const int32_t> prompt, int64_t than) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<Hit> best;
    for (const Entry& e : entries_) {
        if (e.id == 0) continue;
        const int64_t c = common_prefix(e.tokens, prompt);
        if (o_.whole_entries && (c < (int64_t)e.tokens.size() || c >= (int64_t)prompt.size())) continue;
        if (c <= than || (best && (c < best->common || (c == best->common && !e.ram)))) continue;
        best = Hit{e.id, c, (int64_t)e.tokens.size(), e.ram != nullptr, e.file};
    }
    return best;
}

std::vector<PromptCache::Hit> PromptCache::newest(size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<const Entry*> es;
    for (const Entry& e : entries_)
        if (e.id != 0) es.push_back(&e);
    std::sort(es.begin(), es.end(), [](const Entry* a, const Entry* b) { return a->used > b->used; });
    std::vector<Hit> out;
    for (size_t i = 0; i < es.size() && i < n; ++i)
        out.push_back({es[i]->id, (int64_t)es[i]->tokens.size(), (int64_t)es[i]->tokens.size(),
                       es[i]->ram != nullptr, es[i]->file});
    return out;
}

Result<int64_t> PromptCache::restore(uint64_t id, KvSequence& seq, std::span<const int32_t> prompt) {
    using R = Result<int64_t>;
    std::shared_ptr<const KvState> state;
    std::string path;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
        if (it == entries_.end()) return R::fail("the cached prompt is gone");
        it->used = ++clock_;
        state = it->ram;
        if (!state)
            for (const Write& w : queue_)
                if (w.id == id) state = w.state;
        if (!state) path = (fs::path(o_.dir) / it->file).string();
    }
    KvState loaded;
    if (!state) {
        auto r = read_kv_file(path, o_.key);
        if (!r) {
            seq.clear();
            std::lock_guard<std::mutex> lock(mu_);
            auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
            if (it != entries_.end()) drop_locked((size_t)(it - entries_.begin()));
            warnings_.push_back("dropped " + r.error());
            return R::fail(r.error());
        }
        loaded = std::move(*r);
        // recently used, across restarts (the file's own time, never a link's target's)
        ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    }
    const KvState& s = state ? *state : loaded;
    auto n = restore_state(seq, s);
    if (!n) return n;
    int64_t kept = *n;
    if (!prompt.empty()) kept = seq.keep_prefix(prompt, (int64_t)prompt.size());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.hits++;
    stats_.restored_tokens += (uint64_t)kept;
    return kept;
}

std::string PromptCache::file_for(const std::vector<int32_t>& tokens) const {
    Digest d;
    d.add(o_.key.data(), o_.key.size());
    d.add(tokens.data(), tokens.size() * sizeof(int32_t));
    char name[32];
    std::snprintf(name, sizeof name, "%016llx%s", (unsigned long long)d.value(), kExt);
    return name;
}

bool PromptCache::store(const KvSequence& seq, bool ram, bool disk) {
    ram = ram && o_.ram_bytes > 0;
    disk = disk && !o_.dir.empty();
    if ((!ram && !disk) || seq.size() < o_.min_tokens) return false;
    const std::vector<int32_t>& tokens = seq.tokens();
    {
        // An entry that already holds these tokens (or more): nothing new to keep.
        std::lock_guard<std::mutex> lock(mu_);
        for (Entry& e : entries_)
            if (e.id != 0 && is_prefix(tokens, e.tokens) && (!disk || !e.file.empty()) &&
                (!ram || e.ram || !e.file.empty())) {
                e.used = ++clock_;
                return false;
            }
    }
    auto state = std::make_shared<KvState>(save_state(seq));
    const size_t bytes = state->bytes();
    std::lock_guard<std::mutex> lock(mu_);
    Entry e;
    e.id = next_id_++;
    e.tokens = state->tokens;
    e.used = ++clock_;
    // Entries this one extends go: it holds all they did. Their tiers carry over.
    std::vector<std::string> replaced;
    for (size_t i = entries_.size(); i-- > 0;) {
        Entry& old = entries_[i];
        if (old.id == 0 || !is_prefix(old.tokens, e.tokens)) continue;
        ram = ram || (old.ram != nullptr && o_.ram_bytes > 0);
        if (!old.file.empty()) {
            disk = disk || !o_.dir.empty();
            replaced.push_back(old.file);
            disk_used_ -= old.file_bytes;
            old.file.clear();  // deleted once the new file is written
        }
        drop_locked(i);
    }
    if (ram && bytes <= o_.ram_bytes) {
        e.ram = state;
        ram_used_ += bytes;
    }
    if (disk && file_bytes(o_.key.size(), *state) <= o_.disk_bytes) {
        e.file = file_for(e.tokens);
        e.file_bytes = file_bytes(o_.key.size(), *state);
        disk_used_ += e.file_bytes;
        queue_.push_back({e.id, e.file, state});
        for (const std::string& f : replaced)
            if (f != e.file) queue_.push_back({0, f, nullptr});  // a deletion, after the write
        cv_.notify_all();
    } else {
        for (const std::string& f : replaced) queue_.push_back({0, f, nullptr});
        cv_.notify_all();
    }
    if (!e.ram && e.file.empty()) return false;
    entries_.push_back(std::move(e));
    stats_.stores++;
    evict_ram_locked();
    evict_disk_locked();
    return true;
}

void PromptCache::drop_locked(size_t i) {
    Entry& e = entries_[i];
    if (e.ram) ram_used_ -= e.ram->bytes();
    if (!e.file.empty()) {
        disk_used_ -= e.file_bytes;
        queue_.push_back({0, e.file, nullptr});
        cv_.notify_all();
    }
    entries_.erase(entries_.begin() + (ptrdiff_t)i);
}

void PromptCache::evict_ram_locked() {
    while (ram_used_ > o_.ram_bytes) {
        Entry* lru = nullptr;
        for (Entry& e : entries_)
            if (e.ram && (!lru || e.used < lru->used)) lru = &e;
        if (!lru) break;
        ram_used_ -= lru->ram->bytes();
        lru->ram.reset();
        if (lru->file.empty()) drop_locked((size_t)(lru - entries_.data()));
    }
}

void PromptCache::evict_disk_locked() {
    while (disk_used_ > o_.disk_bytes) {
        Entry* lru = nullptr;
        for (Entry& e : entries_)
            if (!e.file.empty() && (!lru || e.used < lru->used)) lru = &e;
        if (!lru) break;
        disk_used_ -= lru->file_bytes;
        queue_.push_back({0, lru->file, nullptr});
        lru->file.clear();
        if (!lru->ram) drop_locked((size_t)(lru - entries_.data()));
    }
    cv_.notify_all();
}

void PromptCache::writer() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, with nothing left to write
        Write w = std::move(queue_.front());
        lock.unlock();
        const std::string path = (fs::path(o_.dir) / w.file).string();
        std::string warning;
        bool wrote = false;
        if (w.state) {
            auto r = write_kv_file(path, o_.key, *w.state);
            if (!r) warning = r.error();
            wrote = r.ok();
        } else {
            std::error_code ec;
            fs::remove(path, ec);
        }
        lock.lock();
        // Popped only now: until written, restore() finds the state in the queue.
        queue_.pop_front();
        if (w.state) {
            auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == w.id; });
            if (wrote) {
                stats_.writes++;
                if (it != entries_.end()) it->mtime = mtime_of(path);
            } else {
                stats_.write_errors++;
                warnings_.push_back(warning);
                if (it != entries_.end()) {
                    disk_used_ -= it->file_bytes;
                    it->file.clear();
                    if (!it->ram) entries_.erase(it);
                }
            }
        }
        cv_.notify_all();
    }
}

void PromptCache::flush() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() || thread_.get_id() == std::thread::id(); });
}

PromptCache::Stats PromptCache::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    Stats s = stats_;
    for (const Entry& e : entries_) {
        if (e.id != 0) s.entries++;
        if (e.ram) s.ram_entries++;
        if (!e.file.empty()) s.disk_entries++;
    }
    s.ram_bytes = ram_used_;
    s.disk_bytes = disk_used_;
    return s;
}

std::vector<std::string> PromptCache::take_warnings() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(warnings_, {});
}

}  // namespace edgellm
