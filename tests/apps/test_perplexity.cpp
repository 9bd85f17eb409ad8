// edgellm perplexity: llama.cpp's chunked perplexity and the KL divergence from a saved
// reference, on the tiny golden models. Runs the real binary.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "cli_runner.h"
#include "test_paths.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "edgellm/model.h"
#include "edgellm/tokenizer.h"

namespace fs = std::filesystem;

namespace {

const fs::path kGolden = edgellm::test::golden_dir();

using edgellm::test::lines;
using edgellm::test::Outcome;
using edgellm::test::run;

// The number after "<key>" at the start of a line of out; NaN when there is no such line.
double value(const std::string& out, const std::string& key) {
    for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
        if (at == 0 || out[at - 1] == '\n')
            return std::strtod(out.c_str() + at + key.size(), nullptr);
    return std::nan("");
}

// The uncertainty after "<key> X +/- ".
double uncertainty(const std::string& out, const std::string& key) {
    for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1)) {
        if (at != 0 && out[at - 1] != '\n') continue;
        const size_t pm = out.find("+/- ", at);
        if (pm == std::string::npos) break;
        return std::strtod(out.c_str() + pm + 4, nullptr);
    }
    return std::nan("");
}

// The preface of The Adventures of Tom Sawyer (Mark Twain, 1876; public domain). The tiny
// models' vocabulary is byte-level, so this is about 900 tokens: 14 chunks of 64.
const char* kText =
    "MOST of the adventures recorded in this book really occurred; one or\n"
    "two were experiences of my own, the rest those of boys who were\n"
    "schoolmates of mine. Huck Finn is drawn from life; Tom Sawyer also, but\n"
    "not from an individual--he is a combination of the characteristics of\n"
    "three boys whom I knew, and therefore belongs to the composite order of\n"
    "architecture.\n\n"
    "The odd superstitions touched upon were all prevalent among children\n"
    "and slaves in the West at the period of this story--that is to say,\n"
    "thirty or forty years ago.\n\n"
    "Although my book is intended mainly for the entertainment of boys and\n"
    "girls, I hope it will not be shunned by men and women on that account,\n"
    "for part of my plan has been to try to pleasantly remind adults of what\n"
    "they once were themselves, and of how they felt and thought and talked,\n"
    "and what queer enterprises they sometimes engaged in.\n";

fs::path write_file(const std::string& name, const std::string& text) {
    const fs::path path = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

std::string model(const char* name) {
    return (kGolden / name).string();
}

// Text drawn from a model's own distribution, restricted to the tokens that are one
// printable ASCII byte (those are what the byte-level vocabulary tokenizes text into, so
// the text tokenizes back to the same tokens). Each n_ctx-token chunk is drawn from an empty
// context, as perplexity evaluates it. A random-weight model knows nothing of English, so on
// English text quantization noise moves its perplexity either way; on its own samples the
// model itself is the best predictor (Gibbs' inequality), and a noisier copy does worse.
std::string sample_text(const std::string& path, int n_chunks, int n_ctx, uint32_t seed) {
    using namespace edgellm;
    auto m = Model::load(path);
    EDGELLM_ASSERT(m.ok(), "model");
    auto tok = Tokenizer::load((*m)->file());
    EDGELLM_ASSERT(tok.ok(), "tokenizer");
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < (*tok)->n_vocab(); ++id) {
        const std::string piece = (*tok)->token_to_piece(id, false);
        if (piece.size() == 1 && piece[0] >= 0x20 && piece[0] < 0x7f) allowed.push_back(id);
    }
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    auto ctx = Context::create(**m, cp);
    EDGELLM_ASSERT(ctx.ok(), "context");
    std::mt19937 rng(seed);
    std::string text;
    std::vector<double> p(allowed.size());
    for (int c = 0; c < n_chunks; ++c) {
        (*ctx)->truncate(0);
        int32_t t = allowed[rng() % allowed.size()];
        text += (*tok)->token_to_piece(t, false);
        for (int i = 1; i < n_ctx; ++i) {
            auto logits = (*ctx)->eval(std::span<const int32_t>(&t, 1), false);
            EDGELLM_ASSERT(logits.ok(), "eval");
            double mx = -1e30, sum = 0;
            for (int32_t id : allowed) mx = std::max(mx, (double)(*logits)[(size_t)id]);
            for (size_t j = 0; j < allowed.size(); ++j)
                sum += p[j] = std::exp((double)(*logits)[(size_t)allowed[j]] - mx);
            double u = (double)rng() / 4294967296.0 * sum;
            size_t j = 0;
            while (j + 1 < allowed.size() && (u -= p[j]) > 0) ++j;
            t = allowed[j];
            text += (*tok)->token_to_piece(t, false);
        }
    }
    return text;
}

