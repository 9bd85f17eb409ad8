// The edgellm binary's contracts: exit codes, one-line reasons, the logits file layout and
// an inspect memory bill that adds up. Runs the real binary.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "cli_runner.h"
#include "test_paths.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include "edgellm/gguf.h"
#include "kernels/kernels.h"

namespace fs = std::filesystem;

namespace {

const fs::path kGolden = edgellm::test::golden_dir();

using edgellm::test::lines;
using edgellm::test::Outcome;
using edgellm::test::run;

const char* kTokens = "1936 2094 3090 3890 142 590 3368 3882";

// The bytes on inspect's memory bill line that starts with label (-1: no such line).
long long bill_field(const std::string& out, const std::string& label) {
    std::smatch m;
    const std::regex re(label + R"(\s+(\d+) bytes)");
    if (!std::regex_search(out, m, re)) return -1;
    return std::stoll(m[1]);
}

}  // namespace

TEST(Cli, UsageErrorsExitTwoWithOneLine) {
    Outcome r = run("");
    EXPECT_EQ(r.code, 2);
    r = run("frobnicate");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    r = run("logits --tokens \"1 2\" --out /tmp/x.f32");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(lines(r.err), 1);
    EXPECT_NE(r.err.find("-m"), std::string::npos) << r.err;
    r = run("logits -m x.gguf --tokens \"1 2\" --out /tmp/x.f32 --bogus");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
    r = run("logits -m x.gguf --tokens \"1 two\" --out /tmp/x.f32");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("two"), std::string::npos) << r.err;
    r = run("logits -m x.gguf --tokens \"1\" --out /tmp/x.f32 --kv-type q2_K");
    EXPECT_EQ(r.code, 2);
    r = run("inspect");
    EXPECT_EQ(r.code, 2);
    r = run("inspect x.gguf -c -5");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(lines(r.err), 1);
}

// Tools that write, on an address other machines reach, without a key: refused before
// anything starts, naming what would be exposed and the ways out; a key, a loopback address
// or --tools-allow-remote let serve go on (--list-devices: it stops right after its checks).
TEST(Cli, ServeRefusesToolsThatWriteOnAnOpenHostWithoutAKey) {
    Outcome r = run("serve --host 0.0.0.0 --tools all --list-devices");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    for (const char* says : {"exec_shell_command", "write_file", "on 0.0.0.0", "run commands",
                             "--api-key", "127.0.0.1", "--tools-allow-remote"})
        EXPECT_NE(r.err.find(says), std::string::npos) << says << ": " << r.err;
    r = run("serve --host 127.0.0.1,:: --tools write_file --list-devices");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("write files"), std::string::npos) << r.err;
    EXPECT_EQ(run("serve --host 0.0.0.0 --tools all --api-key k --list-devices").code, 0);
    EXPECT_EQ(run("serve --host 0.0.0.0 --tools all --tools-allow-remote --list-devices").code, 0);
    EXPECT_EQ(run("serve --host 127.0.0.5,::1,localhost --tools all --list-devices").code, 0);
    EXPECT_EQ(run("serve --host 0.0.0.0 --tools read_file,grep_search --list-devices").code, 0);
}

