// SentencePiece's tokenizer.model: the pieces of its ModelProto (text, score, type), read
// from the protobuf wire format without the protobuf library.
#pragma once

#include <string>
#include <vector>

namespace edgellm::convert {

struct SpmPiece {
    std::string piece;
    float score = 0.0f;
    int type = 1;  // NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
};

// Throws edgellm::Error naming the file and the offset of what it cannot read.
std::vector<SpmPiece> read_spm_model(const std::string& path);

}  // namespace edgellm::convert
