#include "modelfile/convert/pre_tokenizer.h"

#include <algorithm>
#include <map>

#include "edgellm/tokenizer.h"
#include "modelfile/convert/sha256.h"
#include "text/pretokenizer.h"

namespace edgellm::convert {

using nlohmann::json;

const char* const kChkTxt =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\xf0\x9f\x9a\x80 (normal) \xf0\x9f"
    "\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f (multiple emojis concatenated) \xe2"
    "\x9c\x85 \xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 3 33 333 3333 33333 333333 3333333 3333"
    "3333 3.3 3..3 3...3 \xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1\x9f\x8b\xe1\x9e\x8f\xe1"
    "\x9f\x82\xe1\x9e\x96\xe1\x9e\xb7\xe1\x9e\x9f\xe1\x9f\x81\xe1\x9e\x9f\xe1\x9e\xa2\xe1"
    "\x9e\xb6\xe1\x9e\x85\xf0\x9f\x98\x81 \?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8"
    "apple\xe5\xb7\xa5\xe4\xbd\x9c"
    "1314151\xe5\xa4\xa9\xef\xbd\x9e ------======= \xd0\xbd"
    "\xd0\xb5\xd1\x89\xd0\xbe \xd0\xbd\xd0\xb0 \xd0\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0"
    "\xd1\x80\xd1\x81\xd0\xba\xd0\xb8 ''''''```````\"\"\"\"......!!!!!!\?\?\?\?\?\? I've bee"
    "n 'told he's there, 'RE you sure\? 'M not sure I'll make it, 'D you like some tea\?"
    " We'Ve a'lL";

namespace {

// llama.cpp's hashes (convert_hf_to_gguf_update.py's list in its get_vocab_base_pre) for the
// names edgellm's tokenizer runs, with the model each was computed from.
const std::multimap<std::string, std::string> kHashes = {
    {"llama-bpe", "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5"},  // meta-llama/Meta-Llama-3-8B
    {"gpt-4o", "ccc2ef013c104be7bae2965776d611e1d7a8a2a9c547dd93a682c9a9fc80352e"},  // Xenova/gpt-4o (Phi-4-mini)
    {"qwen2", "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea"},  // Qwen/Qwen1.5-7B
    {"qwen2", "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c"},  // Qwen/Qwen3-Embedding-0.6B
    {"smollm", "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249"},  // HuggingFaceTB/SmolLM-135M
    {"gpt-2", "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454"},  // openai-community/gpt2
    {"gpt-2", "0fe1cf6eda062318a1af7270f3331a85c539a01778ff948e24388e949c5282f4"},  // evilfreelancer/ruGPT3XL
    {"qwen35", "d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4"},  // Qwen/Qwen3.5-9B-Instruct
    {"qwen35", "1444df51289cfa8063b96f0e62b1125440111bc79a52003ea14b6eac7016fd5f"},  // openbmb/MiniCPM-V-4_6
    {"deepseek-r1-qwen", "b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5"},  // deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
    {"deepseek-llm", "049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754"},  // deepseek-ai/deepseek-llm-7b-base
    {"deepseek-coder", "347715f544604f9118bb75ed199f68779f423cabb20db6de6f31b908d04d7821"},  // deepseek-ai/deepseek-coder-6.7b-base
    {"falcon", "8aeee3860c56296a157a1fe2fad249ec40aa59b1bb5709f4ade11c4e6fe652ed"},  // tiiuae/falcon-7b
    {"falcon3", "9d032fcbd5501f4a38150912590928bfb36091efb5df11b8e2124b0390e3fb1e"},  // tiiuae/Falcon3-7B-Base
    {"falcon-h1", "a6b57017d60e6edb4d88ecc2845188e0eb333a70357e45dcc9b53964a73bbae6"},  // tiiuae/Falcon-H1-0.5B-Base
    {"falcon-h1", "60476e1243776c4fb1b993dbd7a5f15ac22f83c80afdf425fa5ae01c8d44ef86"},  // tiiuae/Falcon-H1-1B-Base
    {"falcon-h1", "3eda48b4c4dc7de733d1a8b3e3b4a85243dbbf704da2ee9d42c6beced8897896"},  // tiiuae/Falcon-H1-7B-Base
    {"falcon-h1", "48f8e02c0359c0bbdd82f26909171fac1c18a457bb47573ed1fe3bbb2c1cfd4b"},  // tiiuae/Falcon-H1-34B-Base
    {"mpt", "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166"},  // mosaicml/mpt-7b
    {"olmo", "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166"},  // allenai/OLMo-1.7-7B-hf
    {"starcoder", "35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34"},  // bigcode/starcoder2-3b
    {"refact", "6221ad2852e85ce96f791f476e0b390cf9b474c9e3d1362f53a24a06dc8220ff"},  // smallcloudai/Refact-1_6-base
    {"command-r", "9c2227e4dd922002fb81bde4fc02b0483ca4f12911410dee2255e4987644e3f8"},  // CohereForAI/c4ai-command-r-v01
    {"stablelm2", "32d85c31273f8019248f2559fed492d929ea28b17e51d81d3bb36fff23ca72b3"},  // stabilityai/stablelm-2-zephyr-1_6b
    {"dbrx", "a8594e3edff7c29c003940395316294b2c623e09894deebbc65f33f1515df79e"},  // databricks/dbrx-base
    {"smaug-bpe", "c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d"},  // abacusai/Smaug-Llama-3-70B-Instruct
    {"chatglm-bpe", "b6e8e1518dc4305be2fe39c313ed643381c4da5db34a98f6a04c093f8afbe99b"},  // THUDM/glm-4-9b-chat
    {"chatglm-bpe", "81d72c7348a9f0ebe86f23298d37debe0a5e71149e29bd283904c02262b27516"},  // THUDM/glm-4-9b-chat
    {"jina-v1-en", "c7699093ba4255a91e702aa38a596aa81669f3525dae06c2953267dde580f448"},  // jinaai/jina-reranker-v1-tiny-en
    {"jina-v2-es", "171aeeedd6fb548d418a7461d053f11b6f1f1fc9b387bd66640d28a4b9f5c643"},  // jinaai/jina-embeddings-v2-base-es
    {"jina-v2-de", "27949a2493fc4a9f53f5b9b029c82689cfbe5d3a1929bb25e043089e28466de6"},  // jinaai/jina-embeddings-v2-base-de
    {"jina-v2-de", "b3d1dd861f1d4c5c0d2569ce36baf3f90fe8a102db3de50dd71ff860d91be3df"},  // aari1995/German_Semantic_V3
    {"jina-v5-nano", "a023e9fdc5a11f034d3ef515b92350e56fb2af1f66c6b6811a4444ea9bf8763d"},  // jinaai/jina-embeddings-v5-text-nano
    {"jais", "b53802fb28e26d645c3a310b34bfe07da813026ec7c7716883404d5e0f8b1901"},  // core42/jais-13b
    {"codeshell", "7b3e7548e4308f52a76e8229e4e6cc831195d0d1df43aed21ac6c93da05fec5f"},  // WisdomShell/CodeShell-7B
    {"exaone", "4e2b24cc4770243d65a2c9ec19770a72f08cffc161adbb73fcbb6b7dd45a0aae"},  // LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct
    {"exaone4", "2085e1638f6c377a0aa4ead21b27bb4cb941bf800df86ed391011769c1758dfb"},  // LGAI-EXAONE/EXAONE-4.0-32B
    {"phi-2", "fcace8b9cac38ce847670c970cd5892031a753a1ef381abd1d9af00f713da085"},  // microsoft/phi-2
    {"gigachat", "ad851be1dba641f2e3711822f816db2c265f788b37c63b4e1aeacb9ee92de8eb"},  // ai-sage/GigaChat-20B-A3B-instruct
    {"megrez", "d4c8f286ea6b520b3d495c4455483cfa2302c0cfcd4be05d781b6a8a0a7cdaf1"},  // Infinigence/Megrez-3B-Instruct
    {"trillion", "1994ffd01900cfb37395608534236ecd63f2bd5995d6cb1004dda1af50240f15"},  // trillionlabs/Trillion-7B-preview
    {"pixtral", "0e9433cbbb161f89e264eb32e8e64bfe69e834973ffca5d41d3948a604a3e2a3"},  // mistral-community/pixtral-12b
    {"a.x-4.0", "b0a6b1c0bd5998ebd9df08611efde34a4ff03faed45ae09c43e6b31ebd4b94cf"},  // skt/A.X-4.0
    {"midm-2.0", "f6791d196f87ce6b56a7d234be618e0d58f8cda3549416635b2bebcd22cd95c4"},  // K-intelligence/Midm-2.0-Base-Instruct
    {"lfm2", "169bf0296a13c4d9b7672313f749eb36501d931022de052aad6e36f2bf34dd51"},  // LiquidAI/LFM2.5-350M
    {"lfm2", "9e454714343b69b99b71795c1d27a68c2a1d15dab111f4d353109f966af29da7"},  // LiquidAI/LFM2.5-8B-A1B
    {"mellum", "a1e163ecab2e718a4c829d1148b6e86824ec36163bb71941c3dca9cd5ac25756"},  // JetBrains/Mellum-4b-base
    {"mellum2", "9dcf830ee9990cdbf78cc523a5f7bd9ad8f3f9890c2d3581d2785ad10f07049d"},  // JetBrains/Mellum2-12B-A2.5B-Base
    {"modern-bert", "a0b64b4385f123663873756336c085744376d015ff328bb1d901598f63c44152"},  // answerdotai/ModernBERT-base
    {"granite-docling", "53e325976a6e142379c19b09afcae354f2f496f147afa8f9e189a33fe4e3024e"},  // ibm-granite/granite-docling-258M
    {"kormo", "4a2e2abae11ca2b86d570fc5b44be4d5eb5e72cc8f22dd136a94b37da83ab665"},  // KORMo-Team/KORMo-tokenizer
    {"solar-open", "16389f0a1f51ee53e562ffd51c371dc508639ab0e4261502071836e50e223e91"},  // upstage/Solar-Open-100B
    {"f2llmv2", "862f827721df956049dff5ca81a57f29e575280bc622e290d3bf4e35eca29015"},  // codefuse-ai/F2LLM-v2-4B
    {"hunyuan", "7e57df22b1fe23a7b1e1c7f3dc4e3f96d43a4eb0836d0c6bdc3436d7b2f1c664"},  // tencent/Hunyuan-A13B-Instruct
    {"grok-2", "66b8d4e19ab16c3bfd89bce5d785fb7e0155e8648708a1f42077cb9fe002c273"},  // alvarobartt/grok-2-tokenizer
    {"minerva-7b", "1431a23e583c97432bc230bff598d103ddb5a1f89960c8f1d1051aaa944d0b35"},  // sapienzanlp/Minerva-7B-base-v1.0
};

// tokenizer.json's regular expressions of the pre-tokenizers edgellm names without a hash.
const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool is_type(const json& j, const char* type) {
    return j.is_object() && j.value("type", "") == type;
}

// The byte-level step of a pre_tokenizer that splits before it (no prefix space, no regex
// of its own) or alone (GPT-2's regex).
bool byte_level(const json& j, bool use_regex) {
    return is_type(j, "ByteLevel") && !j.value("add_prefix_space", false) &&
           j.value("use_regex", true) == use_regex;
}

bool split_by(const json& j, const char* regex) {
    return is_type(j, "Split") && j.contains("pattern") && j["pattern"].is_object() &&
           j["pattern"].value("Regex", "") == regex && j.value("behavior", "") == "Isolated" &&
           !j.value("invert", false);
}

// The name of tokenizer.json's pre_tokenizer when it is one edgellm runs ("": it is not).
std::string recognise(const json& tj) {
    if (!tj.contains("pre_tokenizer")) return "";
    const json& p = tj["pre_tokenizer"];
    const bool ignore_merges = tj.contains("model") && tj["model"].is_object() &&
                               tj["model"].value("ignore_merges", false);
    if (byte_level(p, true)) return "gpt-2";
    if (!is_type(p, "Sequence") || !p.contains("pretokenizers") || !p["pretokenizers"].is_array() ||
        p["pretokenizers"].size() != 2)
        return "";
    const json& a = p["pretokenizers"][0];
    const json& b = p["pretokenizers"][1];
    // Llama 3's expression, whole words that are tokens taken as they are (else Smaug's)
    if (split_by(a, kLlama3Regex) && byte_level(b, false)) return ignore_merges ? "llama-bpe" : "smaug-bpe";
    if (split_by(a, kQwen2Regex) && byte_level(b, false) && !ignore_merges) return "qwen2";
    // SmolLM's and StarCoder's: each digit alone, then GPT-2's expression
    if (is_type(a, "Digits") && a.value("individual_digits", false) && byte_level(b, true) && !ignore_merges)
        return "smollm";
    return "";
}

}  // namespace

std::string chkhsh(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return sha256_hex(s + "]");
}

PreTokenizerName name_pre_tokenizer(const Kv& vocab, const json& tokenizer_json,
                                    const std::string& first) {
    // The names to try: the family's usual one, the one tokenizer.json's pre_tokenizer
    // suggests, then every other.
    const std::string recognised = recognise(tokenizer_json);
    std::vector<std::string> names;
    for (const std::string& n : {first, recognised})
        if (kHashes.count(n)) names.push_back(n);
    for (const auto& [n, h] : kHashes)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);