// docs/options.md is what `edgellm help --markdown` writes from the option table; each
// command's --help lists every option of its section there, and no name is two options'.
TEST(Cli, OptionsPageIsTheTableAndEachHelpListsItsOptions) {
    Outcome r = run("help --markdown");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(fs::path(EDGELLM_SOURCE_DIR) / "docs" / "options.md", std::ios::binary);
    const std::string committed((std::istreambuf_iterator<char>(in)), {});
    if (r.out != committed) {  // (the first line that differs, not both pages)
        std::istringstream ours(r.out), theirs(committed);
        std::string a, b;
        int line = 1;
        while (std::getline(ours, a) && std::getline(theirs, b) && a == b) ++line;
        ADD_FAILURE() << "docs/options.md is not what the option table writes (edgellm help --markdown > "
                         "docs/options.md); line "
                      << line << ":\n  the table: " << a << "\n  the file:  " << b;
    }
    std::string command, help;
    std::set<std::string> names;
    int rows = 0;
    std::istringstream page(r.out);
    const std::regex name_re("`([^`]+)`");
    for (std::string line; std::getline(page, line);) {
        if (line.rfind("## edgellm ", 0) == 0) {  // a command's section
            command = line.substr(11);
            const Outcome h = run(command + " --help");
            ASSERT_EQ(h.code, 0) << command << ": " << h.err;
            help = h.out;
            names.clear();
            continue;
        }
        if (command.empty() || line.rfind("| `-", 0) != 0) continue;
        const std::string cell = line.substr(2, line.find(" |", 2) - 2);  // `-m`, `--model`
        std::string listed;
        for (auto it = std::sregex_iterator(cell.begin(), cell.end(), name_re); it != std::sregex_iterator(); ++it) {
            const std::string name = (*it)[1];
            EXPECT_TRUE(names.insert(name).second) << command << ": " << name << " names two options";
            listed += (listed.empty() ? "" : ", ") + name;
        }
        const size_t at = help.find("\n  " + listed);
        const size_t after = at + 3 + listed.size();
        EXPECT_TRUE(at != std::string::npos && after < help.size() && (help[after] == ' ' || help[after] == '\n'))
            << command << " --help does not list " << listed;
        ++rows;
    }
    EXPECT_GT(rows, 200);
}

TEST(Cli, BadFilesExitOneWithReason) {
    Outcome r = run("inspect /nonexistent/model.gguf");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(lines(r.err), 1);
    EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;

    // A model cut in half: refused with the field and byte offset, not a crash.
    const fs::path src = kGolden / "tiny-qwen2-q4_k_m.gguf";
    if (!fs::exists(src)) GTEST_SKIP() << "no golden models at " << kGolden;
    const fs::path cut = fs::temp_directory_path() / "edgellm_cut.gguf";
    {
        std::ifstream in(src, std::ios::binary);
        std::vector<char> bytes(fs::file_size(src) / 2);
        in.read(bytes.data(), (std::streamsize)bytes.size());
        std::ofstream out(cut, std::ios::binary);
        out.write(bytes.data(), (std::streamsize)bytes.size());
    }
    r = run("logits -m " + cut.string() + " --tokens \"1 2\" --out /tmp/edgellm_never.f32");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("offset"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists("/tmp/edgellm_never.f32"));
    fs::remove(cut);

    r = run("logits -m " + src.string() + " --tokens \"1 99999\" --out /tmp/edgellm_never.f32");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("vocabulary"), std::string::npos) << r.err;
}

TEST(Cli, LogitsWritesEveryPositionAsFloat32) {
    const fs::path model = kGolden / "tiny-qwen2-f32.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no golden models at " << kGolden;
    const fs::path out = fs::temp_directory_path() / "edgellm_cli_logits.f32";
    Outcome r = run("logits -m " + model.string() + " --tokens \"" + kTokens + "\" --out " +
                    out.string() + " -t 2");
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_EQ(fs::file_size(out), 8u * 4096 * 4);
    // The golden sequence starts with the same 8 tokens; causal attention makes our first
    // 8 positions comparable with the golden's first 8 rows.
    std::vector<float> ours(8 * 4096), gold(8 * 4096);
    std::ifstream(out, std::ios::binary)
        .read((char*)ours.data(), (std::streamsize)(ours.size() * 4));
    std::ifstream(kGolden / "tiny-qwen2-f32.public.f32", std::ios::binary)
        .read((char*)gold.data(), (std::streamsize)(gold.size() * 4));
    double num = 0, den = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
        num += (ours[i] - gold[i]) * (ours[i] - gold[i]);
        den += gold[i] * gold[i];
    }
    EXPECT_LT(std::sqrt(num / den), 3e-3);
    fs::remove(out);
}

