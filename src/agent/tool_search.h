// What the search tools match with: the include/exclude globs of file_glob_search and
// grep_search (builtin_tools.h's tool_glob_match says their syntax), and grep_search's line
// matcher.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace edgellm::agent {

// The entries a search keeps: those include matches ("": every one) and exclude ("": none)
// does not. Compiled once per call.
class EntryFilter {
  public:
    EntryFilter(std::string_view include, std::string_view exclude);
    ~EntryFilter();
    bool keeps(std::string_view rel) const;

  private:
    struct Globs;
    std::unique_ptr<Globs> g_;
};

// An ECMAScript-flavoured pattern (what models write: \d, \w, \s, \b, (?:...)) or, literal,
// the text as is, matched against one line at a time. regcomp/regexec underneath: glibc's
// matcher does not recurse per character as libstdc++'s std::regex does (which can overflow
// the stack on a long line).
class LineMatcher {
  public:
    LineMatcher();
    ~LineMatcher();
    // "" when compiled, else why not.
    std::string compile(const std::string& pattern, bool literal, bool icase);
    bool match(std::string_view line);

  private:
    struct Impl;
    std::unique_ptr<Impl> d_;
};

}  // namespace edgellm::agent
