// Tokenizers against llama.cpp's tokenizer tests: every line of each
// reference/tokenizer/<vocab>.inp must tokenize (no BOS, special tokens not parsed) to the
// ids on the same line of <vocab>.out. Plus round trips and the streaming detokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "edgellm/chat.h"
#include "edgellm/tokenizer.h"
#include "test_paths.h"

using namespace edgellm;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Case {
    std::string text;
    std::vector<int32_t> ids;
};

// The format of llama.cpp's test-tokenizer-0: inputs separated by a marker line, outputs
// one line of ids per input.
std::vector<Case> read_cases(const fs::path& inp, const fs::path& out) {
    const std::string raw = read_all(inp);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    for (;;) {
        const size_t next = raw.find(sep, pos);
        if (next == std::string::npos) break;
        texts.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::ifstream o(out);
    std::vector<Case> cases;
    std::string line;
    for (size_t i = 0; i < texts.size() && std::getline(o, line); ++i) {
        Case c{texts[i], {}};
        std::istringstream ids(line);
        int32_t id;
        while (ids >> id) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    return cases;
}

std::string show(const std::vector<int32_t>& v) {
    std::string s;
    for (int32_t id : v) s += " " + std::to_string(id);
    return s;
}

// Every case of one vocabulary; returns how many were checked.
int check_vocab(const fs::path& gguf, const fs::path& inp, const fs::path& out) {
    auto f = GgufFile::open(gguf.string());
    EXPECT_TRUE(f.ok()) << f.error();
    if (!f.ok()) return 0;
    auto t = Tokenizer::load(**f);
    EXPECT_TRUE(t.ok()) << t.error();
    if (!t.ok()) return 0;
    const auto cases = read_cases(inp, out);
    EXPECT_GE(cases.size(), 40u);
    int n = 0;
    for (const Case& c : cases) {
        const auto got = (*t)->tokenize(c.text, false, false);
        EXPECT_EQ(show(got), show(c.ids)) << gguf.filename() << ": \"" << c.text << "\"";
        ++n;
    }
    return n;
}

const fs::path kTok = test::shared_dir() / "reference" / "tokenizer";

}  // namespace

class VocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabTest, ReproducesLlamaCppTokenization) {
    const fs::path gguf = kTok / ("ggml-vocab-" + GetParam() + ".gguf");
    if (!fs::exists(gguf)) GTEST_SKIP() << "no vocabulary at " << gguf;
    const int n =
        check_vocab(gguf, fs::path(gguf.string() + ".inp"), fs::path(gguf.string() + ".out"));
    std::printf("%s: %d lines checked\n", GetParam().c_str(), n);
}

