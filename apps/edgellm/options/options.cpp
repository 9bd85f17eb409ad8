// The table assembled from its parts, and a command's arguments parsed with it.
#include <cstdio>

#include "../commands.h"
#include "arg_parser.h"
#include "options.h"

namespace edgellm::cli {

const std::vector<Option>& option_table() {
    static const std::vector<Option> table = [] {
        std::vector<Option> all;
        for (auto part : {model_options, context_options, generation_options, server_options,
                          speculative_options, compat_options, tool_options})
            for (Option& o : part()) all.push_back(std::move(o));
        return all;
    }();
    return table;
}

const Option* find_option(uint32_t scope, const std::string& name) {
    for (const Option& o : option_table())
        if (o.scope & scope)
            for (const std::string& n : o.names)
                if (n == name) return &o;
    return nullptr;
}

std::optional<int> parse_options(const std::string& command, const std::vector<std::string>& args,
                                 Settings* s) {
    const CommandInfo& c = command_info(command);
    ArgParser p(command);
    for (const Option& o : option_table())
        if (o.scope & c.scope) p.add(o.names, o.metavar);
    std::string err;
    if (!p.parse(args, &err)) return fail(command, err, 2);
    if (p.help_requested()) {
        std::printf("%s", command_help(c).c_str());
        return 0;
    }
    s->positional = p.positional();
    // Every row given, in table order; a row's note once it is taken.
    for (const Option& o : option_table()) {
        if (!(o.scope & c.scope) || !p.has(o.names[0])) continue;
        s->given.insert(o.names.begin(), o.names.end());
        const Arg a{o.message_name(), *p.get(o.names[0]), p.get_all(o.names[0]),
                    p.positions(o.names[0])};
        if (o.apply && !o.apply(a, *s, &err)) return fail(command, err, 2);
        if (o.note) s->notes.push_back(std::string(o.message_name()) + ": " + o.note);
    }
    if (!c.check(*s, &err)) return fail(command, err, 2);
    if (!c.takes_arguments && !s->positional.empty())
        return fail(command, "unexpected argument " + s->positional[0], 2);
    return std::nullopt;
}

}  // namespace edgellm::cli
