// Tokens (lexer.cpp): a template as text and the tokens inside its tags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgellm::jinja::detail {

enum class Tok : uint8_t {
    Text,
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,
    Int,
    Float,
    Op,
    Eof,
};

struct Token {
    Tok type = Tok::Eof;
    int line = 0;
    std::string text;  // Text: the data; Name, Op: the spelling; String: the decoded value
    int64_t int_value = 0;
    double float_value = 0;
};

// For errors: "expected ..., got <describe(token)>".
std::string describe(const Token& t);

// The tokens of a template, ending with Tok::Eof. Throws TemplateError.
std::vector<Token> tokenize(const std::string& source);

}  // namespace edgellm::jinja::detail
