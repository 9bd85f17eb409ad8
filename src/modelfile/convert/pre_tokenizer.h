// The name of a byte-level BPE vocabulary's pre-tokenizer (tokenizer.ggml.pre), as llama.cpp
// names it: its converter tokenizes a fixed text with the checkpoint's tokenizer and looks
// the sha256 of the token ids up in a list of the released vocabularies' (get_vocab_base_pre,
// "chkhsh"); edgellm tokenizes the same text with its own tokenizer under each name it runs
// and takes the name whose hash matches. A vocabulary of no released model (no hash matches)
// is named by its tokenizer.json's pre_tokenizer instead, when that is one edgellm knows;
// anything else is refused, naming the hash and the pre_tokenizer.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgellm/gguf.h"

namespace edgellm::convert {

using Kv = std::vector<std::pair<std::string, GgufValue>>;

// The fixed text (llama.cpp's chktxt).
extern const char* const kChkTxt;

struct PreTokenizerName {
    std::string name;
    std::string how;  // "chkhsh 0ef9...": identified by the hash; else what was recognised
};

// vocab: the vocabulary's keys (tokenizer.ggml.model, tokens, token_type, merges, special
// ids, add_bos_token); first: the name to try first (the family's usual one). Throws
// edgellm::Error when the pre-tokenizer is none edgellm runs.
PreTokenizerName name_pre_tokenizer(const Kv& vocab, const nlohmann::json& tokenizer_json,
                                    const std::string& first);

// The sha256 llama.cpp computes of token ids: of Python's str() of the list.
std::string chkhsh(const std::vector<int32_t>& ids);

}  // namespace edgellm::convert