INSTANTIATE_TEST_SUITE_P(Reference, VocabTest,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-llm", "falcon",
                                           "starcoder"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

// The reference has the inputs and llama.cpp's ids for these pre-tokenizers but no
// vocabulary: the real models of the family supply it.
TEST(RealVocab, Qwen2ReproducesLlamaCppTokenization) {
    const fs::path model = test::qwen_model();
    if (model.empty())
        GTEST_SKIP() << "no Qwen2.5 model in " << test::models_dir()
                     << " (scripts/fetch-models.sh qwen2.5-coder-0.5b fetches one)";
    const fs::path inp = kTok / "ggml-vocab-qwen2.gguf.inp";
    if (!fs::exists(inp)) GTEST_SKIP() << "no reference data at " << inp;
    const int n = check_vocab(model, inp, kTok / "ggml-vocab-qwen2.gguf.out");
    std::printf("qwen2 (%s): %d lines checked\n", model.filename().c_str(), n);
}

TEST(RealVocab, LlamaBpeReproducesLlamaCppTokenization) {
    const fs::path model = test::real_model({"llama-3.2-1b-instruct-q4_k_m.gguf"});
    if (model.empty())
        GTEST_SKIP() << "no Llama 3 model in " << test::models_dir()
                     << ": none of the model packages carries a llama-bpe vocabulary";
    check_vocab(model, kTok / "ggml-vocab-llama-bpe.gguf.inp",
                kTok / "ggml-vocab-llama-bpe.gguf.out");
}

TEST(Tokenizer, RoundTripsText) {
    for (const char* name : {"gpt-2", "llama-spm", "deepseek-llm"}) {
        const fs::path gguf = kTok / (std::string("ggml-vocab-") + name + ".gguf");
        if (!fs::exists(gguf)) GTEST_SKIP() << "no vocabulary at " << gguf;
        auto f = GgufFile::open(gguf.string());
        ASSERT_TRUE(f.ok());
        auto t = Tokenizer::load(**f);
        ASSERT_TRUE(t.ok()) << t.error();
        for (const std::string text :
             {"Hello world", "  leading spaces and\ttabs\n\nnew lines", "naïve café 🦙 ½",
              "3333333 + 4.5e-3", "нещо на Български", "日本語のテキスト"}) {
            const auto ids = (*t)->tokenize(text, false, false);
            EXPECT_EQ((*t)->detokenize(ids, false), text) << name;
        }
    }
}

TEST(Tokenizer, StreamingNeverSplitsACharacter) {
    const fs::path gguf = kTok / "ggml-vocab-llama-spm.gguf";
    if (!fs::exists(gguf)) GTEST_SKIP() << "no vocabulary at " << gguf;
    auto f = GgufFile::open(gguf.string());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    // Emoji and rare CJK fall back to byte tokens in this vocabulary: several tokens per
    // character, and no piece streamed may end inside one.
    const std::string text = "ok 🦙🦙 龘 done";
    const auto ids = (*t)->tokenize(text, false, false);
    StreamingDetokenizer s(**t);
    std::string all;
    int pieces = 0;
    for (int32_t id : ids) {
        const std::string piece = s.push(id);
        for (size_t i = 0; i < piece.size();) {
            const unsigned char c = (unsigned char)piece[i];
            const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
            ASSERT_LE(i + len, piece.size()) << "half a character streamed";
            i += len;
        }
        pieces += !piece.empty();
        all += piece;
    }
    all += s.flush();
    EXPECT_EQ(all, " " + text);  // SentencePiece's space prefix is part of the first token
    EXPECT_GT(pieces, 3);
}

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
    const fs::path gguf = kTok / "ggml-vocab-phi-3.gguf";
    if (!fs::exists(gguf)) GTEST_SKIP() << "no vocabulary at " << gguf;
    auto f = GgufFile::open(gguf.string());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    const auto end = (*t)->find("<|end|>");
    ASSERT_TRUE(end.has_value());
    const auto plain = (*t)->tokenize("hi<|end|>", false, false);
    const auto parsed = (*t)->tokenize("hi<|end|>", false, true);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), *end), 0);
    EXPECT_EQ(std::count(parsed.begin(), parsed.end(), *end), 1);
    EXPECT_TRUE((*t)->is_eog(*end));
    EXPECT_TRUE((*t)->is_eog((*t)->eos()));
    // With BOS: add_bos_token is true for this vocabulary.
    const auto with_bos = (*t)->tokenize("hi", true, false);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], (*t)->bos());
    // Control tokens render only when asked.
    EXPECT_EQ((*t)->token_to_piece(*end, false), "");
    EXPECT_EQ((*t)->token_to_piece(*end, true), "<|end|>");
}