TEST(Cli, InspectMemoryBillAddsUp) {
    for (const char* name :
         {"tiny-qwen2-q4_k_m.gguf", "tiny-llama-q8_0.gguf", "tiny-qwen2tied-f32.gguf"}) {
        const fs::path model = kGolden / name;
        if (!fs::exists(model)) GTEST_SKIP() << "no golden models at " << kGolden;
        Outcome r = run("inspect " + model.string() + " -c 1000 --kv-type q8_0");
        ASSERT_EQ(r.code, 0) << r.err;
        auto field = [&](const std::string& label) { return bill_field(r.out, label); };
        auto f = edgellm::GgufFile::open(model.string());
        ASSERT_TRUE(f.ok());
        EXPECT_EQ(field("weights"), (long long)(*f)->tensor_bytes()) << name;
        // 4 layers, 2 KV heads x 32 dims = 64 elements = 2 q8_0 blocks of 34 bytes per row
        EXPECT_EQ(field("kv cache"), 2LL * 4 * 1000 * 68) << name;
        EXPECT_EQ(field("total"), field("weights") + field("kv cache") + field("scratch")) << name;
        EXPECT_NE(r.out.find("kernels:"), std::string::npos);
        EXPECT_NE(r.out.find("blk.3.ffn_down.weight"), std::string::npos);
    }
}

// Gemma 4's bill: the per-layer token table apart from the weights (read lazily, not in
// the total), the KV cache of the six layers with their own (four sliding layers in rings
// of window + batch cells), the layers that read another's named.
TEST(Cli, InspectBillsGemma4sTableApart) {
    const fs::path model = fs::temp_directory_path() / "edgellm_cli_gemma4.gguf";
    Outcome r = run("synth --shape tiny-gemma4 --type Q8_0 -o " + model.string());
    ASSERT_EQ(r.code, 0) << r.err;
    r = run("inspect " + model.string() + " -c 1000 --kv-type q8_0 --no-tensors");
    ASSERT_EQ(r.code, 0) << r.err;
    auto field = [&](const std::string& label) { return bill_field(r.out, label); };
    auto f = edgellm::GgufFile::open(model.string());
    ASSERT_TRUE(f.ok());
    const auto* table = (*f)->tensor("per_layer_token_embd.weight");
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(field("read lazily, apart:"), (long long)table->n_bytes) << r.out;
    EXPECT_EQ(field("weights"), (long long)((*f)->tensor_bytes() - table->n_bytes));
    // q8_0 rows of 64 values (2 heads of 32 sliding, 1 of 64 global): 2 blocks, 68 bytes;
    // K and V; sliding layers 0, 1, 3, 4 in rings of 8 + 512 cells, global 2, 5 in 1000
    EXPECT_EQ(field("kv cache"), 2LL * 68 * (4 * 520 + 2 * 1000));
    EXPECT_EQ(field("total"), field("weights") + field("kv cache") + field("scratch"));
    EXPECT_NE(r.out.find("6->4, 7->4, 8->5"), std::string::npos) << r.out;
    fs::remove(model);
}

TEST(Cli, TokenizeAndDetokenizeRoundTrip) {
    const fs::path model = kGolden / "tiny-qwen2-q4_k_m.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no golden models at " << kGolden;
    Outcome r = run("tokenize -m " + model.string() + " -p 'hello world'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(lines(r.out), 1);
    const std::string ids = r.out.substr(0, r.out.size() - 1);
    EXPECT_FALSE(ids.empty());
    r = run("detokenize -m " + model.string() + " --tokens '" + ids + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "hello world\n");
    r = run("detokenize -m " + model.string() + " --tokens '1 999999'");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
    r = run("tokenize -m " + model.string());
    EXPECT_EQ(r.code, 2);
}

TEST(Cli, RunGeneratesAndReportsTimings) {
    const fs::path model = kGolden / "tiny-llama-q8_0.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no golden models at " << kGolden;
    Outcome r = run("run -m " + model.string() + " -p 'abc' -n 7 --temp 0 --ignore-eos -t 1");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("abc", 0), 0u) << r.out;  // the prompt, then the continuation
    EXPECT_NE(r.err.find("generated 7 tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    r = run("run -m " + model.string() + " -p 'abc' --temp hot");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--temp"), std::string::npos) << r.err;
}

