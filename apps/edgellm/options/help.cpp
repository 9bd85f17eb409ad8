// The commands, and their help and reference page written from the option table.
#include <algorithm>

#include "edgellm/arch.h"
#include "edgellm/quantize.h"
#include "edgellm/synth.h"
#include "options.h"

namespace edgellm::cli {

const char* group_title(Group g) {
    switch (g) {
        case Group::Model:
            return "model";
        case Group::Input:
            return "input";
        case Group::Output:
            return "output";
        case Group::Context:
            return "context and generation";
        case Group::Kv:
            return "KV cache";
        case Group::Cpu:
            return "CPU and memory";
        case Group::Sampling:
            return "sampling";
        case Group::Grammar:
            return "grammar";
        case Group::Chat:
            return "chat template and reasoning";
        case Group::Server:
            return "server";
        case Group::Speculative:
            return "speculative decoding";
        case Group::Router:
            return "router (serve without -m)";
        case Group::Measure:
            return "measurement";
        case Group::Compat:
            return "accepted for llama.cpp's command lines, no effect here";
    }
    return "";
}

std::string file_type_names() {
    std::string types;
    for (FileType t : all_file_types())
        types += std::string(types.empty() ? "" : ", ") + file_type_name(t);
    return types;
}

std::string hf_arch_names() {
    std::string s;
    for (const ArchInfo* a : architectures())
        for (const char* h : a->hf_archs) s += (s.empty() ? "" : ", ") + std::string(h);
    return s;
}

std::string shape_names() {
    std::string shapes;
    for (const auto& s : model_shapes()) shapes += std::string(shapes.empty() ? "" : ", ") + s.name;
    return shapes;
}

namespace {

// The rows of a command in help order: by group, then in table order.
std::vector<const Option*> rows_of(const CommandInfo& c) {
    std::vector<const Option*> rows;
    for (const Option& o : option_table())
        if (o.scope & c.scope) rows.push_back(&o);
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Option* a, const Option* b) { return a->group < b->group; });
    return rows;
}

std::string joined_names(const Option& o) {
    std::string names;
    for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + n;
    return names;
}

// For a markdown table cell: no raw |, < or >.
std::string cell(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '|')
            out += "\\|";
        else if (c == '<')
            out += "&lt;";
        else if (c == '>')
            out += "&gt;";
        else
            out += c;
    }
    return out;
}

}  // namespace

const std::vector<CommandInfo>& commands() {
    // (the order of `edgellm --help`; accept, detokenize, inspect, quantize and synth read
    // their arguments themselves)
    static const std::vector<CommandInfo> all = {
        {"serve", kServeAll, "edgellm serve [-m MODEL] [--host HOST] [--port PORT] [options]",
         check_serve},
        {"accept", kAccept,
         "edgellm accept [options] [-- serve options]\n"
         "       edgellm accept --url http://127.0.0.1:8899 [options]\n\n"
         "Seed 000's acceptance table: decode speed (with the draft model when one is\n"
         "configured), first token of the cold turn and from the third turn on, draft\n"
         "accept rate, resident memory (and the cgroup's), start-up to healthy. Starts\n"
         "`edgellm serve` with the options after `--` (default: seed 000's configuration\n"
         "on the default model, with the 0.5B as draft when it is fetched), or measures a\n"
         "running server (--url; start-up is then not measured). Exit status 0 only when\n"
         "every measured row passes.",
         check_nothing, true},
        {"run", kRun, "edgellm run -m MODEL -p PROMPT [options]", check_run},
        {"tokenize", kTokenize,
         "edgellm tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--parse-special]",
         check_nothing},
        {"detokenize", kDetokenize,
         "edgellm detokenize -m MODEL --tokens \"ID ID ...\" [--special]", check_nothing, true},
        {"inspect", kInspect,
         "edgellm inspect MODEL [-c CTX] [--kv-type T] [-ctk T] [-ctv T] [options]", check_nothing,
         true},
        {"quantize", kQuantize,
         "edgellm quantize IN.gguf OUT.gguf TYPE [THREADS] [options]\n\nTYPE: " + file_type_names(),
         check_nothing, true},
        {"convert", kConvert,
         "edgellm convert HF_DIR [--outfile OUT.gguf] [--outtype f32|f16|bf16|q8_0|auto]\n\n"
         "A Hugging Face checkpoint (config.json, model*.safetensors, the tokenizer's files) to\n"
         "GGUF as llama.cpp's convert_hf_to_gguf.py writes it, for the architectures edgellm\n"
         "runs: " + hf_arch_names() + ".",
         check_nothing, true},
        {"synth", kSynth,
         "edgellm synth --shape NAME [--arch A] -o OUT.gguf [--type T] "
         "[--seed S]\n\nshapes: " +
             shape_names(),
         check_nothing, true},
        {"bench", kBench, "edgellm bench -m MODEL [-p 512] [-n 128] [-t 1,2] [-r 3] [options]",
         check_bench},
        {"perplexity", kPerplexity,
         "edgellm perplexity -m MODEL -f TEXT [-c 512] [--chunks N] "
         "[--kl-save FILE | --kl-base FILE] [options]",
         check_perplexity},
        {"logits", kLogits, "edgellm logits -m MODEL --tokens \"ID ID ...\" --out FILE [options]",
         check_nothing},
    };
    return all;
}