class Perplexity : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!fs::exists(kGolden / "tiny-qwen2-f32.gguf"))
            GTEST_SKIP() << "no golden models at " << kGolden;
        text_ = write_file("edgellm_ppl_text", kText);
    }
    void TearDown() override {
        if (!text_.empty()) fs::remove(text_);
    }
    // -c 64, 6 chunks: 6 x 31 scored positions.
    Outcome ppl(const char* m, const std::string& extra = "") {
        return run("perplexity -m " + model(m) + " -f " + text_.string() +
                   " -c 64 --chunks 6 -t 2 " + extra);
    }
    fs::path text_;
};

}  // namespace

TEST(PerplexityArgs, BadUsageExitsTwoWithOneLine) {
    for (const char* args : {
             "perplexity -m x.gguf",                                    // no text
             "perplexity -m x.gguf -f t.txt -c 4",                      // chunk too small to score
             "perplexity -m x.gguf -f t.txt -c many",                   // not a number
             "perplexity -m x.gguf -f t.txt --chunks 0",                // nothing to do
             "perplexity -m x.gguf -f t.txt --kv-type q2_K",            // unsupported KV type
             "perplexity -m x.gguf -f t.txt --bogus",                   // unknown option
             "perplexity -m x.gguf -f t.txt extra",                     // stray argument
             "perplexity -m x.gguf -f t.txt --kl-save a --kl-base b",   // both directions
             "perplexity -m x.gguf -f t.txt --kl-top-k 8",              // without --kl-save
             "perplexity -m x.gguf -f t.txt --kl-save a --kl-top-k 0",  // keeps nothing
         }) {
        const Outcome r = run(args);
        EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
        EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
    }
}

TEST_F(Perplexity, TextShorterThanOneChunkIsRefused) {
    const fs::path shorty = write_file("edgellm_ppl_short", "Too short for a chunk of 64.");
    const fs::path kl = fs::temp_directory_path() / "edgellm_ppl_never.kl";
    const Outcome r = run("perplexity -m " + model("tiny-qwen2-f32.gguf") + " -f " +
                          shorty.string() + " -c 64 --kl-save " + kl.string());
    fs::remove(shorty);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("fewer than one chunk"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(kl));
}

TEST_F(Perplexity, FiniteWithAnUncertaintyAndIndependentOfBatching) {
    const Outcome f32 = ppl("tiny-qwen2-f32.gguf");
    ASSERT_EQ(f32.code, 0) << f32.err;
    const double p = value(f32.out, "PPL = "), d = uncertainty(f32.out, "PPL = ");
    ASSERT_TRUE(std::isfinite(p) && p > 1.0) << f32.out;
    EXPECT_TRUE(std::isfinite(d) && d > 0 && d < p) << f32.out;
    // Progress per chunk on stderr.
    EXPECT_NE(f32.err.find("[chunk 1/6] ppl so far"), std::string::npos) << f32.err;
    EXPECT_NE(f32.err.find("[chunk 6/6] ppl so far"), std::string::npos) << f32.err;
    // The batch size and thread count change how the work is split, not the result.
    const Outcome small_batch = ppl("tiny-qwen2-f32.gguf", "-b 16 -t 1");
    ASSERT_EQ(small_batch.code, 0) << small_batch.err;
    EXPECT_NEAR(value(small_batch.out, "PPL = "), p, 1e-3 * p);
    const Outcome q2 = ppl("tiny-qwen2-q2_k.gguf");
    ASSERT_EQ(q2.code, 0) << q2.err;
    EXPECT_TRUE(std::isfinite(value(q2.out, "PPL = "))) << q2.out;
}

