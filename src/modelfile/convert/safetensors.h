// Hugging Face checkpoints in safetensors: one file or the shards an index names, memory-
// mapped and checked (every tensor's bytes inside its file, its shape and type agreeing with
// them) before anything is converted. A tensor's pages are given back once it is read, so
// converting a model keeps about one tensor resident.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgellm/error.h"

namespace edgellm::convert {

enum class StType : uint8_t { F32, F16, BF16, F64 };  // the ones weights come in
const char* st_type_name(StType t);
size_t st_type_size(StType t);

class StFile;

struct StTensor {
    std::string name;
    StType type = StType::F32;
    std::vector<int64_t> shape;  // outermost first, as torch has it
    const uint8_t* data = nullptr;
    size_t n_bytes = 0;
    size_t offset = 0;  // of its data in the file
    const StFile* file = nullptr;

    int64_t n_elements() const;
    // The data's pages go back to the file (read again from the page cache if touched).
    void release() const;
};

// One .safetensors file, memory-mapped.
class StFile {
  public:
    static Result<std::unique_ptr<StFile>> open(const std::string& path);
    ~StFile();
    StFile(const StFile&) = delete;
    StFile& operator=(const StFile&) = delete;

    const std::string& path() const { return path_; }
    const std::vector<StTensor>& tensors() const { return tensors_; }  // in name order
    void release(const uint8_t* p, size_t n) const;

  private:
    StFile() = default;
    std::string path_;
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    std::vector<StTensor> tensors_;
};

// A checkpoint directory's tensors: model.safetensors.index.json's shards, else every
// model*.safetensors; in llama.cpp's converter's order (the files by name, each file's
// tensors by name).
class Checkpoint {
  public:
    static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir);
    const std::vector<const StTensor*>& tensors() const { return order_; }
    const StTensor* find(const std::string& name) const;
    size_t n_files() const { return files_.size(); }

  private:
    std::vector<std::unique_ptr<StFile>> files_;
    std::vector<const StTensor*> order_;
};

}  // namespace edgellm::convert