    // Names whose expressions split the text alike and whose traits agree tokenize it alike:
    // the vocabulary is tokenized once per such group.
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // key, names
    for (const std::string& name : names) {
        auto pre = PreTokenizer::create(name);
        if (!pre) continue;
        const PreTokenizer::Traits& t = (*pre)->traits();
        std::string key = {(char)t.ignore_merges, (char)t.add_bos, (char)t.force_bos, (char)t.byte_level,
                           (char)t.spaces_as_u2581, (char)t.whole_newline_runs};
        for (std::string_view piece : (*pre)->split(kChkTxt)) key += std::to_string(piece.size()) + ",";
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == key; });
        if (g == groups.end())
            groups.push_back({key, {name}});
        else
            g->second.push_back(name);
    }
    GgufWriter w;
    for (const auto& [k, v] : vocab) w.set(k, v);
    std::string last_hash;
    for (const auto& [key, group] : groups) {
        w.set("tokenizer.ggml.pre", gguf_value(group.front()));
        const std::vector<uint8_t> bytes = w.metadata_bytes();
        auto file = GgufFile::parse(bytes, "tokenizer.json");
        if (!file) throw Error("tokenizer.json: " + file.error());
        auto tok = Tokenizer::load(**file);
        if (!tok) throw Error(tok.error());
        const std::string h = chkhsh((*tok)->tokenize(kChkTxt, true, false));
        if (last_hash.empty()) last_hash = h;  // (the family's usual name's)
        for (const std::string& name : group) {
            const auto range = kHashes.equal_range(name);
            for (auto it = range.first; it != range.second; ++it)
                if (it->second == h) return {name, "chkhsh " + h};
        }
    }
    if (!recognised.empty())
        return {recognised, "tokenizer.json's pre_tokenizer (chkhsh " + last_hash +
                                " is not a released vocabulary's)"};
    const std::string pre = tokenizer_json.contains("pre_tokenizer")
                                ? tokenizer_json["pre_tokenizer"].dump()
                                : std::string("none");
    throw Error("tokenizer.json: the BPE pre-tokenizer is none edgellm runs: llama.cpp's hash of it "
                "(chkhsh) " + last_hash + " is none of the known ones, and its pre_tokenizer " +
                (pre.size() > 300 ? pre.substr(0, 300) + "..." : pre) + " is not recognised");
}

}  // namespace edgellm::convert
