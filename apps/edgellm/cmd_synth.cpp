// edgellm synth --arch llama|qwen2|qwen3|gemma3 --shape NAME -o OUT.gguf [--type T] [--seed S] [-t N]
#include <cstdio>
#include <cstdlib>

#include "args.h"
#include "commands.h"
#include "edgellm/synth.h"

namespace edgellm::cli {

int cmd_synth(const std::vector<std::string>& args) {
    std::string shapes;
    for (const auto& s : model_shapes()) shapes += std::string(shapes.empty() ? "" : ", ") + s.name;
    ArgParser p("synth",
                "edgellm synth --arch llama|qwen2|qwen3|gemma3 --shape NAME -o OUT.gguf [--type T] [--seed "
                "S]\n\nshapes: " +
                    shapes);
    p.option({"--arch"}, "A",
             "architecture: qwen2 (q/k/v biases), llama, qwen3 (q/k norms) or gemma3 (q/k "
             "norms, post-norms, GELU, sliding windows)");
    p.option({"--shape"}, "NAME", "tensor shapes of this model");
    p.option({"-o", "--out"}, "FILE", "output GGUF");
    p.option({"--type"}, "T", "file type as for quantize: F16 (default), Q4_K_M, Q8_0, ...");
    p.option({"--seed"}, "S", "random seed (default 1); the same seed writes the same bytes");
    p.option({"-t", "--threads"}, "N", "threads (default: all cores)");
    if (auto done = parse_command_line(p, args)) return *done;
    std::string err;
    SynthOptions o;
    if (!p.has("--arch") || !p.has("--shape") || !p.has("-o"))
        return fail("synth", "need --arch, --shape and -o", 2);
    o.arch = *p.get("--arch");
    o.shape = *p.get("--shape");
    if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "gemma3")
        return fail("synth", "--arch must be llama, qwen2, qwen3 or gemma3", 2);
    if (!find_model_shape(o.shape))
        return fail("synth", "unknown --shape \"" + o.shape + "\" (one of: " + shapes + ")", 2);
    const auto ft = file_type_from_name(p.get_or("--type", "F16"));
    if (!ft) return fail("synth", "unknown --type \"" + p.get_or("--type", "") + "\"", 2);
    o.type = *ft;
    int64_t seed = 1, threads = 0;
    if (!p.get_int("--seed", 0, INT64_MAX, &seed, &err) ||
        !p.get_int("-t", 1, 1024, &threads, &err))
        return fail("synth", err, 2);
    o.seed = (uint64_t)seed;
    o.n_threads = (int)threads;
    o.progress = [](size_t i, size_t n, const std::string& name, TensorType t) {
        std::fprintf(stderr, "[%4zu/%4zu] %-36s %s\n", i + 1, n, name.c_str(), tensor_type_name(t));
    };
    auto r = synth_model(*p.get("-o"), o);
    if (!r) return fail("synth", r.error());
    std::fprintf(stderr,
                 "edgellm synth: %s %s %s, %zu tensors, %.3f B parameters, %.1f MiB -> %s\n",
                 o.arch.c_str(), o.shape.c_str(), file_type_name(o.type), r->n_tensors,
                 (double)r->n_params / 1e9, (double)r->bytes / (1 << 20), p.get("-o")->c_str());
    return 0;
}

}  // namespace edgellm::cli
