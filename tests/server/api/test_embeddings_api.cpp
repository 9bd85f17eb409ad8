// The embeddings and rerank requests' shapes: every input form llama-server takes, the
// errors for what it refuses, normalization, base64 and the rerank answer's order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "server/api/embeddings/embeddings.h"

using namespace edgellm::server;

namespace {

std::vector<InputPrompt> inputs(const char* text) {
    std::vector<InputPrompt> out;
    auto err = parse_inputs(json::parse(text), &out);
    EXPECT_FALSE(err) << text << ": " << err->message;
    return out;
}

bool refused(const char* text) {
    std::vector<InputPrompt> out;
    return parse_inputs(json::parse(text), &out).has_value();
}

}  // namespace

TEST(EmbeddingInputs, EveryFormLlamaServerTakes) {
    auto one = inputs(R"("string")");
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(one[0].size(), 1u);
    EXPECT_EQ(one[0][0].text, "string");

    auto ids = inputs("[12, 34, 56]");
    ASSERT_EQ(ids.size(), 1u);
    ASSERT_EQ(ids[0].size(), 1u);
    EXPECT_FALSE(ids[0][0].is_text);
    EXPECT_EQ(ids[0][0].ids, (std::vector<int32_t>{12, 34, 56}));

    auto mixed = inputs(R"([12, 34, "string", 56, 78])");  // one input, three pieces
    ASSERT_EQ(mixed.size(), 1u);
    ASSERT_EQ(mixed[0].size(), 3u);
    EXPECT_EQ(mixed[0][1].text, "string");
    EXPECT_EQ(mixed[0][2].ids, (std::vector<int32_t>{56, 78}));

    EXPECT_EQ(inputs(R"(["string1", "string2"])").size(), 2u);
    EXPECT_EQ(inputs(R"([[12, 34, 56], [12, "string", 34, 56]])").size(), 2u);
    auto objects = inputs(
        R"(["a", {"prompt_string": "b"}, {"content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]}])");
    ASSERT_EQ(objects.size(), 3u);
    EXPECT_EQ(objects[1][0].text, "b");
    EXPECT_EQ(objects[2][0].text, "cd");  // parts joined: the same text as a string
    EXPECT_EQ(inputs(R"("")").size(), 1u);
}

TEST(EmbeddingInputs, RefusedWithAReason) {
    EXPECT_TRUE(refused("[]"));
    EXPECT_TRUE(refused(R"({"content": "string"})"));
    EXPECT_TRUE(refused(R"({"content": [{"type": "unknown"}]})"));
    EXPECT_TRUE(refused(R"({"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]})"));
    EXPECT_TRUE(refused(R"({"content": [{"type": "input_audio", "input_audio": {}}]})"));
    EXPECT_TRUE(refused("[1, -2]"));
    EXPECT_TRUE(refused("[1.5, 2]"));
    EXPECT_TRUE(refused("123"));
    EXPECT_TRUE(refused("null"));
    EXPECT_TRUE(refused(R"([{"nothing": 1}])"));
}

TEST(EmbeddingRequest, OptionsAndTheirErrors) {
    EmbeddingRequest r;
    EXPECT_FALSE(parse_embedding_request(json::parse(R"({"input": "x", "encoding_format": "base64"})"),
                                         true, 64, &r));
    EXPECT_TRUE(r.base64);
    EmbeddingRequest n;
    EXPECT_FALSE(parse_embedding_request(json::parse(R"({"content": "x", "embd_normalize": -1})"),
                                         false, 64, &n));
    EXPECT_EQ(n.normalize, -1);
    EmbeddingRequest bad;
    EXPECT_TRUE(parse_embedding_request(json::parse(R"({"input": "x", "encoding_format": "int8"})"),
                                        true, 64, &bad));
    auto dims = parse_embedding_request(json::parse(R"({"input": "x", "dimensions": 32})"), true, 64, &bad);
    ASSERT_TRUE(dims);
    EXPECT_NE(dims->message.find("64"), std::string::npos);
    EXPECT_FALSE(parse_embedding_request(json::parse(R"({"input": "x", "dimensions": 64})"), true, 64, &bad));
    EXPECT_TRUE(parse_embedding_request(json::parse(R"({"model": "m"})"), true, 64, &bad));
}

TEST(EmbeddingRequest, Normalization) {
    std::vector<float> v = {3.0f, -4.0f};
    normalize_embedding(&v, 2);
    EXPECT_FLOAT_EQ(v[0], 0.6f);
    EXPECT_FLOAT_EQ(v[1], -0.8f);
    v = {3.0f, -4.0f};
    normalize_embedding(&v, 1);
    EXPECT_FLOAT_EQ(v[0], 3.0f / 7.0f);
    v = {3.0f, -4.0f};
    normalize_embedding(&v, 0);
    EXPECT_FLOAT_EQ(v[1], -32760.0f);
    v = {3.0f, -4.0f};
    normalize_embedding(&v, -1);
    EXPECT_FLOAT_EQ(v[1], -4.0f);
    v = {0.0f, 0.0f};
    normalize_embedding(&v, 2);  // stays zero, no NaN
    EXPECT_EQ(v[0], 0.0f);
}

TEST(EmbeddingRequest, Base64IsLittleEndianFloats) {
    EXPECT_EQ(base64_floats({1.0f}), "AACAPw==");  // 00 00 80 3f
    EXPECT_EQ(base64_floats({1.0f, -2.0f, 0.5f}).size(), 16u);
}

TEST(Rerank, RequestsAndTheAnswersOrder) {
    RerankRequest r;
    ASSERT_FALSE(parse_rerank_request(
        json::parse(R"({"query": "q", "documents": ["a", "b", "c"], "top_n": 2})"), &r));
    const json j = rerank_response(r, {0.1f, 0.9f, 0.5f}, 12, "m");
    ASSERT_EQ(j["results"].size(), 2u);
    EXPECT_EQ(j["results"][0]["index"], 1);
    EXPECT_EQ(j["results"][1]["index"], 2);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 12);

    RerankRequest tei;
    ASSERT_FALSE(parse_rerank_request(
        json::parse(R"({"query": "q", "texts": ["a", "b"], "return_text": true})"), &tei));
    EXPECT_TRUE(tei.tei);
    const json t = rerank_response(tei, {0.2f, 0.1f}, 5, "m");
    ASSERT_TRUE(t.is_array());
    EXPECT_EQ(t[0]["text"], "a");
    EXPECT_FLOAT_EQ(t[0]["score"].get<float>(), 0.2f);

    for (const char* bad : {R"({"query": "q", "documents": []})", R"({"query": "q", "documents": null})",
                            R"({"query": "q", "documents": 123})", R"({"query": "q", "documents": [1, 2]})",
                            R"({"documents": ["a"]})", R"({"query": "q", "documents": ["a"], "top_n": -1})"}) {
        RerankRequest x;
        EXPECT_TRUE(parse_rerank_request(json::parse(bad), &x)) << bad;
    }
}

TEST(Rerank, Cosine) {
    EXPECT_FLOAT_EQ(cosine({1, 0}, {1, 0}), 1.0f);
    EXPECT_FLOAT_EQ(cosine({1, 0}, {0, 2}), 0.0f);
    EXPECT_FLOAT_EQ(cosine({1, 1}, {-2, -2}), -1.0f);
    EXPECT_EQ(cosine({0, 0}, {1, 0}), 0.0f);
}
