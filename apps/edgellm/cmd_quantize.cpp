// edgellm quantize IN.gguf OUT.gguf TYPE [THREADS] [--allow-requantize] [--output-type T]
//                  [--token-embedding-type T] [--pure]
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "edgellm/quantize.h"

namespace edgellm::cli {

int cmd_quantize(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("quantize", args, &s)) return *done;
    const auto& pos = s.positional;
    if (pos.size() < 3 || pos.size() > 4)
        return fail("quantize", "expected IN.gguf OUT.gguf TYPE [THREADS]", 2);
    QuantizeRunOptions ro;
    ro.opts = s.quantize.opts;
    auto ft = file_type_from_name(pos[2]);
    if (!ft) {
        char* end = nullptr;
        const long id = std::strtol(pos[2].c_str(), &end, 10);
        if (*end == '\0')
            for (FileType t : all_file_types())
                if ((long)t == id) ft = t;
    }
    if (!ft)
        return fail("quantize",
                    "unknown TYPE \"" + pos[2] + "\" (one of: " + file_type_names() + ")", 2);
    ro.opts.ftype = *ft;
    if (pos.size() == 4) {
        char* end = nullptr;
        const long n = std::strtol(pos[3].c_str(), &end, 10);
        if (*end != '\0' || n < 1 || n > 1024)
            return fail("quantize", "THREADS must be a number in 1..1024", 2);
        ro.n_threads = (int)n;
    }
    ro.allow_requantize = s.quantize.allow_requantize;
    ro.progress = [](const QuantizeProgress& q) {
        std::fprintf(stderr, "[%4zu/%4zu] %-36s %-5s -> %-5s %9.2f MiB -> %9.2f MiB\n", q.index + 1,
                     q.count, q.name.c_str(), tensor_type_name(q.from), tensor_type_name(q.to),
                     (double)q.bytes_in / (1 << 20), (double)q.bytes_out / (1 << 20));
    };
    std::fprintf(stderr, "edgellm quantize: %s -> %s as %s\n", pos[0].c_str(), pos[1].c_str(),
                 file_type_name(*ft));
    auto r = quantize_file(pos[0], pos[1], ro);
    if (!r) return fail("quantize", r.error());
    std::fprintf(
        stderr,
        "edgellm quantize: %zu tensors quantized, %zu copied; %.2f MiB -> %.2f MiB in %.1f s\n",
        r->n_quantized, r->n_copied, (double)r->bytes_in / (1 << 20),
        (double)r->bytes_out / (1 << 20), r->seconds);
    return 0;
}

}  // namespace edgellm::cli
