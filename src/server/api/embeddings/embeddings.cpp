#include "server/api/embeddings/embeddings.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace edgellm::server {

namespace {

bool is_token_id(const json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX;
}

// An array of ids and strings with at least one id: one input mixing both.
bool is_mixed_prompt(const json& v) {
    if (!v.is_array() || v.empty()) return false;
    bool any_id = false;
    for (const json& e : v) {
        if (e.is_number()) any_id = true;
        else if (!e.is_string()) return false;
    }
    return any_id;
}

std::optional<ApiError> mixed_prompt(const json& v, InputPrompt* p) {
    for (const json& e : v) {
        if (e.is_string()) {
            p->push_back({true, e.get<std::string>(), {}});
        } else if (is_token_id(e)) {
            if (p->empty() || p->back().is_text) p->push_back({false, "", {}});
            p->back().ids.push_back((int32_t)e.get<int64_t>());
        } else {
            return bad_request("a token id must be a non-negative integer, got " + e.dump());
        }
    }
    return std::nullopt;
}

// {"prompt_string": "..."} or {"content": [{"type": "text", "text": "..."}, ...]}.
std::optional<ApiError> object_prompt(const json& o, InputPrompt* p) {
    if (o.contains("multimodal_data"))
        return bad_request("this server has no image or audio encoder: multimodal_data is not "
                           "supported");
    if (o.contains("prompt_string")) {
        if (!o["prompt_string"].is_string()) return bad_request("prompt_string must be a string");
        p->push_back({true, o["prompt_string"].get<std::string>(), {}});
        return std::nullopt;
    }
    if (!o.contains("content"))
        return bad_request("an input object needs \"prompt_string\" or \"content\"");
    const json& c = o["content"];
    if (!c.is_array())
        return bad_request("an input object's \"content\" must be an array of parts "
                           "({\"type\": \"text\", \"text\": ...})");
    std::string text;
    for (const json& part : c) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
            return bad_request("each content part needs a \"type\"");
        const std::string type = part["type"];
        if (type == "image_url" || type == "input_audio" || type == "input_video" ||
            type == "image" || type == "audio" || type == "video")
            return bad_request("content part of type \"" + type +
                               "\": this model has no image, audio or video encoder");
        if (type != "text")
            return bad_request("unknown content part type \"" + type + "\" (text only)");
        if (!part.contains("text") || !part["text"].is_string())
            return bad_request("a text part needs \"text\" (a string)");
        text += part["text"].get<std::string>();
    }
    p->push_back({true, std::move(text), {}});
    return std::nullopt;
}

std::optional<ApiError> one_prompt(const json& v, InputPrompt* p) {
    if (v.is_string()) {
        p->push_back({true, v.get<std::string>(), {}});
        return std::nullopt;
    }
    if (is_mixed_prompt(v)) return mixed_prompt(v, p);
    if (v.is_object()) return object_prompt(v, p);
    return bad_request("an input must be a string, an array of token ids (and strings) or an "
                       "object; got " + std::string(v.type_name()));
}

}  // namespace

std::optional<ApiError> parse_inputs(const json& v, std::vector<InputPrompt>* out) {
    out->clear();
    if (v.is_array()) {
        if (v.empty()) return bad_request("the input must not be an empty array");
        if (is_mixed_prompt(v)) {
            out->emplace_back();
            return mixed_prompt(v, &out->back());
        }
        for (const json& e : v) {
            out->emplace_back();
            if (auto err = one_prompt(e, &out->back())) return err;
        }
        return std::nullopt;
    }
    out->emplace_back();
    return one_prompt(v, &out->back());
}

