// Saved prefixes of a sequence's KV cache, so a prompt that starts like an earlier one
// (a system prompt, tool schemas, a conversation's early turns) is not evaluated again:
// kept in RAM (bounded) and in a directory that survives restarts (bounded), least
// recently used first out. Slot save and restore use the same file format.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/session.h"

namespace edgellm {

// What a sequence held: its tokens and their K/V (Context::snapshot bytes).
struct KvState {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> kv;
    size_t bytes() const { return kv.size() + tokens.size() * sizeof(int32_t); }
};

// What a saved state is valid under: the model file, the KV types and context size, and
// anything else that changes what the tokens mean (the chat template). A file saved under
// another key is "foreign" and never restored.
std::string kv_cache_key(const Context& ctx, std::string_view extra = {});

// The file: a magic, the key, the tokens, the KV bytes and a digest of all of it, written
// to a temporary file of a fresh name beside it (created, never opened: no link is written
// through), flushed to the disk and renamed into place (a link at `path` is replaced, not
// followed). Returns bytes written. The reads below open `path` itself: a symbolic link
// there is refused, not followed, and so is anything but a regular file.
Result<size_t> write_kv_file(const std::string& path, const std::string& key, const KvState& s);
// The key and tokens of a file, checking its size (not its digest): what the index needs.
struct KvFileHead {
    std::string key;
    std::vector<int32_t> tokens;
    size_t file_bytes = 0;
};
Result<KvFileHead> read_kv_head(const std::string& path);
// The whole file, verified (magic, size, digest, key). Errors name the file and the fault.
Result<KvState> read_kv_file(const std::string& path, const std::string& key);

// A sequence's state in and out.
KvState save_state(const KvSequence& seq);
// Replace what seq holds; returns the positions restored (on failure seq is left empty).
Result<int64_t> restore_state(KvSequence& seq, const KvState& s);

struct PromptCacheOptions {
    std::string key;          // kv_cache_key() of the context the states come from
    size_t ram_bytes = 0;     // states kept in RAM (0: none)
    std::string dir;          // states kept on disk ("" : none)
    size_t disk_bytes = 0;    // the directory's budget
    int64_t min_tokens = 32;  // shorter states are not worth keeping
    // A hybrid model's states (Context::recurrent_reason): an entry is of use only to a
    // prompt that goes on from all of it, past its end (its recurrent state cannot be cut
    // back, and the prompt's last token is evaluated anyway).
    bool whole_entries = false;
};

// Thread-safe. Disk writes run on a thread of its own, so a request does not wait for the
// disk; destruction finishes them.
class PromptCache {
  public:
    explicit PromptCache(PromptCacheOptions o);
    ~PromptCache();
    PromptCache(const PromptCache&) = delete;
    PromptCache& operator=(const PromptCache&) = delete;

    const PromptCacheOptions& options() const { return o_; }
    // Index the directory (creating it): returns a warning for each file skipped (foreign,
    // truncated, not ours, a symbolic link: never followed) naming it. Leftover temporary
    // files are removed.
    std::vector<std::string> open();

    // The entry sharing the longest prefix with prompt, when longer than `than` tokens.
    struct Hit {
        uint64_t id = 0;
        int64_t common = 0;   // tokens shared with the prompt
        int64_t n_tokens = 0; // tokens the entry holds
        bool in_ram = false;
        std::string file;     // its file name, when on disk
    };
    std::optional<Hit> find(std::span<const int32_t> prompt, int64_t than) const;
    // The most recently used entries, newest first (at start-up: what to preload).
    std::vector<Hit> newest(size_t n) const;

    // Restore entry `id` into seq, then keep only its common prefix with `prompt` (all of it
    // when prompt is empty). Returns the positions kept; on failure (a damaged file: it is
    // dropped from the index and deleted) why, and seq is left empty.
    Result<int64_t> restore(uint64_t id, KvSequence& seq, std::span<const int32_t> prompt);

    // Keep what seq holds: in RAM (when `ram` and it fits the budget) and on disk (when
    // `disk` and a directory is set). A state that extends an entry replaces it; one
    // that an entry already extends is not stored again. False: nothing stored.
    bool store(const KvSequence& seq, bool ram, bool disk);
    // Wait for the disk writes queued so far.
    void flush();

    struct Stats {
        size_t entries = 0, ram_entries = 0, ram_bytes = 0, disk_entries = 0, disk_bytes = 0;
        uint64_t hits = 0, restored_tokens = 0, stores = 0, writes = 0, write_errors = 0;
    };
    Stats stats() const;
    // Warnings since the last call (a failed write, a damaged file met on restore).
    std::vector<std::string> take_warnings();

  private:
    struct Entry {
        uint64_t id = 0;
        std::vector<int32_t> tokens;
        std::shared_ptr<const KvState> ram;  // null: on disk only
        std::string file;                    // "": in RAM only
        size_t file_bytes = 0;
        uint64_t used = 0;                   // LRU clock
        int64_t mtime = 0;                   // for the disk order across restarts
    };
    struct Write {
        uint64_t id;
        std::string file;
        std::shared_ptr<const KvState> state;
    };
    void evict_ram_locked();
    void evict_disk_locked();
    void drop_locked(size_t i);
    void writer();
    std::string file_for(const std::vector<int32_t>& tokens) const;

    PromptCacheOptions o_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Entry> entries_;
    uint64_t next_id_ = 1, clock_ = 0;
    size_t ram_used_ = 0, disk_used_ = 0;
    std::deque<Write> queue_;
    bool stop_ = false;
    Stats stats_;
    std::vector<std::string> warnings_;
    std::thread thread_;
};

}  // namespace edgellm
