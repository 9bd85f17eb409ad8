// edgellm convert HF_DIR [--outfile OUT.gguf] [--outtype f32|f16|bf16|q8_0|auto] [-t N]
#include <unistd.h>

#include <cstdio>

#include "commands.h"
#include "edgellm/convert.h"

namespace edgellm::cli {

int cmd_convert(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("convert", args, &s)) return *done;
    if (s.positional.size() != 1) return fail("convert", "expected HF_DIR (a Hugging Face checkpoint's directory)", 2);
    ConvertOptions o;
    o.outtype = s.convert.outtype;
    o.outfile = s.convert.outfile.value_or("");
    o.n_threads = (int)s.convert.n_threads;
    // On a terminal one line, redrawn per tensor: a bar of the bytes written; otherwise a
    // line per tensor.
    const bool tty = isatty(fileno(stderr));
    o.progress = [tty](const ConvertProgress& p) {
        const double mib = 1.0 / (1 << 20);
        if (!tty) {
            std::fprintf(stderr, "[%4zu/%4zu] %-36s %-5s %9.2f MiB\n", p.index + 1, p.count, p.name.c_str(),
                         tensor_type_name(p.type), (double)p.bytes_done * mib);
            return;
        }
        constexpr int kWidth = 30;
        const double f = p.bytes_total ? (double)p.bytes_done / (double)p.bytes_total : 1.0;
        const int filled = (int)(f * kWidth);
        std::string bar(kWidth, ' ');
        for (int i = 0; i < filled; ++i) bar[(size_t)i] = '=';
        if (filled < kWidth) bar[(size_t)filled] = '>';
        std::fprintf(stderr, "\r[%s] %3d%% %4zu/%zu %.1f/%.1f MiB %-32.32s %s\x1b[K", bar.c_str(), (int)(f * 100),
                     p.index + 1, p.count, (double)p.bytes_done * mib, (double)p.bytes_total * mib,
                     p.name.c_str(), tensor_type_name(p.type));
        if (p.index + 1 == p.count) std::fputc('\n', stderr);
    };
    auto r = convert_hf(s.positional[0], o);
    if (!r) return fail("convert", r.error());
    for (const std::string& n : r->notes) std::fprintf(stderr, "edgellm convert: %s\n", n.c_str());
    const bool billions = r->n_params >= 1000000000;
    std::fprintf(stderr, "edgellm convert: %s (%s) %s, %zu tensors, %.3f %s parameters, %.1f MiB in %.1f s -> %s\n",
                 r->arch.c_str(), r->hf_arch.c_str(), file_type_name(r->file_type), r->n_tensors,
                 (double)r->n_params / (billions ? 1e9 : 1e6), billions ? "B" : "M", (double)r->bytes / (1 << 20),
                 r->seconds, r->path.c_str());
    return 0;
}

}  // namespace edgellm::cli
