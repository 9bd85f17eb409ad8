// edgellm synth --shape NAME [--arch A] [--vocab GGUF] -o OUT.gguf [--type T] [--seed S] [-t N]
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "edgellm/synth.h"

namespace edgellm::cli {

int cmd_synth(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("synth", args, &s)) return *done;
    if (!s.synth.shape || !s.synth.out) return fail("synth", "need --shape and -o", 2);
    SynthOptions o;
    if (s.synth.arch) o.arch = *s.synth.arch;
    o.shape = *s.synth.shape;
    if (s.synth.vocab) o.vocab = *s.synth.vocab;
    o.type = s.synth.type;
    o.seed = (uint64_t)s.synth.seed;
    o.n_threads = (int)s.synth.n_threads;
    o.progress = [](size_t i, size_t n, const std::string& name, TensorType t) {
        std::fprintf(stderr, "[%4zu/%4zu] %-36s %s\n", i + 1, n, name.c_str(), tensor_type_name(t));
    };
    auto r = synth_model(*s.synth.out, o);
    if (!r) return fail("synth", r.error());
    std::fprintf(stderr,
                 "edgellm synth: %s %s %s, %zu tensors, %.3f B parameters, %.1f MiB -> %s\n",
                 (o.arch.empty() ? find_model_shape(o.shape)->arch : o.arch.c_str()), o.shape.c_str(), file_type_name(o.type), r->n_tensors,
                 (double)r->n_params / 1e9, (double)r->bytes / (1 << 20), s.synth.out->c_str());
    return 0;
}

}  // namespace edgellm::cli
