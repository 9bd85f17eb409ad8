// Tokenizers against llama.cpp's tokenizer tests: every case of each vocabulary's
// ggml-vocab-<name>.gguf.inp (llama.cpp's models/, fetched by scripts/fetch-vocabs.sh; some
// are also in the shared reference data) must tokenize (no BOS, special tokens not parsed)
// to the ids on the same line of its .out. Plus round trips and the streaming detokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "edgellm/chat.h"
#include "edgellm/tokenizer.h"
#include "text/pretokenizer.h"
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

// The format of llama.cpp's test-tokenizer-0: inputs separated by a marker line (text after
// the last marker is one more input), outputs one line of ids per input.
std::vector<Case> read_cases(const fs::path& inp, const fs::path& out) {
    const std::string raw = read_all(inp);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0; pos < raw.size();) {
        const size_t next = raw.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(raw.substr(pos));
            break;
        }
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
    EXPECT_EQ(cases.size(), texts.size()) << out << " has fewer lines than " << inp << " inputs";
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

// llama.cpp's vocabulary file models/ggml-vocab-<name>.gguf, or empty.
fs::path vocab(const std::string& name) {
    return test::vocab_file("ggml-vocab-" + name + ".gguf");
}

// Why a test that needs that file skips.
std::string missing(const std::string& name) {
    return "no ggml-vocab-" + name + ".gguf in " + test::vocab_dir().string() + " or " +
           (test::shared_dir() / "reference" / "tokenizer").string() +
           " (scripts/fetch-vocabs.sh fetches llama.cpp's vocabularies)";
}

}  // namespace

// Every vocabulary of llama.cpp's models/ that comes with test cases, for the families
// edgellm runs (llama-bpe: Llama 3 and SmolLM3; llama-spm; phi-3; qwen2, qwen35; gemma-4;
// bert-bge) and the others that share their tokenizers' machinery.
class VocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabTest, ReproducesLlamaCppTokenization) {
    const fs::path gguf = vocab(GetParam());
    if (gguf.empty()) GTEST_SKIP() << missing(GetParam());
    const fs::path inp = gguf.string() + ".inp", out = gguf.string() + ".out";
    if (!fs::exists(inp) || !fs::exists(out)) GTEST_SKIP() << "no " << inp << " or " << out;
    const int n = check_vocab(gguf, inp, out);
    std::printf("%s: %d lines checked\n", GetParam().c_str(), n);
}

// More texts for the same vocabularies, where llama.cpp's cases are thin: other scripts,
// combining marks, Unicode spaces, control characters, digits (tests/data/tokenizer/, with
// how it was made).
TEST_P(VocabTest, ReproducesLlamaCppOnMoreScripts) {
    const fs::path gguf = vocab(GetParam());
    if (gguf.empty()) GTEST_SKIP() << missing(GetParam());
    const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "tokenizer" /
                          "vocab-cases-llama-cpp.json";
    std::ifstream in(data);
    ASSERT_TRUE(in) << data;
    const auto j = nlohmann::json::parse(in);
    const auto& texts = j.at("texts");
    const auto& ids = j.at("ids").at(GetParam());
    ASSERT_EQ(texts.size(), ids.size());
    auto f = GgufFile::open(gguf.string());
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok()) << t.error();
    for (size_t i = 0; i < texts.size(); ++i) {
        const std::string text = texts[i];
        EXPECT_EQ(show((*t)->tokenize(text, false, false)),
                  show(ids[i].get<std::vector<int32_t>>()))
            << GetParam() << ": \"" << text << "\"";
    }
}

INSTANTIATE_TEST_SUITE_P(Reference, VocabTest,
                         ::testing::Values("llama-bpe", "llama-spm", "phi-3", "qwen2", "qwen35",
                                           "gemma-4", "bert-bge", "gpt-2", "deepseek-llm",
                                           "deepseek-coder", "falcon", "starcoder", "refact",
                                           "command-r", "mpt"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s)
                                 if (c == '-') c = '_';
                             return s;
                         });

// The same cases against the vocabulary of the real Qwen2.5 models we ship.
TEST(RealVocab, Qwen2ReproducesLlamaCppTokenization) {
    const fs::path model = test::qwen_model();
    if (model.empty())
        GTEST_SKIP() << "no Qwen2.5 model in " << test::models_dir()
                     << " (scripts/fetch-models.sh qwen2.5-coder-0.5b fetches one)";
    const fs::path inp = test::vocab_file("ggml-vocab-qwen2.gguf.inp");
    const fs::path out = test::vocab_file("ggml-vocab-qwen2.gguf.out");
    if (inp.empty() || out.empty())
        GTEST_SKIP() << "no ggml-vocab-qwen2.gguf.inp/.out (scripts/fetch-vocabs.sh)";
    const int n = check_vocab(model, inp, out);
    std::printf("qwen2 (%s): %d lines checked\n", model.filename().c_str(), n);
}

