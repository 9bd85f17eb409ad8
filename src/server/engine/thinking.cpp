// Thinking that obeys: whether a chat request thinks (the templates' enable_thinking) and
// the budget of the thinking blocks its reply writes, from the server's flags and the
// request's fields in every dialect's spelling (reasoning_effort, reasoning_budget_tokens /
// thinking_budget_tokens, chat_template_kwargs.enable_thinking; Anthropic's thinking and the
// Responses API's reasoning arrive as those). The sampler counts, cuts and forces
// (text/chat/thinking.h).
#include "server/server_impl.h"

#include "text/chat/reasoning.h"
#include "text/chat/thinking.h"

namespace edgellm::server {

namespace {

// A set of template variables' enable_thinking (a boolean: the request parser and the
// option checks refuse anything else), if it has one.
std::optional<bool> enable_thinking_in(const std::string& kwargs) {
    if (kwargs.empty()) return std::nullopt;
    const json kw = json::parse(kwargs, nullptr, false);
    if (!kw.is_object() || !kw.contains("enable_thinking") || !kw["enable_thinking"].is_boolean())
        return std::nullopt;
    return kw["enable_thinking"].get<bool>();
}

}  // namespace

// Each overrides the one before: --reasoning (off with --reasoning-budget 0), the
// enable_thinking of --chat-template-kwargs, the effort (the request's reasoning_effort, else
// --reasoning-effort: none and minimal off, the others on), a budget of 0 (the request's,
// else the server's: off), the enable_thinking of the request's chat_template_kwargs.
bool Server::Impl::thinking_enabled(const GenRequest& g) const {
    bool on = cfg.enable_thinking;
    if (auto v = enable_thinking_in(cfg.chat_template_kwargs)) on = *v;
    const std::string& effort = g.reasoning_effort.empty() ? cfg.reasoning_effort : g.reasoning_effort;
    if (!effort.empty()) on = effort != "none" && effort != "minimal";
    if ((g.reasoning_budget >= 0 ? g.reasoning_budget : cfg.reasoning_budget) == 0) on = false;
    if (auto v = enable_thinking_in(g.template_kwargs_json)) on = *v;
    return on;
}

ThinkingParams Server::Impl::thinking_params(Api api, const GenRequest& g,
                                             const std::string& prompt_text) const {
    ThinkingParams t;
    // A chat reply always (its blocks are what reasoning_content shows); a completion when
    // the request gives a budget for the blocks its raw prompt may open.
    t.on = api == Api::Chat || g.reasoning_budget >= 0;
    if (!t.on) return t;
    t.opened = prompt_opens_thinking(prompt_text);
    t.budget = g.reasoning_budget >= 0 ? g.reasoning_budget : cfg.reasoning_budget;
    if (api == Api::Chat)
        t.budget = chat_thinking_budget(prompt_text, template_text().find("enable_thinking") != std::string::npos,
                                        thinking_enabled(g), t.budget);
    for (std::string_view close : thinking_closes())
        t.closes.push_back({std::string(close), live.tok->tokenize(std::string(close), false, true)});
    return t;
}

}  // namespace edgellm::server