TEST_F(Perplexity, QuantizedModelIsMorePerplexedOnTheReferenceText) {
    // 8 chunks of 64 drawn from the f32 model: 8 x 31 scored positions.
    const fs::path sample =
        write_file("edgellm_ppl_sample", sample_text(model("tiny-qwen2-f32.gguf"), 8, 64, 1234));
    const auto measure = [&](const char* m) {
        const Outcome r =
            run("perplexity -m " + model(m) + " -f " + sample.string() + " -c 64 -t 2");
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_NE(r.err.find("512 tokens; 8 chunks of 64"), std::string::npos) << r.err;
        return value(r.out, "PPL = ");
    };
    const double p_f32 = measure("tiny-qwen2-f32.gguf");
    const double p_q8 = measure("tiny-qwen2-q8_0.gguf");
    const double p_q2 = measure("tiny-qwen2-q2_k.gguf");
    fs::remove(sample);
    ASSERT_TRUE(std::isfinite(p_f32) && std::isfinite(p_q8) && std::isfinite(p_q2));
    std::printf("ppl on the f32 model's own text: f32 %.2f, q8_0 %.2f, q2_k %.2f\n", p_f32, p_q8,
                p_q2);
    EXPECT_GT(p_q2, p_f32);
    EXPECT_GT(p_q2, p_q8);
    // Scored at the right positions the model knows its own text: below a uniform guess
    // over its 4096 tokens (about 2500 across seeds). Logits of position i scored against
    // token i or i+2 know nothing of it, like English text (about 7000-10000).
    EXPECT_LT(p_f32, 4096.0);
}

TEST_F(Perplexity, KlDivergenceRanksQuantTypes) {
    const fs::path kl =
        fs::temp_directory_path() / ("edgellm_ppl_" + std::to_string(getpid()) + ".kl");
    const Outcome ref = ppl("tiny-qwen2-f32.gguf", "--kl-save " + kl.string());
    ASSERT_EQ(ref.code, 0) << ref.err;
    ASSERT_TRUE(fs::exists(kl));
    // Header (48 bytes) + 6 x 64 tokens + 6 x 31 records of (2 + 2 x 32) x 4 bytes.
    EXPECT_EQ(fs::file_size(kl), 48u + 6 * 64 * 4 + 6 * 31 * (8 + 8 * 32));
    for (const auto& e : fs::directory_iterator(kl.parent_path()))
        EXPECT_EQ(e.path().string().find(kl.string() + ".tmp"), std::string::npos) << e.path();

    // The reference against itself: no divergence, full agreement, the same perplexity.
    const Outcome self = ppl("tiny-qwen2-f32.gguf", "--kl-base " + kl.string());
    ASSERT_EQ(self.code, 0) << self.err;
    EXPECT_LT(std::fabs(value(self.out, "mean KLD = ")), 1e-5) << self.out;
    EXPECT_DOUBLE_EQ(value(self.out, "top-1 agreement = "), 100.0) << self.out;
    EXPECT_NEAR(value(self.out, "PPL ratio = "), 1.0, 1e-5) << self.out;
    EXPECT_NEAR(value(self.out, "reference PPL = "), value(ref.out, "PPL = "),
                1e-4 * value(ref.out, "PPL = "));

    const Outcome q8 = ppl("tiny-qwen2-q8_0.gguf", "--kl-base " + kl.string());
    ASSERT_EQ(q8.code, 0) << q8.err;
    // Without -f the saved tokens are used.
    const Outcome q2 =
        run("perplexity -m " + model("tiny-qwen2-q2_k.gguf") + " -t 2 --kl-base " + kl.string());
    ASSERT_EQ(q2.code, 0) << q2.err;
    const double kld_q8 = value(q8.out, "mean KLD = "), kld_q2 = value(q2.out, "mean KLD = ");
    ASSERT_TRUE(std::isfinite(kld_q8) && std::isfinite(kld_q2)) << q8.out << q2.out;
    EXPECT_GT(kld_q8, 0.0);
    EXPECT_LT(kld_q8, kld_q2) << q8.out << q2.out;
    EXPECT_GT(value(q8.out, "top-1 agreement = "), value(q2.out, "top-1 agreement = "))
        << q8.out << q2.out;
    EXPECT_GT(uncertainty(q2.out, "mean KLD = "), 0.0) << q2.out;
    EXPECT_GE(value(q2.out, "99th percentile KLD = "), kld_q2) << q2.out;
    const double ratio = value(q2.out, "PPL ratio = ");
    EXPECT_NEAR(ratio, value(q2.out, "PPL = ") / value(q2.out, "reference PPL = "), 1e-3 * ratio);

    // Fewer tokens kept lump more of the distribution together: the KL over a coarser
    // partition is never larger (its top 8 are inside its top 32).
    const fs::path kl8 = fs::path(kl.string() + "8");
    ASSERT_EQ(ppl("tiny-qwen2-f32.gguf", "--kl-top-k 8 --kl-save " + kl8.string()).code, 0);
    EXPECT_EQ(fs::file_size(kl8), 48u + 6 * 64 * 4 + 6 * 31 * (8 + 8 * 8));
    const Outcome q2_8 = ppl("tiny-qwen2-q2_k.gguf", "--kl-base " + kl8.string());
    ASSERT_EQ(q2_8.code, 0) << q2_8.err;
    const double kld_q2_8 = value(q2_8.out, "mean KLD = ");
    EXPECT_GT(kld_q2_8, 0.0);
    EXPECT_LE(kld_q2_8, kld_q2 * (1 + 1e-6)) << q2_8.out << q2.out;
    fs::remove(kl8);
    fs::remove(kl);
}

