// Jinja2 for chat templates: an interpreter for the part of Jinja2 that the
// `tokenizer.chat_template` of GGUF models uses (Qwen2.5/Qwen3 with tools and thinking,
// Llama 3.x, Gemma 3, Phi-3, Mistral, ChatML), rendering the way Hugging Face transformers'
// apply_chat_template does (the reference):
//
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//                                 extensions=[loopcontrols, {% generation %}])
//   globals raise_exception(msg), strftime_now(fmt); filter tojson = json.dumps(x,
//   ensure_ascii=False, indent=None, separators=None, sort_keys=False)
//
// (transformers src/transformers/utils/chat_template_utils.py, _compile_jinja_template).
// Jinja2's other defaults hold: undefined variables are Jinja2's default Undefined (print
// as nothing, are false, iterate as empty; reading an attribute of one or calling one is
// an error), one trailing newline of the template is dropped, values print as Python's
// str() does. Lists and dicts cannot be modified (the sandbox is immutable); namespace()
// attributes can. tests/data/templates/README.md lists what is covered and how the
// expected renderings were made.
//
// Not supported (an error naming the line and the construct): template inheritance and
// inclusion (extends, block, include, import), {% call %}, recursive loops, *args/**kwargs
// in calls, the filters and methods not listed in jinja/builtins_*.cpp (wordcount, truncate,
// groupby, ...). Case mapping (upper, lower, title) covers ASCII, Latin-1, Latin
// Extended-A, Greek and Cyrillic; Python's integers are 64-bit here (overflow is an error).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "edgellm/error.h"

namespace edgellm::jinja {

// Render `source` with the variables of `context` (a JSON object). Errors (syntax, an
// unsupported construct, raise_exception, a type error, a limit: nesting, steps, output
// size) come back as Result::fail with a message naming the template line and the
// construct, e.g. "line 3: unsupported filter 'wordcount'".
//
// Dicts keep the key order of the JSON value they come from: nlohmann::json sorts object
// keys, nlohmann::ordered_json keeps them as written (as Python's json.loads does), which
// matters where a template prints a dict (tool schemas through tojson).
Result<std::string> render(const std::string& source, const nlohmann::json& context);
Result<std::string> render(const std::string& source, const nlohmann::ordered_json& context);

}  // namespace edgellm::jinja
