// The option table, part 6: llama-server's flags that change nothing on a CPU (offloading,
// devices, image encoders...). serve accepts them as llama-server does, and logs a note for
// each one given; the notes follow the order of these rows.
#include "options.h"

namespace edgellm::cli {

namespace {
const char* const kNoOffload = "no effect on the CPU (nothing to offload or split)";
const char* const kNoEncoder =
    "no effect: this build has no image or audio encoder (such requests get a 400)";
}  // namespace

// (a row an option, laid out by hand)
// clang-format off
std::vector<Option> compat_options() {
    return {
        {.names = {"-ngl", "--gpu-layers", "--n-gpu-layers"}, .metavar = "N",
         .scope = kServe, .group = Group::Compat,
         .help = "accepted: edgellm runs on the CPU",
         .apply = integer(-1, 1 << 20, [](Settings& s, int64_t v) {
             if (v == 0) return;
             s.notes.push_back("-ngl: edgellm runs on the CPU; no layers are offloaded");
         })},
        // (after -t, whose count it names)
        {.names = {"-tb", "--threads-batch"}, .metavar = "N", .scope = kServe, .group = Group::Cpu,
         .help = "threads for prompts (edgellm uses -t for both)",
         .apply = integer(1, 1024, [](Settings& s, int64_t tb) {
             const int t = s.ctx.n_threads;
             if (tb == t) return;
             s.notes.push_back("-tb: prompts and decoding use the same " +
                               (t > 0 ? std::to_string(t) : std::string("default")) +
                               " threads (-t)");
         })},
        {.names = {"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"},
         .metavar = "N", .scope = kServe, .group = Group::Speculative,
         .help = "accepted: edgellm runs the draft model on the CPU too",
         .apply = integer(-1, 1 << 20, [](Settings& s, int64_t v) {
             if (v != 0)
                 s.notes.push_back("-ngld " + std::to_string(v) +
                                   ": the draft model runs on the CPU; no layers are offloaded");
         }),
         .needs = Needs::DraftModel},
        {.names = {"-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"}, .metavar = "N",
         .scope = kServe, .group = Group::Speculative,
         .help = "accepted: the draft model uses -td for prompts too",
         .note = "the draft model uses -td (or -t) threads for prompts too",
         .needs = Needs::DraftModel},
        {.names = {"-cb", "--cont-batching"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted (slots always decode together)"},
        {.names = {"-nocb", "--no-cont-batching"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted (with -np 1 there is nothing to batch)"},
        {.names = {"-fa", "--flash-attn"}, .metavar = "on|off|auto",
         .scope = kServe, .group = Group::Compat,
         .help = "accepted: attention is always fused (q8_0 KV needs nothing more)",
         .apply = takes({"on", "off", "auto"}, "on, off or auto",
                        [](Settings&, const std::string&) {}),
         .label = "--flash-attn"},
        {.names = {"-dev", "--device"}, .metavar = "LIST", .scope = kServe, .group = Group::Compat,
         .help = "none or cpu: edgellm runs on the CPU",
         .apply = cpu_only(""), .label = "--device"},
        {.names = {"--list-devices"}, .scope = kServe, .group = Group::Compat,
         .help = "print the devices (the CPU) and exit",
         .apply = set_flag([](Settings& s) { s.serve.list_devices = true; })},
        {.names = {"-sm", "--split-mode"}, .metavar = "MODE",
         .scope = kServe, .group = Group::Compat,
         .help = "accepted: one CPU, nothing to split",
         .note = kNoOffload},
        {.names = {"-ts", "--tensor-split"}, .metavar = "LIST",
         .scope = kServe, .group = Group::Compat,
         .help = "accepted: one CPU, nothing to split",
         .note = kNoOffload},
        {.names = {"-mg", "--main-gpu"}, .metavar = "N", .scope = kServe, .group = Group::Compat,
         .help = "accepted: there is no GPU",
         .note = kNoOffload},
        {.names = {"-nkvo", "--no-kv-offload"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: the KV cache is in RAM",
         .note = kNoOffload},
        {.names = {"-kvo", "--kv-offload"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: the KV cache is in RAM",
         .note = kNoOffload},
        {.names = {"--op-offload"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: no GPU to offload to",
         .note = kNoOffload},
        {.names = {"--no-op-offload"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: no GPU to offload to",
         .note = kNoOffload},
        {.names = {"-cmoe", "--cpu-moe"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: every expert is on the CPU",
         .note = kNoOffload},
        {.names = {"-ncmoe", "--n-cpu-moe"}, .metavar = "N",
         .scope = kServe, .group = Group::Compat,
         .help = "accepted: every expert is on the CPU",
         .note = kNoOffload},
        {.names = {"--rpc"}, .metavar = "SERVERS", .scope = kServe, .group = Group::Compat,
         .help = "accepted: edgellm runs on this machine only (no RPC backends)",
         .note = kNoOffload},
        {.names = {"-mm", "--mmproj"}, .metavar = "FILE", .scope = kServe, .group = Group::Compat,
         .help = "accepted, no effect: no image or audio encoder (images are refused with a 400)",
         .note = kNoEncoder},
        {.names = {"-mmu", "--mmproj-url"}, .metavar = "URL",
         .scope = kServe, .group = Group::Compat,
         .help = "accepted, no effect (nothing is downloaded, no image encoder)",
         .note = kNoEncoder},
        {.names = {"--no-mmproj"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: no projector is loaded (never is)"},
        {.names = {"--mmproj-auto"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted, no effect: no image encoder",
         .note = kNoEncoder},
        {.names = {"--no-mmproj-auto"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: no projector is loaded"},
        {.names = {"--mmproj-offload"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted, no effect",
         .note = kNoEncoder},
        {.names = {"--no-mmproj-offload"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted, no effect",
         .note = kNoEncoder},
        {.names = {"--media-path"}, .metavar = "DIR", .scope = kServe, .group = Group::Compat,
         .help = "accepted, no effect: no image encoder to read local media for",
         .note = kNoEncoder},
        {.names = {"-gan", "--grp-attn-n"}, .metavar = "N", .scope = kServe, .group = Group::Compat,
         .help = "group-attention (self-extend) factor: only 1 (off)",
         .apply = [](const Arg& a, Settings&, std::string* err) {
             int64_t n = 1;
             if (!a.integer(1, 1 << 20, &n, err)) return false;
             if (n <= 1) return true;
             *err = "--grp-attn-n " + std::to_string(n) +
                    ": group attention (self-extend) is not supported; use a model trained for the "
                    "context, or --context-shift";
             return false;
         },
         .label = "--grp-attn-n"},
        {.names = {"-gaw", "--grp-attn-w"}, .metavar = "N", .scope = kServe, .group = Group::Compat,
         .help = "group-attention width: only with --grp-attn-n above 1 (refused)",
         .apply = integer(1, 1 << 24, [](Settings&, int64_t) {}), .label = "--grp-attn-w",
         .note = "no effect without --grp-attn-n above 1"},
        {.names = {"--offline"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: edgellm never downloads anything (models are local files)"},
        {.names = {"--no-mmap"}, .scope = kServe, .group = Group::Compat,
         .help = "accepted: the file is mapped read-only either way",
         .note = "the file is mapped read-only and warmed up instead"},
    };
}
// clang-format on

}  // namespace edgellm::cli
