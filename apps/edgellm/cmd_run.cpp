// edgellm run -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]
//             [-t N] [-c CTX] [--chat] [--system TEXT] ...
// Streams the continuation (or, with --chat, the assistant's reply) to stdout and ends
// with one line of timings on stderr.
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "edgellm/chat.h"
#include "edgellm/session.h"

namespace edgellm::cli {

bool prepare_model(const Settings& s, const Model& m, std::string* err) {
    // (a cache refused is worth a line, one mapped as it was is not; a missing one is
    // written before anything is measured or generated, for the next start)
    if (m.repack_cache() == Model::RepackCache::Refused)
        std::fprintf(stderr, "edgellm: %s\n", m.repack_note().c_str());
    if (const std::string note = m.save_repack_cache(); !note.empty())
        std::fprintf(stderr, "edgellm: %s\n", note.c_str());
    if (s.mlock) {
        auto r = m.lock_memory();
        if (!r) {
            *err = r.error();
            return false;
        }
    }
    if (s.warmup) m.warm_up();
    return true;
}

int cmd_run(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("run", args, &s)) return *done;
    auto model_path = model_path_or_default(s);
    if (!model_path) return fail("run", model_path.error(), 2);
    std::string prompt;
    if (auto code = input_text("run", s, "PROMPT", &prompt)) return *code;
    GenerateParams gp = s.gen;
    if (std::string err = choose_kernels(s.kernels); !err.empty()) return fail("run", err, 2);

    const auto t_load = std::chrono::steady_clock::now();
    auto model = Model::load(*model_path, load_options(s));
    if (!model) return fail("run", model.error());
    auto tok = Tokenizer::load((*model)->file());
    if (!tok) return fail("run", tok.error());
    for (const auto& [id, bias] : gp.sampling.logit_bias)
        if (id >= (*tok)->n_vocab())
            return fail("run", "--logit-bias: token " + std::to_string(id) +
                                   " is outside the vocabulary of " + std::to_string((*tok)->n_vocab()), 2);
    if (s.grammar) {
        gp.sampling.grammar = s.grammar;
        gp.sampling.grammar_vocab = GrammarVocab::build(**tok);
    }
    if (std::string err; !prepare_model(s, **model, &err)) return fail("run", err);
    auto ctx = Context::create(**model, s.ctx);
    if (!ctx) return fail("run", ctx.error());
    if (!(*ctx)->params().cpus.empty())
        std::fprintf(stderr, "edgellm run: %s\n", (*ctx)->affinity_report().c_str());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load)
            .count();

    std::string text = prompt;
    bool parse_special = false;
    bool add_bos = !s.run.no_bos;
    if (s.run.chat) {
        std::vector<ChatMessage> msgs;
        if (s.run.system) msgs.push_back({"system", *s.run.system, ""});
        msgs.push_back({"user", prompt, ""});
        std::string tmpl;
        if (const auto& file = s.run.chat_template_file; file && !read_text_file(*file, &tmpl))
            return fail("run", "cannot read the chat template " + *file, 2);
        const ChatPrompt cp = chat_prompt((*model)->file(), **tok, msgs, true,
                                          s.run.chat_template_kwargs.value_or(""), "", tmpl);
        if (!cp.warning.empty())
            std::fprintf(stderr, "edgellm run: warning: %s; using the %s format\n",
                         cp.warning.c_str(), cp.how.c_str());
        text = cp.text;
        parse_special = true;
        if (cp.bos_in_text) add_bos = false;  // the template wrote it
    }
    const auto ids = (*tok)->tokenize(text, add_bos, parse_special);
    if (!s.run.chat) {
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        std::fflush(stdout);
    }
    Session session(**model, **tok, **ctx);
    auto res = session.generate(ids, gp, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
    });
    std::printf("\n");
    std::fflush(stdout);
    if (!res) return fail("run", res.error());
    std::fprintf(
        stderr,
        "edgellm run: load %.0f ms | prompt %lld tokens, %.1f ms, %.2f tokens/s | generated "
        "%lld tokens, %.1f ms, %.2f tokens/s | stop: %s\n",
        load_ms, (long long)res->n_prompt, res->prompt_ms, res->prompt_per_second(),
        (long long)res->n_generated, res->generate_ms, res->generate_per_second(),
        stop_reason_name(res->stop));
    return 0;
}

}  // namespace edgellm::cli
