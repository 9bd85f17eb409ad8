// Embeddings and reranking requests, knowing nothing of the model: what llama-server's
// /embedding, /v1/embeddings and /rerank take (their input shapes, options and errors) and
// the shapes they answer in. The server turns the inputs into tokens and the model's
// hidden states (Context::embed) into the vectors these functions pool, normalize and format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api/api.h"

namespace edgellm::server {

// One input: text and token ids in the order given (llama.cpp's mixed prompts, such as
// [12, 34, "text", 56]).
struct InputPiece {
    bool is_text = true;
    std::string text;
    std::vector<int32_t> ids;
};
using InputPrompt = std::vector<InputPiece>;

// The inputs of an embeddings request ("input" or "content"): a string, token ids, text
// and ids mixed, an object ({"prompt_string": ...} or {"content": [{"type": "text", ...}]}),
// or an array of those (several inputs). Errors name what is wrong (an empty array, a part
// that is not text: this server has no image or audio encoder).
std::optional<ApiError> parse_inputs(const json& v, std::vector<InputPrompt>* out);

struct EmbeddingRequest {
    std::vector<InputPrompt> inputs;
    // llama.cpp's embd_normalize: -1 none, 0 max-abs scaled to int16, 1 taxicab, 2
    // Euclidean (the default), p > 2 the p-norm.
    int normalize = 2;
    bool base64 = false;  // OpenAI's encoding_format "base64": little-endian float32 bytes
};
// oai: POST /v1/embeddings (OpenAI's fields: input, encoding_format, dimensions, model,
// user); else llama.cpp's /embedding (content or input, embd_normalize). n_embd: the
// model's width (OpenAI's "dimensions" must equal it: the vectors are not truncated).
std::optional<ApiError> parse_embedding_request(const json& body, bool oai, int64_t n_embd,
                                                EmbeddingRequest* r);

// Scale v by its norm as llama.cpp's embd_normalize says (a zero vector stays zero).
void normalize_embedding(std::vector<float>* v, int norm);
// Little-endian float32 bytes in base64.
std::string base64_floats(const std::vector<float>& v);

struct RerankRequest {
    std::string query;
    std::vector<std::string> documents;
    int64_t top_n = -1;     // -1: every document
    bool tei = false;       // Hugging Face TEI's shape ("texts", an array of {index, score})
    bool return_text = false;  // TEI: each result carries its text
};
// POST /rerank (Jina and Cohere's "documents", or TEI's "texts").
std::optional<ApiError> parse_rerank_request(const json& body, RerankRequest* r);
// The results sorted by score, best first, cut to top_n.
json rerank_response(const RerankRequest& r, const std::vector<float>& scores, int64_t n_tokens,
                     const std::string& model);

// Cosine similarity (0 when either vector is zero).
float cosine(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace edgellm::server