TEST(Tokenizer, InvalidUtf8DoesNotCrash) {
    const fs::path gguf = kTok / "ggml-vocab-gpt-2.gguf";
    if (!fs::exists(gguf)) GTEST_SKIP() << "no vocabulary at " << gguf;
    auto f = GgufFile::open(gguf.string());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    const std::string bad = std::string("a\xff\xfe b\xc3") + "(\xe2\x82";
    const auto ids = (*t)->tokenize(bad, false, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_NE((*t)->detokenize(ids, false).find("\xEF\xBF\xBD"), std::string::npos);
}

// The built-in chat formats, as each family's published template renders a conversation.
// Gemma has no system role (the system text opens the first user turn) and calls the
// assistant "model".
TEST(ChatFormat, RendersEachFamilysTurns) {
    const std::vector<ChatMessage> msgs = {{"system", "Be brief."},
                                           {"user", "Hi"},
                                           {"assistant", "Hello!"},
                                           {"user", "Capital of France?"}};
    EXPECT_EQ(render_chat(ChatFormat::Gemma, msgs, true),
              "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
              "<start_of_turn>model\nHello!<end_of_turn>\n"
              "<start_of_turn>user\nCapital of France?<end_of_turn>\n"
              "<start_of_turn>model\n");
    EXPECT_EQ(render_chat(ChatFormat::ChatML, {{"user", "Hi"}}, true, "You are helpful."),
              "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(render_chat(ChatFormat::Llama3, {{"user", "Hi"}}, false),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

// The format comes from the vocabulary: Gemma 3's <start_of_turn>, and its end-of-turn
// token ends a reply.
TEST(ChatFormat, DetectsGemmaAndEndsTurnsAtEndOfTurn) {
    const auto path = test::real_model({"gemma-3-270m-q4_k_m.gguf"});
    if (path.empty()) GTEST_SKIP() << "no Gemma 3 270M in " << test::models_dir();
    auto f = GgufFile::open(path.string());
    ASSERT_TRUE(f.ok());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(detect_chat_format(**f, **t), ChatFormat::Gemma);
    const auto eot = (*t)->find("<end_of_turn>");
    ASSERT_TRUE(eot.has_value());
    EXPECT_TRUE((*t)->is_eog(*eot));
    const auto ids = (*t)->tokenize("<start_of_turn>user\nHi<end_of_turn>\n", true, true);
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids[0], 2);    // <bos>
    EXPECT_EQ(ids[1], 105);  // <start_of_turn>
}

// Gemma 3's SentencePiece vocabulary (262k tokens, byte fallback, user-defined symbols, no
// space prefix) against llama.cpp's tokenizer on the same file: tricky strings id for id,
// and the whole of Tom Sawyer by count and checksum (tests/data/tokenizer/, with how it
// was made).
TEST(RealVocab, Gemma3ReproducesLlamaCppTokenization) {
    const auto path = test::real_model({"gemma-3-270m-q4_k_m.gguf"});
    if (path.empty()) GTEST_SKIP() << "no Gemma 3 270M in " << test::models_dir();
    const fs::path data =
        fs::path(__FILE__).parent_path().parent_path() / "data" / "tokenizer" / "gemma3-llama-cpp.json";
    std::ifstream in(data);
    ASSERT_TRUE(in) << data;
    const auto j = nlohmann::json::parse(in);
    auto f = GgufFile::open(path.string());
    ASSERT_TRUE(f.ok());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    for (const auto& c : j.at("cases")) {
        const std::string text = c.at("text");
        const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
        EXPECT_EQ((*t)->tokenize(text, true, true), want) << text;
    }
    const fs::path book = j.at("tom_sawyer").at("file").get<std::string>();
    if (!fs::exists(book)) GTEST_SKIP() << "no " << book << " (scripts/setup.sh installs it)";
    std::ifstream b(book, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(b)), {});
    const auto ids = (*t)->tokenize(text, true, true);
    uint64_t h = 1469598103934665603ull;
    for (int32_t id : ids) h = (h ^ (uint32_t)id) * 1099511628211ull;
    EXPECT_EQ((int64_t)ids.size(), j.at("tom_sawyer").at("n_tokens").get<int64_t>());
    EXPECT_EQ(std::to_string(h), j.at("tom_sawyer").at("fnv1a64_of_ids").get<std::string>());
}

// --chat renders the model's own template (Jinja) when it has one: Qwen2.5's inserts its
// default system message; a model without one (Gemma 3 270M) gets its family's built-in
// format, and arguments that are not a JSON object fall back with a warning.
TEST(ChatPrompt, RendersTheModelsTemplateOrFallsBackWithAWarning) {
    const auto qwen = test::qwen_model();
    if (qwen.empty()) GTEST_SKIP() << "no Qwen2.5 model in " << test::models_dir();
    auto f = GgufFile::open(qwen.string());
    ASSERT_TRUE(f.ok());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    const ChatPrompt p = chat_prompt(**f, **t, {{"user", "Hi"}}, true);
    EXPECT_EQ(p.how, "template");
    EXPECT_EQ(p.warning, "");
    EXPECT_EQ(p.text,
              "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
              "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    const ChatPrompt bad = chat_prompt(**f, **t, {{"user", "Hi"}}, true, "[1, 2]");
    EXPECT_EQ(bad.how, "built-in chatml");
    EXPECT_NE(bad.warning.find("not a JSON object"), std::string::npos) << bad.warning;
    EXPECT_EQ(bad.text, p.text);

    const auto gemma = test::real_model({"gemma-3-270m-q4_k_m.gguf"});
    if (gemma.empty()) GTEST_SKIP() << "no Gemma 3 270M in " << test::models_dir();
    auto g = GgufFile::open(gemma.string());
    ASSERT_TRUE(g.ok());
    auto gt = Tokenizer::load(**g);
    ASSERT_TRUE(gt.ok());
    const ChatPrompt gp = chat_prompt(**g, **gt, {{"user", "Hi"}}, true);
    EXPECT_EQ(gp.how, "built-in gemma");
    EXPECT_EQ(gp.text, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
}
