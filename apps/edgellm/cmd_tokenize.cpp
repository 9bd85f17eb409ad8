// edgellm tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--parse-special]
// edgellm detokenize -m MODEL (--tokens "ID ..." | -p "ID ...") [--special]
// Only the vocabulary is read; the weights are not touched.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
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
    ArgParser p("tokenize",
                "edgellm tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--parse-special]");
    p.option({"-m", "--model"}, "FILE", "GGUF model (only its vocabulary is read)");
    p.option({"-p", "--prompt"}, "TEXT", "text to tokenize");
    p.option({"-f", "--file"}, "FILE", "read the text from a file");
    p.flag({"--no-bos"}, "do not add BOS/EOS even if the model asks for them");
    p.flag({"--parse-special"}, "turn texts such as <|im_start|> into their control tokens");
    if (auto done = parse_command_line(p, args)) return *done;
    std::string err;
    if (!p.positional().empty())
        return fail("tokenize", "unexpected argument " + p.positional()[0], 2);
    const auto model = p.get("-m");
    if (!model) return fail("tokenize", "missing -m MODEL", 2);
    if (p.has("-p") == p.has("-f"))
        return fail("tokenize", "give exactly one of -p TEXT or -f FILE", 2);
    std::string text;
    if (p.has("-p")) {
        text = *p.get("-p");
    } else {
        std::ifstream in(*p.get("-f"), std::ios::binary);
        if (!in) return fail("tokenize", *p.get("-f") + ": cannot read");
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::unique_ptr<GgufFile> file;
    auto tok = load_vocab(*model, &file);
    if (!tok) return fail("tokenize", tok.error());
    const auto ids = (*tok)->tokenize(text, !p.has("--no-bos"), p.has("--parse-special"));
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
}

int cmd_detokenize(const std::vector<std::string>& args) {
    ArgParser p("detokenize", "edgellm detokenize -m MODEL --tokens \"ID ID ...\" [--special]");
    p.option({"-m", "--model"}, "FILE", "GGUF model (only its vocabulary is read)");
    p.option({"--tokens", "-p"}, "\"ID ...\"", "token ids, space-separated");
    p.flag({"--special"}, "render control tokens as their text");
    if (auto done = parse_command_line(p, args)) return *done;
    std::string err;
    const auto model = p.get("-m");
    if (!model) return fail("detokenize", "missing -m MODEL", 2);
    const auto ids_arg = p.get("--tokens");
    if (!ids_arg) return fail("detokenize", "missing --tokens \"ID ID ...\"", 2);
    std::vector<int32_t> ids;
    if (!parse_token_ids(*ids_arg, &ids, &err)) return fail("detokenize", err, 2);
    std::unique_ptr<GgufFile> file;
    auto tok = load_vocab(*model, &file);
    if (!tok) return fail("detokenize", tok.error());
    for (int32_t id : ids)
        if (id >= (*tok)->n_vocab())
            return fail("detokenize", "token id " + std::to_string(id) +
                                          " is outside the vocabulary of " +
                                          std::to_string((*tok)->n_vocab()));
    std::printf("%s\n", (*tok)->detokenize(ids, p.has("--special")).c_str());
    return 0;
}

}  // namespace edgellm::cli
