// edgellm tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--parse-special]
// edgellm detokenize -m MODEL (--tokens "ID ..." | -p "ID ...") [--special]
// Only the vocabulary is read; the weights are not touched.
#include <cstdio>

#include "commands.h"
#include "edgellm/tokenizer.h"

namespace edgellm::cli {

namespace {

Result<std::unique_ptr<Tokenizer>> load_vocab(const std::string& path,
                                              std::unique_ptr<GgufFile>* file) {
    auto f = GgufFile::open(path);
    if (!f) return Result<std::unique_ptr<Tokenizer>>::fail(f.error());
    *file = std::move(*f);
    return Tokenizer::load(**file);
}

}  // namespace

int cmd_tokenize(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("tokenize", args, &s)) return *done;
    const auto& model = s.model;
    if (!model) return fail("tokenize", "missing -m MODEL", 2);
    std::string text;
    if (auto code = input_text("tokenize", s, "TEXT", &text)) return *code;
    std::unique_ptr<GgufFile> file;
    auto tok = load_vocab(*model, &file);
    if (!tok) return fail("tokenize", tok.error());
    const auto ids = (*tok)->tokenize(text, !s.io.no_bos, s.io.parse_special);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
}

int cmd_detokenize(const std::vector<std::string>& args) {
    Settings s;
    if (auto done = parse_options("detokenize", args, &s)) return *done;
    const auto& model = s.model;
    if (!model) return fail("detokenize", "missing -m MODEL", 2);
    if (!s.io.ids) return fail("detokenize", "missing --tokens \"ID ID ...\"", 2);
    const std::vector<int32_t>& ids = *s.io.ids;
    std::unique_ptr<GgufFile> file;
    auto tok = load_vocab(*model, &file);
    if (!tok) return fail("detokenize", tok.error());
    for (int32_t id : ids)
        if (id >= (*tok)->n_vocab())
            return fail("detokenize", "token id " + std::to_string(id) +
                                          " is outside the vocabulary of " +
                                          std::to_string((*tok)->n_vocab()));
    std::printf("%s\n", (*tok)->detokenize(ids, s.io.special).c_str());
    return 0;
}

}  // namespace edgellm::cli
