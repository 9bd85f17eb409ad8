// The repacked weights kept in a file, so that a second start maps them from the page cache
// instead of repacking them again (model.cpp, repack_for_decode).
//
// Repacking itself is quick; the memory it writes is not: every 4 KiB page of a fresh
// anonymous mapping costs a fault, about 0.3 s for the 1.5B's 935 MiB here, most of a
// start-up. A file the kernel already holds in its page cache maps without allocating
// anything, as the model file does.
//
// A start that finds no usable file repacks into memory as without one, and the file is
// written afterwards (Model::save_repack_cache): writing a GB into the page cache is
// throttled to the disk's speed, a second or more, not to be waited for before serving.
//
// The file: a header (magic, format version, the model's fingerprint, size and mtime, the
// kernels' layout of each repacked matrix, a digest of samples of the data, a digest of the
// header itself), then the data at a page-aligned offset. It is written under a temporary
// name and renamed when complete, so a reader never sees half of one. A file that does not
// match (another model, another edgellm, damage found by a digest, a short file) is
// reported and written again; the data's digest covers 64 bytes of every 64 KiB (reading
// all of it would cost what the cache saves), which catches a truncated, zeroed or foreign
// file, not a flipped bit in the middle of a page.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <string>
#include <vector>

#include "edgellm/error.h"
#include "edgellm/tensor_type.h"

namespace edgellm {

// One repacked matrix: its type and shape, and where its bytes are in the data.
struct RepackEntry {
    TensorType type;
    int64_t ne0 = 0, ne1 = 0;
    uint64_t offset = 0, bytes = 0;
};

// What the cached data was made from.
struct RepackKey {
    std::string fingerprint;  // Model::fingerprint()
    uint64_t model_size = 0;
    int64_t model_mtime_ns = 0;
};

// A mapping of a cache file: data is `bytes` long, inside [map, map + mapped).
struct RepackMapping {
    uint8_t* map = nullptr;
    size_t mapped = 0;
    uint8_t* data = nullptr;
    size_t bytes = 0;
};

// The data of the cache file at path, mapped read-only, when it holds exactly these entries
// for this key; else why not ("no such file" when there is none).
Result<RepackMapping> open_repack_cache(const std::string& path, const RepackKey& key,
                                        const std::vector<RepackEntry>& entries);

// Write the cache file for data (the entries' bytes at their offsets) to path, its directory
// made when missing: under a temporary name of its own, synced, then renamed into place.
// "" when done, else the reason (no space, a read-only directory, stop raised), and the
// temporary file removed. A file written prunes its directory (prune_repack_cache_dir).
std::string write_repack_cache(const std::string& path, const RepackKey& key,
                               const std::vector<RepackEntry>& entries, const uint8_t* data,
                               const std::atomic<bool>* stop = nullptr);

// The directory's bound: every model path has a file of its own, and models moved, copied
// or deleted would leave theirs for ever.
constexpr uint64_t kRepackCacheDirMaxBytes = (uint64_t)4 << 30;

// Removes from dir the temporary files of killed writers (any model's, older than 30
// minutes) and, least recently used first (a file's mtime: written, or mapped by a load),
// the cache files past max_bytes in all; `keep` (a path) always stays. Returns what it
// removed.
std::vector<std::string> prune_repack_cache_dir(const std::string& dir, const std::string& keep,
                                                uint64_t max_bytes = kRepackCacheDirMaxBytes);

}  // namespace edgellm