// run takes llama.cpp's grammar and sampling flags: a grammar constrains the continuation
// (and ends it where the grammar ends); a bad grammar or schema, or DRY, exits 2 naming why.
TEST(Cli, RunHonoursGrammarFlagsOrRefusesThem) {
    const fs::path model = kGolden / "tiny-llama-q8_0.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no golden models at " << kGolden;
    const std::string m = "run -m " + model.string() + " -p 'abc' -n 12 --temp 0 -t 1 ";
    Outcome r = run(m + "--grammar 'root ::= \" xyz\" [0-9]{2}'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "abc xyz" + r.out.substr(7)) << r.out;
    ASSERT_EQ(r.out.size(), 10u) << r.out;  // "abc" + " xyz" + two digits, then the end
    EXPECT_TRUE(isdigit((unsigned char)r.out[7]) && isdigit((unsigned char)r.out[8])) << r.out;
    EXPECT_NE(r.err.find("stop: eos"), std::string::npos) << r.err;
    r = run(m + "-j '{\"enum\": [\"yes\", \"no\"]}' --temp 1 -s 4");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.out == "abc\"yes\"\n" || r.out == "abc\"no\"\n") << r.out;
    r = run(m + "--grammar 'root ::= \"a\" b'");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("line 1, column 14"), std::string::npos) << r.err;
    r = run(m + "-j '{\"type\": \"string\", \"format\": \"uri\"}'");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("$.format"), std::string::npos) << r.err;
    r = run(m + "--dry-multiplier 0.8");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--dry-multiplier"), std::string::npos) << r.err;
    r = run(m + "--samplers 'top_k;bogus'");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
    r = run(m + "-l 999999+1");
    EXPECT_EQ(r.code, 2) << "a token outside the vocabulary";
}

// A real model from its package answers a plain question (greedy, so it is repeatable).
TEST(RealModel, ChatAnswersAPlainQuestion) {
    const fs::path model = edgellm::test::qwen_model();
    if (model.empty())
        GTEST_SKIP() << "no Qwen2.5 model in " << edgellm::test::models_dir()
                     << " (scripts/fetch-models.sh qwen2.5-coder-0.5b fetches one)";
    Outcome r =
        run("run -m " + model.string() +
            " --chat -p 'What is the capital of France? Answer in one word.' -n 16 --temp 0 -t 2");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("<|im_end|>"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("stop: eos"), std::string::npos) << r.err;
}

