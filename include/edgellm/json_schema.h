// JSON Schema -> GBNF (see grammar.h for the dialect): the grammar behind response_format
// json_schema / json_object and tool calls. The grammar admits only JSON text that is valid
// against the schema; where the exact set cannot be written as a grammar the schema is
// refused with the keyword and its place, never silently loosened. Where JSON Schema leaves
// room the grammar is stricter than the schema (every text it admits still validates), which
// also keeps small models from rambling:
//
//   - additionalProperties ABSENT on an object that has `properties` or `required` means no
//     other properties (as `false`); an object schema with neither (`{"type":"object"}`)
//     admits any object. Declared properties come in the schema's order (required ones
//     always, optional ones may be left out), extra ones (additionalProperties true or a
//     schema) after them, with keys written without escapes.
//   - `items` absent after prefixItems (or additionalItems absent after a legacy `items`
//     array) means no further items, unless minItems asks for more (then any values).
//   - A schema without `type` admits only the types its keywords are about (`properties` ->
//     object, `minLength` -> string, ...); one with no such keyword admits any value.
//   - oneOf is read as anyOf: exclusivity cannot be enforced by a grammar in general.
//   - Whitespace between tokens: nothing, one space, or a newline plus up to 20 spaces or
//     tabs. No whitespace before or after the top value.
//   - Numbers: at most 15 integer and 15 fraction digits and a 3-digit exponent; integers at
//     most 16 digits (so a model cannot write digits forever); bounds are clamped to that.
//     A `number` with bounds is written without exponent, and a whole value without a
//     fraction. `integer` is written without fraction or exponent ("1", never "1.0").
//   - Strings: escapes \" \\ \/ \b \f \n \r \t \uXXXX except surrogates (an astral character
//     is written as itself, so minLength/maxLength count code points exactly). Strings with
//     a `pattern` or `format` use escapes only for characters that need one.
//   - const / enum values are written in their shortest JSON form (keys in the schema's
//     order, numbers as nlohmann::json prints them: 1e2 as 100.0), with the usual
//     whitespace between tokens.
//   - Formats: date (RFC 3339 full-date, leap years exact), time (RFC 3339 full-time:
//     offset required, "Z" upper case, no leap second), date-time ("T" upper case), uuid
//     (8-4-4-4-12 hex digits), email (dot-atoms @ a domain of two or more labels, no quoted
//     local parts or address literals).
//   - `pattern` (ECMA-262 as JSON Schema says) is unanchored: without ^ / $ any characters
//     may come before / after it. Supported: literals, escapes (\d \D \w \W \s \S \. \n \t
//     \xHH \uHHHH \cX ...), classes [...] with ranges and negation, `.` (any character but a
//     line terminator), groups (...) (?:...) (?<name>...), alternation |, quantifiers * + ?
//     {m} {m,} {m,n} (counts up to 10000), ^ at the start and $ at the end of the pattern or
//     of a top-level alternative. Refused: backreferences, lookarounds, word boundaries
//     (\b \B), lazy quantifiers, \p{...}, and a repetition without upper bound of something
//     that can match the empty string.
//   - $ref: "#", "#/$defs/NAME" and "#/definitions/NAME", resolved against the schema given
//     to add(); a recursive reference becomes a recursive rule. A $ref with constraining
//     siblings is merged with them as allOf.
//   - allOf is merged into one schema: properties united (a property in several branches
//     gets the merge of its schemas), required united, types intersected, bounds tightened;
//     keywords both sides set differently (two patterns...) are refused. Siblings of
//     anyOf/oneOf are merged into each branch.
//   - Unknown keywords are ignored, as JSON Schema says; annotations (title, description,
//     examples, default, $schema, $id, $comment, deprecated, readOnly, writeOnly, strict,
//     contentMediaType, contentEncoding) too. Refused, with the keyword: not, if / then /
//     else, dependentRequired, dependentSchemas, dependencies, patternProperties,
//     propertyNames, contains, minContains, maxContains, unevaluatedProperties,
//     unevaluatedItems, $dynamicRef, $recursiveRef; multipleOf other than 1; uniqueItems true
//     (unless maxItems <= 1); minProperties / maxProperties unless the declared properties
//     already imply them; number bounds that are not whole numbers; enum / const together
//     with keywords other than `type`; minLength / maxLength together with pattern or
//     format; formats other than the five above; the schema `false` where a value must be;
//     a $ref cycle that writes nothing before coming back (left recursion); schemas nested
//     more than 200 deep, allOf / $ref merges beyond 20000 schemas, pattern groups nested
//     more than 100 deep (a server must survive a hostile schema).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgellm {

// Why a schema could not be turned into a grammar: the keyword, where it is (a JSON path
// like "$.properties.items.items[0]" or "$.$defs.Foo.not"), and a sentence for the user.
struct SchemaRefusal {
    std::string keyword;
    std::string path;
    std::string message;
};

// Builds GBNF rules for JSON values matching schemas; several schemas can share one grammar
// (tool calls: one rule per tool's parameters). Rule names and text are deterministic: the
// same calls in the same order give the same grammar.
class JsonSchemaGrammar {
  public:
    JsonSchemaGrammar();

    // Add rules for `schema` (its $defs / definitions resolved against `schema` itself);
    // returns the name of the rule matching one JSON value of the schema, starting with
    // `name_hint` (sanitised to [a-zA-Z0-9-]; "-v2", "-v3"... appended when taken, "-n" when it
    // ends in "-<digits>", the GBNF parser's names for its own rules). nullopt when refused:
    // see refusal(); a refused schema leaves no rules behind.
    std::optional<std::string> add(const nlohmann::ordered_json& schema,
                                   const std::string& name_hint);
    // Rules for any JSON value / any JSON object (response_format json_object).
    std::string add_any_value();
    std::string add_any_object();
    // Every rule added so far, plus the shared ones (ws, string, number...), as GBNF text, with
    // `root ::= <root_rule>` first when root_rule is not empty.
    std::string gbnf(const std::string& root_rule) const;
    // The last refusal of add() (empty fields before any).
    const SchemaRefusal& refusal() const;

  private:
    class Builder;
    struct State {
        std::vector<std::pair<std::string, std::string>> rules;  // {name, body}, in order made
        std::set<std::string> names;                 // every name taken, shared ones included
        std::map<std::string, std::string> by_body;  // body -> rule, so equal rules are shared
        std::set<std::string> shared;                // shared rules in use
    };
    State state_;
    SchemaRefusal refusal_;
};

// One schema -> a whole grammar whose root is a JSON value of it. On refusal: nullopt and *why
// (when why is not null).
std::optional<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                               SchemaRefusal* why);

}  // namespace edgellm