const CommandInfo& command_info(const std::string& name) {
    for (const CommandInfo& c : commands())
        if (name == c.name) return c;
    return commands().front();  // (the commands call it with their own names only)
}

std::string command_help(const CommandInfo& c) {
    std::string out = "usage: " + c.usage + "\n";
    const Option* previous = nullptr;
    for (const Option* o : rows_of(c)) {
        if (!previous || previous->group != o->group)
            out += std::string("\n") + group_title(o->group) + ":\n";
        previous = o;
        std::string names = joined_names(*o);
        if (!o->metavar.empty()) names += " " + o->metavar;
        out += "  " + names;
        out +=
            names.size() < 30 ? std::string(30 - names.size(), ' ') : "\n" + std::string(32, ' ');
        out += o->help;
        if (o->env) out += std::string(" (env: ") + o->env + ")";
        out += "\n";
    }
    out += "\n  -h, --help                    show this help\n";
    return out;
}

std::string options_markdown() {
    std::string out =
        "# edgellm's command-line options\n\n"
        "Written from the option table (`apps/edgellm/options/`) by `edgellm help --markdown`;\n"
        "`tests/apps/test_cli.cpp` checks that this page is what the binary writes. `edgellm\n"
        "<command> --help` lists the same options.\n\n";
    for (const CommandInfo& c : commands())
        out += std::string("- [edgellm ") + c.name + "](#edgellm-" + c.name + ")\n";
    for (const CommandInfo& c : commands()) {
        out += std::string("\n## edgellm ") + c.name + "\n\n```\n" + c.usage + "\n```\n";
        if (c.scope & kRouter)
            out +=
                "\nWithout `-m`, serve is a router: it keeps the options marked *router* for "
                "itself "
                "and passes every other one to each model's process.\n";
        const Option* previous = nullptr;
        for (const Option* o : rows_of(c)) {
            if (!previous || previous->group != o->group)
                out += std::string("\n### ") + group_title(o->group) +
                       "\n\n| option | value | description |\n|---|---|---|\n";
            previous = o;
            std::string names;
            for (const auto& n : o->names) names += (names.empty() ? "`" : ", `") + n + "`";
            std::string help = o->help;
            if (o->env) help += std::string(" (environment: `") + o->env + "`)";
            if ((c.scope & kRouter) && (o->scope & kRouter)) help += " *router*";
            out += "| " + names + " | " + (o->metavar.empty() ? "" : "`" + cell(o->metavar) + "`") +
                   " | " + cell(help) + " |\n";
        }
    }
    return out;
}

}  // namespace edgellm::cli