TEST_F(Perplexity, MismatchedOrDamagedKlFileIsRefused) {
    const fs::path kl =
        fs::temp_directory_path() / ("edgellm_ppl_" + std::to_string(getpid()) + ".kl");
    ASSERT_EQ(ppl("tiny-qwen2-f32.gguf", "--kl-save " + kl.string()).code, 0);
    std::string bytes;
    {
        std::ifstream in(kl, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto refused = [&](const std::string& args, const char* why) {
        const Outcome r = ppl("tiny-qwen2-q8_0.gguf", args);
        EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
        EXPECT_EQ(lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    };
    const fs::path bad =
        fs::temp_directory_path() / ("edgellm_ppl_bad_" + std::to_string(getpid()));
    const auto write_bad = [&](const std::string& b) { std::ofstream(bad, std::ios::binary) << b; };

    write_bad(bytes.substr(0, bytes.size() - 100));
    refused("--kl-base " + bad.string(), "truncated");
    write_bad(bytes.substr(0, 20));
    refused("--kl-base " + bad.string(), "not a KL file");
    write_bad(std::string(kText));
    refused("--kl-base " + bad.string(), "not a KL file");

    std::string other_vocab = bytes;
    const uint32_t n_vocab = 32000;  // header offset 12
    std::memcpy(other_vocab.data() + 12, &n_vocab, 4);
    write_bad(other_vocab);
    refused("--kl-base " + bad.string(), "vocabulary of 32000 tokens");

    std::string other_tokens = bytes;
    other_tokens[48] ^= 1;  // the first token
    write_bad(other_tokens);
    refused("--kl-base " + bad.string(), "does not tokenize to the tokens saved");

    const Outcome other_ctx =
        run("perplexity -m " + model("tiny-qwen2-q8_0.gguf") + " -c 32 --kl-base " + kl.string());
    EXPECT_EQ(other_ctx.code, 1) << other_ctx.err;
    EXPECT_NE(other_ctx.err.find("saved with -c 64"), std::string::npos) << other_ctx.err;
    fs::remove(bad);
    fs::remove(kl);
}

// Gemma 3 270M, the real model a package ships, against llama.cpp's perplexity of the same
// file on the same text: chunks of 1024 tokens cross its 512-position sliding window, so
// this checks the local/global layer pattern, both RoPE bases, the q/k norms, post-norms,
// GELU, scaled embeddings and its SentencePiece vocabulary together.
// Reference: llama.cpp mainline (the source of PyPI's llama-cpp-python 0.3.36, built here
// with GGML_NATIVE=ON), `llama-perplexity -m gemma-3-270m-q4_k_m.gguf -f
// Mark.Twain-Tom.Sawyer.txt -c 1024 --chunks 2 -t 2`: PPL = 33.3829 +/- 3.31096.
TEST(PerplexityRealModel, Gemma3MatchesLlamaCpp) {
    const fs::path model = edgellm::test::real_model({"gemma-3-270m-q4_k_m.gguf"});
    const fs::path text =
        "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/Mark.Twain-Tom.Sawyer.txt";
    if (model.empty())
        GTEST_SKIP() << "no Gemma 3 270M in " << edgellm::test::models_dir()
                     << " (scripts/fetch-models.sh gemma3-270m)";
    if (!fs::exists(text)) GTEST_SKIP() << "no " << text << " (scripts/setup.sh installs it)";
    const Outcome r = run("perplexity -m " + model.string() + " -f " + text.string() +
                          " -c 1024 --chunks 2 -t 2");
    ASSERT_EQ(r.code, 0) << r.err;
    const double ppl = value(r.out, "PPL = ");
    EXPECT_NEAR(ppl, 33.3829, 33.3829 * 0.01) << r.out;
}