// --chat-template-file renders the given template instead of the model's (here a ChatML
// one, so the Qwen model still answers), and a template the interpreter cannot take falls
// back to the built-in format with a warning naming the line and the construct.
TEST(RealModel, ChatTemplateFileReplacesTheModelsOrWarns) {
    const fs::path model = edgellm::test::qwen_model();
    if (model.empty()) GTEST_SKIP() << "no Qwen2.5 model in " << edgellm::test::models_dir();
    const fs::path good = fs::temp_directory_path() / "edgellm_tmpl_good.jinja";
    const fs::path bad = fs::temp_directory_path() / "edgellm_tmpl_bad.jinja";
    std::ofstream(good) << "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                           "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                           "<|im_start|>assistant\n{% endif %}";
    std::ofstream(bad) << "line one\n{% include 'other.jinja' %}";
    const std::string q =
        " --chat -p 'What is the capital of France? Answer in one word.' "
        "-n 16 --temp 0 -t 2";
    Outcome r = run("run -m " + model.string() + q + " --chat-template-file " + good.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    r = run("run -m " + model.string() + q + " --chat-template-file " + bad.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("warning: the given chat template cannot be used (line 2"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("built-in chatml"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
    r = run("run -m " + model.string() + q + " --chat-template-file /nonexistent.jinja");
    EXPECT_EQ(r.code, 2);
    fs::remove(good);
    fs::remove(bad);
}

// The memory bill says how much of the weights was repacked for decode, bench says it
// too, and --no-repack (llama.cpp's flag) keeps the file's layout.
TEST(Cli, RepackingIsReportedAndNoRepackTurnsItOff) {
    const fs::path m = kGolden / "tiny-qwen2-q4_0.gguf";
    if (!fs::exists(m)) GTEST_SKIP() << "no golden models at " << kGolden;
    if (edgellm::available_kernel_sets().back() == "ref")
        GTEST_SKIP() << "no SIMD kernel set here: nothing is repacked";
    Outcome r = run("inspect " + m.string() + " --no-tensors");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("repacked at load for decode"), std::string::npos) << r.out;
    r = run("inspect " + m.string() + " --no-tensors --no-repack");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("repacked"), std::string::npos) << r.out;
    r = run("bench -m " + m.string() + " -p 0 -n 4 -r 1 -t 1 --no-bandwidth");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("MiB of them repacked for decode"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("(0.0 MiB of them repacked"), std::string::npos) << r.out;
    r = run("bench -m " + m.string() + " -p 0 -n 4 -r 1 -t 1 --no-bandwidth -nr");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("(0.0 MiB of them repacked"), std::string::npos) << r.out;
    // --repack-cache: the first run keeps the repacked weights in a file, the next maps it
    // (and says nothing); --no-repack-cache writes none.
    const fs::path dir = fs::temp_directory_path() / ("edgellm-cli-repack-" + std::to_string(getpid()));
    fs::remove_all(dir);
    const std::string bench = "bench -m " + m.string() + " -p 0 -n 4 -r 1 -t 1 --no-bandwidth ";
    r = run(bench + "--repack-cache " + dir.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("kept in " + dir.string()), std::string::npos) << r.err;
    r = run(bench + "--repack-cache " + dir.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("repacked weights"), std::string::npos) << r.err;
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".x16";
    EXPECT_EQ(files, 1);
    fs::remove_all(dir);
    r = run(bench + "--repack-cache " + dir.string() + " --no-repack-cache");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(fs::exists(dir));
    // a cache of repacked weights without repacking: refused, named
    r = run(bench + "--repack-cache " + dir.string() + " --no-repack");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--repack-cache"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir));
}

TEST(Cli, QuantizeShowsProgressAndWritesALoadableFile) {
    const fs::path src = kGolden / "tiny-llama-f32.gguf";
    if (!fs::exists(src)) GTEST_SKIP() << "no golden models at " << kGolden;
    const fs::path out = fs::temp_directory_path() / "edgellm_cli_q4km.gguf";
    Outcome r = run("quantize " + src.string() + " " + out.string() + " Q4_K_M 2");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("blk.3.ffn_down.weight"), std::string::npos)
        << r.err;  // per-tensor progress
    EXPECT_NE(r.err.find("-> q6_K"), std::string::npos) << r.err;
    auto f = edgellm::GgufFile::open(out.string());
    ASSERT_TRUE(f.ok()) << f.error();
    EXPECT_EQ((*f)->get_int("general.file_type"), 15);
    r = run("inspect " + out.string() + " --no-tensors");
    EXPECT_EQ(r.code, 0) << r.err;
    r = run("quantize " + src.string() + " " + src.string() + " Q8_0");
    EXPECT_EQ(r.code, 1);
    r = run("quantize " + src.string() + " " + out.string() + " Q9_X");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("Q4_K_M"), std::string::npos) << r.err;  // lists the types
    fs::remove(out);
}