std::optional<ApiError> parse_embedding_request(const json& body, bool oai, int64_t n_embd,
                                                EmbeddingRequest* r) {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    const char* field = body.contains("input") ? "input" : "content";
    if (!body.contains(field))
        return bad_request(oai ? "\"input\" is required" : "\"content\" (or \"input\") is required");
    if (auto err = parse_inputs(body[field], &r->inputs)) return err;
    if (body.contains("encoding_format")) {
        const json& f = body["encoding_format"];
        if (!f.is_string() || (f != "float" && f != "base64"))
            return bad_request("encoding_format must be \"float\" or \"base64\"");
        r->base64 = f == "base64";
    }
    if (body.contains("embd_normalize")) {
        const json& n = body["embd_normalize"];
        if (!n.is_number_integer() || n.get<int64_t>() < -1 || n.get<int64_t>() > 1000)
            return bad_request("embd_normalize must be an integer: -1 (none), 0 (max absolute), "
                               "1 (taxicab), 2 (Euclidean) or a larger p-norm");
        r->normalize = (int)n.get<int64_t>();
    }
    if (body.contains("dimensions")) {
        const json& d = body["dimensions"];
        if (!d.is_number_integer() || d.get<int64_t>() != n_embd)
            return bad_request("dimensions: this model's embeddings have " +
                               std::to_string(n_embd) + " (they are not truncated)");
    }
    if (body.contains("model") && !body["model"].is_string())
        return bad_request("model must be a string");
    return std::nullopt;
}

void normalize_embedding(std::vector<float>* v, int norm) {
    if (norm < 0) return;
    double sum = 0.0;
    if (norm == 0) {
        for (float x : *v) sum = std::max(sum, (double)std::fabs(x));
        sum /= 32760.0;  // int16 range
    } else if (norm == 1) {
        for (float x : *v) sum += std::fabs(x);
    } else if (norm == 2) {
        for (float x : *v) sum += (double)x * x;
        sum = std::sqrt(sum);
    } else {
        for (float x : *v) sum += std::pow(std::fabs((double)x), norm);
        sum = std::pow(sum, 1.0 / norm);
    }
    if (sum <= 0.0) return;
    const double scale = 1.0 / sum;
    for (float& x : *v) x = (float)(x * scale);
}

std::string base64_floats(const std::vector<float>& v) {
    static const char* kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::vector<unsigned char> bytes(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; ++b) bytes[i * 4 + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const uint32_t n = (uint32_t)bytes[i] << 16 |
                           (i + 1 < bytes.size() ? (uint32_t)bytes[i + 1] << 8 : 0) |
                           (i + 2 < bytes.size() ? (uint32_t)bytes[i + 2] : 0);
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
    }
    return out;
}

std::optional<ApiError> parse_rerank_request(const json& body, RerankRequest* r) {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    if (!body.contains("query") || !body["query"].is_string())
        return bad_request("\"query\" must be a string");
    r->query = body["query"];
    r->tei = !body.contains("documents") && body.contains("texts");
    const char* field = r->tei ? "texts" : "documents";
    const json* docs = body.contains(field) ? &body[field] : nullptr;
    if (!docs || !docs->is_array() || docs->empty())
        return bad_request(std::string("\"") + field + "\" must be a non-empty array of strings");
    for (const json& d : *docs) {
        if (d.is_string()) {
            r->documents.push_back(d);
        } else if (d.is_object() && d.contains("text") && d["text"].is_string()) {
            r->documents.push_back(d["text"]);  // Cohere's {"text": ...}
        } else {
            return bad_request(std::string("\"") + field + "\" must be an array of strings, got " +
                               d.dump());
        }
    }
    if (body.contains("top_n") && !body["top_n"].is_null()) {
        const json& t = body["top_n"];
        if (!t.is_number_integer() || t.get<int64_t>() < 0)
            return bad_request("top_n must be a non-negative integer");
        r->top_n = t.get<int64_t>();
    }
    if (body.contains("return_text")) {
        if (!body["return_text"].is_boolean()) return bad_request("return_text must be true or false");
        r->return_text = body["return_text"];
    }
    return std::nullopt;
}

json rerank_response(const RerankRequest& r, const std::vector<float>& scores, int64_t n_tokens,
                     const std::string& model) {
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    if (r.top_n >= 0 && (size_t)r.top_n < order.size()) order.resize((size_t)r.top_n);
    json results = json::array();
    for (size_t i : order) {
        if (r.tei) {
            json e = {{"index", i}, {"score", scores[i]}};
            if (r.return_text) e["text"] = r.documents[i];
            results.push_back(std::move(e));
        } else {
            results.push_back({{"index", i}, {"relevance_score", scores[i]}});
        }
    }
    if (r.tei) return results;
    return {{"model", model},
            {"object", "list"},
            {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}},
            {"results", results}};
}

float cosine(const std::vector<float>& a, const std::vector<float>& b) {
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    if (na <= 0 || nb <= 0) return 0.0f;
    return (float)(dot / std::sqrt(na * nb));
}

}  // namespace edgellm::server
