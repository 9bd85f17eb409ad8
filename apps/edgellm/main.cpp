// edgellm: one binary, several subcommands (see README.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commands.h"
#include "edgellm/version.h"
#include "edgellm/kernels.h"

namespace edgellm::cli {

int fail(const std::string& command, const std::string& reason, int code) {
    std::fprintf(stderr, "edgellm %s: %s\n", command.c_str(), reason.c_str());
    return code;
}

std::optional<int> input_text(const std::string& command, const Settings& s, const char* what,
                              std::string* out) {
    if (s.io.text.has_value() == s.io.file.has_value())
        return fail(command, std::string("give exactly one of -p ") + what + " or -f FILE", 2);
    if (s.io.text) {
        *out = *s.io.text;
    } else if (!read_text_file(*s.io.file, out)) {
        return fail(command, *s.io.file + ": cannot read");
    }
    return std::nullopt;
}

std::string choose_kernels(const std::string& requested) {
    std::string name = requested;
    if (name.empty()) {
        const char* env = std::getenv("EDGELLM_KERNELS");
        if (env && *env) name = env;
    }
    if (name.empty()) return {};
    if (!select_kernel_set(name)) {
        std::string avail;
        for (const auto& s : available_kernel_sets()) avail += (avail.empty() ? "" : ", ") + s;
        return "kernel set \"" + name + "\" is not available on this machine (available: " + avail +
               ")";
    }
    return {};
}

}  // namespace edgellm::cli

namespace {

void usage(FILE* out) {
    std::fprintf(
        out,
        "edgellm %s - on-device LLM inference\n\n"
        "usage: edgellm <command> [options]\n\n"
        "commands:\n"
        "  serve               HTTP server: OpenAI and llama-server APIs, chat page at /\n"
        "  accept              seed 000's acceptance table against a server (started here or --url)\n"
        "  run                 generate text from a prompt (--chat: a chat turn)\n"
        "  tokenize            text -> token ids\n"
        "  detokenize          token ids -> text\n"
        "  inspect MODEL       metadata, tensors, kernels and the memory bill\n"
        "  quantize            convert a model to Q4_K_M, Q8_0, ... (llama.cpp's mixes)\n"
        "  convert HF_DIR      a Hugging Face checkpoint to GGUF (llama.cpp's convert_hf_to_gguf.py)\n"
        "  synth               write a model with random weights in a real model's shapes\n"
        "  bench               prompt and generation speed, with the memory bandwidth share\n"
        "  perplexity          perplexity of a text; KL divergence from a saved reference\n"
        "  logits              evaluate token ids and write the logits of every position\n"
        "  version             print the version\n\n"
        "`edgellm <command> --help` describes a command's options.\n",
        EDGELLM_VERSION);
}

}  // namespace

int main(int argc, char** argv) {
    using namespace edgellm::cli;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const std::string cmd = argv[1];
    std::vector<std::string> args(argv + 2, argv + argc);
    if (cmd == "logits") return cmd_logits(args);
    if (cmd == "inspect") return cmd_inspect(args);
    if (cmd == "run") return cmd_run(args);
    if (cmd == "serve") return cmd_serve(args);
    if (cmd == "accept") return cmd_accept(args);
    if (cmd == "perplexity") return cmd_perplexity(args);
    if (cmd == "quantize") return cmd_quantize(args);
    if (cmd == "synth") return cmd_synth(args);
    if (cmd == "convert") return cmd_convert(args);
    if (cmd == "bench") return cmd_bench(args);
    if (cmd == "tokenize") return cmd_tokenize(args);
    if (cmd == "detokenize") return cmd_detokenize(args);
    if (cmd == "version" || cmd == "--version") {
        std::printf("edgellm %s\n", EDGELLM_VERSION);
        return 0;
    }
    if (cmd == "help" && args == std::vector<std::string>{"--markdown"}) {
        // docs/options.md: every command's options, from the option table
        std::printf("%s", options_markdown().c_str());
        return 0;
    }
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
        usage(stdout);
        return 0;
    }
    std::fprintf(stderr, "edgellm: unknown command \"%s\" (see edgellm --help)\n", cmd.c_str());
    return 2;
}