TEST(Cli, SynthThenBenchReportsJsonRows) {
    const fs::path model = fs::temp_directory_path() / "edgellm_cli_synth.gguf";
    Outcome r = run("synth --arch qwen2 --shape tiny --type Q8_0 -o " + model.string());
    ASSERT_EQ(r.code, 0) << r.err;
    r = run("bench -m " + model.string() + " -p 16 -n 8 -t 1,2 -r 2 -o json --no-bandwidth");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rows = nlohmann::json::parse(r.out);
    ASSERT_EQ(rows.size(), 4u);  // (pp, tg) x (1, 2 threads)
    for (const auto& row : rows) {
        for (const char* key :
             {"model", "n_prompt", "n_gen", "n_threads", "avg_ts", "stddev_ts", "median_ts"})
            EXPECT_TRUE(row.contains(key)) << key;
        EXPECT_GT(row["avg_ts"].get<double>(), 0.0);
        EXPECT_EQ(row["samples_ts"].size(), 2u);
        const double a = row["samples_ts"][0], b = row["samples_ts"][1];
        EXPECT_NEAR(row["median_ts"].get<double>(), (a + b) / 2, 1e-5);  // printed to 6 places
    }
    EXPECT_EQ(rows[0]["test"], "pp16");
    EXPECT_EQ(rows[1]["test"], "tg8");
    EXPECT_EQ(rows[3]["n_threads"], 2);
    EXPECT_TRUE(rows[1].contains("bw_gbps"));
    // pp rows: the matrices' multiply-adds per second and their share of the int8 limit the
    // bench measured for that thread count (a set without an int8 instruction has none)
    for (const auto& row : rows) {
        if (row["n_prompt"].get<int>() == 0) continue;
        EXPECT_GT(row["int8_gmacs"].get<double>(), 0.0);
        if (!edgellm::int8_peak_of(edgellm::default_kernel_set())) continue;
        EXPECT_GT(row["int8_share"].get<double>(), 0.0) << row;
        EXPECT_LT(row["int8_share"].get<double>(), 1.0) << row;
    }
    r = run("bench -m " + model.string() + " -t 0");
    EXPECT_EQ(r.code, 2);
    // a prompt longer than -b goes in forward steps of -b tokens; -b 0 is refused by name
    r = run("bench -m " + model.string() +
            " -p 40 -b 16 -n 0 -t 1 -r 1 -o json --no-bandwidth --no-int8-limit");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto stepped = nlohmann::json::parse(r.out);
    ASSERT_EQ(stepped.size(), 1u);
    EXPECT_EQ(stepped[0]["test"], "pp40");
    EXPECT_GT(stepped[0]["median_ts"].get<double>(), 0.0);
    r = run("bench -m " + model.string() + " -p 40 -b 0");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("-b"), std::string::npos) << r.err;
    r = run("synth --arch gpt9 --shape tiny -o " + model.string());
    EXPECT_EQ(r.code, 2);
    fs::remove(model);
}

// bench --draft / --spec-type: a row per prompt class with plain and speculative speed, the
// accept rate and whether the text was the same; flags it does not use exit 2.
TEST(Cli, BenchSpeculationReportsEachPromptClass) {
    const fs::path model = kGolden / "tiny-qwen2-q8_0.gguf",
                   draft = kGolden / "tiny-qwen2-q2_k.gguf";
    if (!fs::exists(model) || !fs::exists(draft)) GTEST_SKIP() << "no golden models at " << kGolden;
    const std::string m = "bench -m " + model.string() + " -t 1 -n 16 -r 1 ";
    Outcome r =
        run(m + "--draft " + draft.string() + " --spec-type ngram --draft-max 4 --spec-fixed");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("at most 4 (draft model), 4 (ngram)"), std::string::npos) << r.out;
    for (const char* cls :
         {"| chat (zh) |", "| chat (en) |", "| code edit |", "| json |", "| quote |"}) {
        const size_t at = r.out.find(cls);
        ASSERT_NE(at, std::string::npos) << cls << "\n" << r.out;
        const std::string row = r.out.substr(at, r.out.find('\n', at) - at);
        // plain, then the draft model and ngram: speed, speed-up, accept rate, same text
        EXPECT_EQ(std::count(row.begin(), row.end(), '|'), 12) << row;
        EXPECT_EQ(row.find("NO"), std::string::npos) << "speculation changed the text: " << row;
        EXPECT_NE(row.find("yes"), std::string::npos) << row;
    }
    r = run(m + "--spec-type ngram -p 64");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("-p"), std::string::npos) << r.err;
    r = run(m + "--spec-type draft");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--draft MODEL"), std::string::npos) << r.err;
}