// GPT-4o's pre-tokenizer (Phi-4-mini's o200k vocabulary; no llama.cpp fixture has it): the
// words Python's `regex` module gives for tokenizer.json's expression.
TEST(PreTokenizer, Gpt4oSplitsAsItsTokenizerJsonDoes) {
    auto p = PreTokenizer::create("gpt-4o");
    ASSERT_TRUE(p.ok()) << p.error();
    auto words = [&](std::string_view t) {
        std::vector<std::string> out;
        for (auto w : (*p)->split(t)) out.emplace_back(w);
        return out;
    };
    using V = std::vector<std::string>;
    EXPECT_EQ(words("Hello World's HTTPServer 1234567 ok!!\n\n  x"),
              (V{"Hello", " World's", " HTTPServer", " ", "123", "456", "7", " ok", "!!\n\n", " ", " x"}));
    EXPECT_EQ(words("naïve café déjà-vu // path/to\tTAB"),
              (V{"naïve", " café", " déjà", "-vu", " //", " path", "/to", "\tTAB"}));
    EXPECT_EQ(words("CamelCaseWORDS and I'M here"),
              (V{"Camel", "Case", "WORDS", " and", " I'M", " here"}));
}

// A vocabulary naming a pre-tokenizer we do not know is refused, by name: tokenizing with
// another family's expressions would give ids the model was not trained on.
TEST(Tokenizer, RefusesAnUnknownPreTokenizerByName) {
    test::TempDir dir;
    const fs::path path = dir.path / "vocab.gguf";
    GgufWriter w;
    w.set("general.architecture", gguf_value("llama"));
    w.set("tokenizer.ggml.model", gguf_value("gpt2"));
    w.set("tokenizer.ggml.pre", gguf_value("no-such-pre"));
    w.set("tokenizer.ggml.tokens", gguf_value(gguf_string_array({"a", "b", "ab"})));
    w.set("tokenizer.ggml.merges", gguf_value(gguf_string_array({"a b"})));
    ASSERT_TRUE(w.write(path.string()).ok());
    auto f = GgufFile::open(path.string());
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = Tokenizer::load(**f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find("\"no-such-pre\""), std::string::npos) << t.error();
    EXPECT_NE(t.error().find("tokenizer.ggml.pre"), std::string::npos) << t.error();

    // A known name loads (the same file otherwise).
    w.set("tokenizer.ggml.pre", gguf_value("qwen2"));
    ASSERT_TRUE(w.write(path.string()).ok());
    auto g = GgufFile::open(path.string());
    ASSERT_TRUE(g.ok()) << g.error();
    auto u = Tokenizer::load(**g);
    ASSERT_TRUE(u.ok()) << u.error();
    EXPECT_EQ((*u)->tokenize("ab", false, false), std::vector<int32_t>{2});
}

// What "add special tokens" adds, per family, as llama.cpp does: Llama 3's BOS although its
// vocabulary does not say add_bos_token, Gemma 4's BOS, BERT's [CLS] ... [SEP], nothing
// for Qwen 2.
TEST(Tokenizer, AddsEachFamilysSpecialTokens) {
    const std::vector<std::pair<std::string, std::vector<int32_t>>> want = {
        {"llama-bpe", {128000, 9906, 1917}},
        {"gemma-4", {2, 9259, 1902}},
        {"bert-bge", {101, 7592, 2088, 102}},
        {"qwen2", {9707, 1879}},
    };
    for (const auto& [name, ids] : want) {
        const fs::path gguf = vocab(name);
        if (gguf.empty()) GTEST_SKIP() << missing(name);
        auto f = GgufFile::open(gguf.string());
        ASSERT_TRUE(f.ok()) << f.error();
        auto t = Tokenizer::load(**f);
        ASSERT_TRUE(t.ok()) << t.error();
        EXPECT_EQ((*t)->tokenize("Hello world", true, false), ids) << name;
    }
}

TEST(Tokenizer, RoundTripsText) {
    for (const char* name : {"gpt-2", "llama-spm", "deepseek-llm", "llama-bpe", "gemma-4"}) {
        const fs::path gguf = vocab(name);
        if (gguf.empty()) GTEST_SKIP() << missing(name);
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
    const fs::path gguf = vocab("llama-spm");
    if (gguf.empty()) GTEST_SKIP() << missing("llama-spm");
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
    const fs::path gguf = vocab("phi-3");
    if (gguf.empty()) GTEST_SKIP() << missing("phi-3");
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
    const fs::path gguf = vocab("gpt-2");
    if (gguf.empty()) GTEST_SKIP() << missing("gpt-2");
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
