#!/usr/bin/env python3
"""Fixtures of `edgellm convert`: a tiny Hugging Face checkpoint of every family edgellm runs
(random weights, fixed seeds; small real tokenizers: byte-level BPE in Llama 3's and Qwen 2's
styles, SentencePiece models in Gemma's and Phi-3's, a SentencePiece-style BPE tokenizer.json
in Gemma 4's; model cards for two) in tests/data/convert/NAME/, and what
llama.cpp's converter (convert_hf_to_gguf.py of the pinned llama.cpp) makes of each with
--outtype f32, f16, bf16, q8_0 and auto, as a manifest: the file's sha256, every metadata key
with its type and value (arrays as their count and the sha256 of their GGUF encoding) and
every tensor's type, shape and sha256. tests/modelfile/test_convert.cpp converts the same checkpoints and compares.

  scripts/reference.sh --with-converter        # once: the converter's venv (torch)
  ~/.cache/edgellm/convert-venv/bin/python scripts/convert-fixtures.py [--only NAME]
  ... scripts/convert-fixtures.py --compare-real [--bin build/bin/edgellm]
  ... scripts/convert-fixtures.py --bench [--bin build/bin/edgellm]

--compare-real checks what the fixtures cannot hold: released vocabularies at full size
(Llama 3's and Qwen 2's, tokenizer.json rebuilt from llama.cpp's models/ggml-vocab-*.gguf,
scripts/fetch-vocabs.sh) on small random models, converted by llama.cpp's converter as it is
(the hash names the pre-tokenizer) and by edgellm: the files must be the same bytes. Gemma 4's
(its tokenizer files rebuilt from ggml-vocab-gemma-4.gguf): as released, edgellm must write the
tokenizer keys llama.cpp's converter wrote into that file (the converter's transformers 4.57
cannot read the released tokenizer_config.json: its extra_special_tokens is transformers 5's
list); in transformers 4's form, both converters the same bytes.
--bench times both converters on a 600 MB bf16 Llama-shaped checkpoint in two shards
(/usr/bin/time -v: wall time and peak resident memory) and compares their outputs.

The converter identifies a byte-level BPE pre-tokenizer by hashing the tokenization of a
fixed text, which only the released vocabularies' hashes match; for these small
vocabularies the wrapper below gives it the name instead when the hash is unknown (as
edgellm convert names them, from tokenizer.json's pre_tokenizer). Nothing else of the
converter is changed. The test command does not need torch: only this script does.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "convert")
TEXT = "/usr/share/common-licenses/GPL-3"
OUTTYPES = ["f32", "f16", "bf16", "q8_0"]

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Some text beyond the licence's ASCII, so the vocabularies have multi-byte tokens.
EXTRA = ["我想在apple工作1314151天～", "нещо на Български", "🚀 (normal) 😶‍🌫️ ✅ 🦙🦙",
         "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea?"]

CHAT_LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
               "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
CHAT_CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHAT_GEMMA = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
              "else m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
CHAT_PHI3 = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|assistant|>\n{% else %}{{ eos_token }}{% endif %}")


README_LLAMA = """---
language:
- en
- de
library_name: transformers
license: llama3.2
pipeline_tag: text-generation
tags:
- facebook
- meta
- llama
base_model:
- meta-llama/Llama-3.2-1B
extra_gated_prompt: >-
  ### LLAMA 3.2 COMMUNITY LICENSE AGREEMENT

  Llama 3.2 Version Release Date: September 25, 2024
extra_gated_fields:
  First Name: text
  Country: country
  ? By clicking Submit below I accept the terms of the license
  : checkbox
extra_gated_button_content: Submit
---

## A tiny Llama 3.2 style checkpoint with random weights
"""

README_QWEN2 = """---
license: apache-2.0
license_link: https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/LICENSE
language:
- en
pipeline_tag: text-generation
base_model: Qwen/Qwen2.5-0.5B
tags:
- chat
library_name: transformers
datasets: [HuggingFaceFW/fineweb, "allenai/c4"]
---

# A tiny Qwen2.5 style checkpoint with random weights
"""


def texts():
    with open(TEXT, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line.strip()] + EXTRA


def bpe_tokenizer(style, vocab_size, specials, nonspecial=()):
    """A byte-level BPE tokenizer.json in Llama 3's ("llama3") or Qwen 2's ("qwen2") style."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=(style == "llama3")))
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    regex = LLAMA3_RE if style == "llama3" else QWEN2_RE
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts(), trainer)
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if nonspecial:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in nonspecial])
    if style == "llama3":
        bos = specials[0]
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                          special_tokens=[(bos, tok.token_to_id(bos))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def spm_model(path_prefix, vocab_size, ids, user_defined=()):
    """A SentencePiece BPE model with byte fallback (no normalization rules: a small file)."""
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts()), model_prefix=path_prefix, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", character_coverage=0.99,
        user_defined_symbols=list(user_defined), minloglevel=2, **ids)
    return path_prefix + ".model"


def randomize(model, seed):
    """Every parameter random (norms around 0 or 1, so Gemma's +1 and the permutations show)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(r * (0.05 if p.dim() == 1 else 0.02) + (1.0 if p.dim() == 1 and "norm" in name
                                                              and "gemma" not in type(model).__name__.lower()
                                                              else 0.0))


def save_model(model, d, dtype, shards=False):
    import torch
    model = model.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
    model.save_pretrained(d, safe_serialization=True, max_shard_size="60KB" if shards else "10GB")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def patch_json(path, **changes):
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    obj.update(changes)
    write_json(path, obj)


# ---- the checkpoints ------------------------------------------------------------------

def make_llama(d):
    """Llama 3.2 style: byte-level BPE (llama-bpe), bf16, two shards with their index, tied
    embeddings, Llama 3's rope_scaling (rope_freqs.weight), the chat template in
    chat_template.jinja."""
    import transformers as t
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = bpe_tokenizer("llama3", 400, specials)
    fast = t.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=specials[0], eos_token="<|eot_id|>")
    fast.chat_template = CHAT_LLAMA3
    fast.save_pretrained(d)
    n = tok.get_vocab_size()
    cfg = t.LlamaConfig(vocab_size=n, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                        bos_token_id=fast.bos_token_id, eos_token_id=[fast.eos_token_id, n - 4],
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    m = t.LlamaForCausalLM(cfg)
    randomize(m, 1)
    save_model(m, d, "bf16", shards=True)
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(README_LLAMA)


def spm_tokenizer_json(d, slow, bos):
    """The tokenizer.json beside a SentencePiece model, as far as converters read it: the
    added tokens (control pieces and added ones) and the post-processor that adds BOS. (Made
    here rather than by transformers' slow-to-fast conversion, which needs a newer protobuf
    than the converter's venv pins.)"""
    sp = slow.sp_model
    added = []
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i):
            added.append({"id": i, "content": sp.id_to_piece(i), "special": True})
    for i, tok in sorted(slow.added_tokens_decoder.items()):
        if i >= sp.get_piece_size():
            added.append({"id": i, "content": tok.content, "special": tok.special})
    for a in added:
        a.update(single_word=False, lstrip=False, rstrip=False, normalized=False)
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": None,
          "post_processor": {"type": "TemplateProcessing",
                             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                             "special_tokens": {bos: {"id": bos, "ids": [sp.piece_to_id(bos)], "tokens": [bos]}}},
          "decoder": None,
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": True, "fuse_unk": True,
                    "vocab": {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}, "merges": []}}
    write_json(os.path.join(d, "tokenizer.json"), tj)


def make_llama_spm(d):
    """Llama 2 / TinyLlama style: a SentencePiece tokenizer.model (no tokenizer.json: the
    special tokens come from config.json), f32, an untied output."""
    import transformers as t
    with tempfile.TemporaryDirectory() as tmp:
        path = spm_model(os.path.join(tmp, "sp"), 384, dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1))
        slow = t.LlamaTokenizer(vocab_file=path, legacy=True, add_prefix_space=None)
        slow.save_pretrained(d)
        n = len(slow)
    patch_json(os.path.join(d, "tokenizer_config.json"), chat_template=CHAT_LLAMA3.replace("<|eot_id|>", "</s>"),
               add_prefix_space=True)
    cfg = t.LlamaConfig(vocab_size=n, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        bos_token_id=1, eos_token_id=2)
    m = t.LlamaForCausalLM(cfg)
    randomize(m, 2)
    save_model(m, d, "f32")


def make_qwen2(d):
    """Qwen 2.5 style: byte-level BPE (qwen2: NFC, one digit per token), f16, q/k/v biases, an
    untied output, config vocab_size above the tokenizer's (padding tokens), a non-special
    added token, sampling defaults in generation_config.json."""
    import transformers as t
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = bpe_tokenizer("qwen2", 420, specials, nonspecial=["<tool_call>", "</tool_call>"])
    fast = t.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.save_pretrained(d)
    patch_json(os.path.join(d, "tokenizer_config.json"), chat_template=CHAT_CHATML, add_bos_token=False)
    n = tok.get_vocab_size() + 12
    cfg = t.Qwen2Config(vocab_size=n, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        bos_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|im_end|>"))
    m = t.Qwen2ForCausalLM(cfg)
    randomize(m, 3)
    save_model(m, d, "f16")
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(README_QWEN2)
    patch_json(os.path.join(d, "generation_config.json"), do_sample=True, temperature=0.7, top_p=0.8,
               top_k=20, repetition_penalty=1.05)


def make_qwen3(d):
    """Qwen 3 style: per-head q/k norms, head_dim 32 (not hidden / heads), f32, tied, an FFN
    width of 80 (q8_0 falls back to f16 for ffn_down: its rows are not whole blocks)."""
    import transformers as t
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = bpe_tokenizer("qwen2", 380, specials)
    fast = t.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.save_pretrained(d)
    patch_json(os.path.join(d, "tokenizer_config.json"), chat_template=CHAT_CHATML)
    cfg = t.Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=80,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        max_position_embeddings=1024, rope_theta=1000000.0, rms_norm_eps=1e-6,
                        tie_word_embeddings=True, eos_token_id=tok.token_to_id("<|im_end|>"))
    m = t.Qwen3ForCausalLM(cfg)
    randomize(m, 4)
    save_model(m, d, "f32")


def make_gemma3(d):
    """Gemma 3 text style: a SentencePiece tokenizer.model (pad 0, eos 1, bos 2, unk 3, the
    turn markers user-defined pieces) with its tokenizer.json, bf16, norms stored as w - 1,
    sliding windows with their own RoPE base, a final logit soft-cap."""
    import transformers as t
    with tempfile.TemporaryDirectory() as tmp:
        path = spm_model(os.path.join(tmp, "sp"), 400, dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>",
                                                             eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>"),
                         user_defined=["<start_of_turn>", "<end_of_turn>"])
        slow = t.GemmaTokenizer(vocab_file=path)
        slow.save_pretrained(d)
        spm_tokenizer_json(d, slow, "<bos>")
        n = len(slow)
    patch_json(os.path.join(d, "tokenizer_config.json"), chat_template=CHAT_GEMMA)
    cfg = t.Gemma3TextConfig(vocab_size=n, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                             max_position_embeddings=1024, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                             sliding_window=16, query_pre_attn_scalar=16, final_logit_softcapping=30.0,
                             rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    m = t.Gemma3ForCausalLM(cfg)
    randomize(m, 5)
    save_model(m, d, "bf16")


def make_phi3(d):
    """Phi-3.5 / Phi-4-mini style: fused qkv_proj and gate_up_proj, a SentencePiece
    tokenizer.model with added special tokens (added_tokens.json, tokenizer_config.json and
    tokenizer.json all list them), partial rotary dimensions, LongRoPE's long and short
    factors, a sliding window, f32, tied."""
    import transformers as t
    with tempfile.TemporaryDirectory() as tmp:
        path = spm_model(os.path.join(tmp, "sp"), 384, dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1))
        slow = t.LlamaTokenizer(vocab_file=path, legacy=True)
        slow.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|assistant|>", "<|end|>",
                                                               "<|user|>", "<|system|>"]})
        slow.add_tokens(["<|placeholder1|>"])
        slow.eos_token = "<|endoftext|>"
        slow.save_pretrained(d)
        spm_tokenizer_json(d, slow, "<s>")
        n = len(slow) + 6
        eos = slow.convert_tokens_to_ids("<|endoftext|>")
    patch_json(os.path.join(d, "tokenizer_config.json"), chat_template=CHAT_PHI3, tokenizer_class="LlamaTokenizer")
    rot = 12  # int(0.75 * 64) // 4
    cfg = t.Phi3Config(vocab_size=n, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       original_max_position_embeddings=128, partial_rotary_factor=0.75, rope_theta=10000.0,
                       rms_norm_eps=1e-5, sliding_window=256, tie_word_embeddings=True,
                       bos_token_id=1, eos_token_id=eos, pad_token_id=eos,
                       rope_scaling={"type": "longrope",
                                     "long_factor": [1.0 + 0.37 * i for i in range(rot // 2)],
                                     "short_factor": [1.0 + 0.013 * i for i in range(rot // 2)]})
    m = t.Phi3ForCausalLM(cfg)
    randomize(m, 6)
    save_model(m, d, "f32")


def make_smollm3(d):
    """SmolLM3 style: Llama 3's tokenizer (llama-bpe), no RoPE on every fourth layer, bf16,
    tied."""
    import transformers as t
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
    tok = bpe_tokenizer("llama3", 380, specials)
    fast = t.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=specials[0], eos_token="<|im_end|>",
                                     pad_token="<|im_end|>")
    fast.save_pretrained(d)
    patch_json(os.path.join(d, "tokenizer_config.json"), chat_template=CHAT_CHATML)
    cfg = t.SmolLM3Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                          num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=2048, rope_theta=5000000.0, rms_norm_eps=1e-6,
                          tie_word_embeddings=True, bos_token_id=None, eos_token_id=tok.token_to_id("<|im_end|>"),
                          pad_token_id=tok.token_to_id("<|im_end|>"))
    m = t.SmolLM3ForCausalLM(cfg)
    randomize(m, 7)
    save_model(m, d, "bf16")


GEMMA4_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]", "<|tool>", "<tool|>", "<|tool_call>",
                  "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>', "<|think|>", "<|channel>",
                  "<channel|>", "<|turn>", "<turn|>", "<|image>", "<|audio>", "<|image|>", "<|audio|>", "<image|>",
                  "<audio|>", "<|video|>"]
# tokenizer_config.json's named special tokens (Gemma 4's names)
GEMMA4_NAMED = {"audio_token": "<|audio|>", "boa_token": "<|audio>", "boi_token": "<|image>", "eoa_token": "<audio|>",
                "eoc_token": "<channel|>", "eoi_token": "<image|>", "eot_token": "<turn|>", "escape_token": '<|"|>',
                "etc_token": "<tool_call|>", "etd_token": "<tool|>", "etr_token": "<tool_response|>",
                "image_token": "<|image|>", "soc_token": "<|channel>", "sot_token": "<|turn>",
                "stc_token": "<|tool_call>", "std_token": "<|tool>", "str_token": "<|tool_response>",
                "think_token": "<|think|>"}
# special tokens without a name (transformers 5 lists them in extra_special_tokens)
GEMMA4_EXTRA = {"video_token": "<|video|>", "extra_control_token": "<|extra_control|>"}
CHAT_GEMMA4 = ("{{ bos_token }}{% for m in messages %}<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
               "{{ m['content'] | trim }}<turn|>\n{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}")


def gemma4_tokenizer_files(d, vocab, merges, added, extra, chat_template):
    """Gemma 4's tokenizer files: tokenizer.json a SentencePiece-style BPE (spaces as U+2581,
    byte fallback) of `vocab` and `merges` with the `added` tokens; tokenizer_config.json
    naming the special tokens as Gemma 4's does, `extra` its extra_special_tokens;
    chat_template.jinja."""
    from tokenizers import Tokenizer
    for a in added:
        a.update(single_word=False, lstrip=False, rstrip=False, normalized=False)
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
          "pre_tokenizer": {"type": "Split", "pattern": {"String": "\u2581"}, "behavior": "MergedWithNext",
                            "invert": False},
          "post_processor": None,
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}]},
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                    "vocab": vocab, "merges": merges}}
    Tokenizer.from_str(json.dumps(tj))  # (a tokenizer the library reads)
    write_json(os.path.join(d, "tokenizer.json"), tj)
    write_json(os.path.join(d, "tokenizer_config.json"), {
        "backend": "tokenizers", "bos_token": "<bos>", "eos_token": "<eos>", "mask_token": "<mask>",
        "pad_token": "<pad>", "unk_token": "<unk>", **GEMMA4_NAMED, "extra_special_tokens": extra,
        "model_max_length": 1000000000000000019884624838656, "padding_side": "left",
        "processor_class": "Gemma4Processor", "tokenizer_class": "GemmaTokenizer"})
    with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(chat_template)


def gemma4_tokenizer(d):
    """Gemma 4's tokenizer files as its checkpoints have them: tokenizer.json a SentencePiece-
    style BPE (spaces as U+2581, byte fallback to the 256 <0xXX> tokens) with its special and
    marker tokens first, added (special) in the vocabulary, and two added tokens past it (one
    special); tokenizer_config.json naming the special tokens; chat_template.jinja. The named
    special tokens are also in extra_special_tokens as an object, as transformers 4 writes
    them: transformers 4.57, which llama.cpp's converter pins, cannot read the list transformers
    5 writes there (Gemma 4's released files); test_convert converts that form too. Returns the
    number of tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
    tok.train_from_iterator(texts(), trainers.BpeTrainer(vocab_size=360, show_progress=False))
    trained = json.loads(tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(GEMMA4_SPECIAL + [f"<0x{b:02X}>" for b in range(256)])}
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(t, len(vocab))
    merges = [m.split(" ") if isinstance(m, str) else m for m in trained["merges"]]
    n = len(vocab)
    added = [{"id": i, "content": t, "special": True} for i, t in enumerate(GEMMA4_SPECIAL)]
    added += [{"id": n, "content": "<extra_tool>", "special": False},
              {"id": n + 1, "content": "<|extra_control|>", "special": True}]
    gemma4_tokenizer_files(d, vocab, merges, added, {**GEMMA4_NAMED, **GEMMA4_EXTRA}, CHAT_GEMMA4)
    return n + 2


def gemma4_weights(d, cfg, seed):
    """Random bf16 weights in the layout of Gemma 4's multimodal checkpoints: the text model
    under model.language_model. (the layers that share an earlier one's KV with no k_proj,
    v_proj or k_norm; the FFN twice as wide on them with use_double_wide_mlp), a few tensors of
    the image and audio encoders beside it. Norms around 1 (Gemma 4's scale by w, not 1 + w)."""
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(seed)
    H, L, P = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"]
    V, NH, NKV = cfg["vocab_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    first_shared = L - cfg["num_kv_shared_layers"]

    def w(*shape, norm=False):
        r = torch.randn(shape, generator=g) * (0.05 if norm else 0.02) + (1.0 if norm else 0.0)
        return r.to(torch.bfloat16)
    p = "model.language_model."
    t = {p + "embed_tokens.weight": w(V, H), p + "embed_tokens_per_layer.weight": w(V, L * P),
         p + "per_layer_model_projection.weight": w(L * P, H), p + "per_layer_projection_norm.weight": w(P, norm=True),
         p + "norm.weight": w(H, norm=True)}
    for i, kind in enumerate(cfg["layer_types"]):
        hd = cfg["global_head_dim"] if kind == "full_attention" else cfg["head_dim"]
        ff = cfg["intermediate_size"] * (2 if cfg["use_double_wide_mlp"] and i >= first_shared else 1)
        b = f"{p}layers.{i}."
        t.update({b + "input_layernorm.weight": w(H, norm=True), b + "self_attn.q_proj.weight": w(NH * hd, H),
                  b + "self_attn.q_norm.weight": w(hd, norm=True), b + "self_attn.o_proj.weight": w(H, NH * hd),
                  b + "post_attention_layernorm.weight": w(H, norm=True),
                  b + "pre_feedforward_layernorm.weight": w(H, norm=True), b + "mlp.gate_proj.weight": w(ff, H),
                  b + "mlp.up_proj.weight": w(ff, H), b + "mlp.down_proj.weight": w(H, ff),
                  b + "post_feedforward_layernorm.weight": w(H, norm=True),
                  b + "per_layer_input_gate.weight": w(P, H), b + "per_layer_projection.weight": w(H, P),
                  b + "post_per_layer_input_norm.weight": w(H, norm=True),
                  b + "layer_scalar": (torch.rand(1, generator=g) * 0.5 + 0.5).to(torch.bfloat16)})
        if i < first_shared:
            t.update({b + "self_attn.k_proj.weight": w(NKV * hd, H), b + "self_attn.v_proj.weight": w(NKV * hd, H),
                      b + "self_attn.k_norm.weight": w(hd, norm=True)})
    t.update({"model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight": w(16, 16),
              "model.vision_tower.patch_embedder.input_proj.weight": w(16, 48),
              "model.embed_vision.embedding_projection.weight": w(H, 16),
              "model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight": w(32, 16),
              "model.embed_audio.embedding_projection.weight": w(H, 16)})
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def gemma4_config(d, n):
    """config.json of a tiny Gemma 4 E2B style model (Gemma4ForConditionalGeneration, the text
    model's fields in text_config) of n tokens; returns text_config."""
    text = {"model_type": "gemma4_text", "attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": False,
            "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "bfloat16", "enable_moe_block": False,
            "final_logit_softcapping": 30.0, "global_head_dim": 32, "head_dim": 16,
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "hidden_size_per_layer_input": 16,
            "initializer_range": 0.02, "intermediate_size": 32,
            "layer_types": ["sliding_attention"] * 2 + ["full_attention", "sliding_attention", "full_attention"],
            "max_position_embeddings": 1024, "moe_intermediate_size": None, "num_attention_heads": 2,
            "num_experts": None, "num_global_key_value_heads": None, "num_hidden_layers": 5,
            "num_key_value_heads": 1, "num_kv_shared_layers": 2, "rms_norm_eps": 1e-06,
            "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                                   "rope_type": "proportional"},
                                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
            "sliding_window": 16, "tie_word_embeddings": True, "top_k_experts": None,
            "use_bidirectional_attention": None, "use_cache": True, "use_double_wide_mlp": True,
            "vocab_size": n, "vocab_size_per_layer_input": n}
    ids = {t: i for i, t in enumerate(GEMMA4_SPECIAL)}
    write_json(os.path.join(d, "config.json"), {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "audio_config": {"model_type": "gemma4_audio", "hidden_size": 16, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "output_proj_dims": 64},
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 16, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "patch_size": 4},
        "audio_token_id": ids["<|audio|>"], "boa_token_id": ids["<|audio>"], "boi_token_id": ids["<|image>"],
        "eoa_token_id": ids["<audio|>"], "eoi_token_id": ids["<image|>"], "image_token_id": ids["<|image|>"],
        "video_token_id": ids["<|video|>"], "eos_token_id": [1, ids["<turn|>"]], "initializer_range": 0.02,
        "tie_word_embeddings": True, "dtype": "bfloat16", "text_config": text})
    return text


def make_gemma4(d):
    """Gemma 4 E2B style (written directly: the converter's transformers has no Gemma 4):
    sliding and global layers with their own head sizes (16, 32), the global ones'
    proportional RoPE (a quarter of the pairs rotated), the last layers reading earlier
    layers' KV (num_kv_shared_layers) with a doubled FFN, per-layer embeddings, a scalar per
    layer, a final soft-cap, bf16, tied; image and audio encoders beside the text model."""
    gemma4_weights(d, gemma4_config(d, gemma4_tokenizer(d)), 8)


# name, maker, the pre-tokenizer name the converter gets for a BPE vocabulary (None: SentencePiece)
FIXTURES = [
    ("llama", make_llama, "llama-bpe"),
    ("llama-spm", make_llama_spm, None),
    ("qwen2", make_qwen2, "qwen2"),
    ("qwen3", make_qwen3, "qwen2"),
    ("gemma3", make_gemma3, None),
    ("phi3", make_phi3, None),
    ("smollm3", make_smollm3, "llama-bpe"),
    ("gemma4", make_gemma4, None),
]

# ---- llama.cpp's converter and its output ---------------------------------------------

WRAPPER = r'''
import os, runpy, sys
src = sys.argv[1]
sys.path.insert(0, src)
sys.path.insert(1, os.path.join(src, "gguf-py"))
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return os.environ["FIXTURE_TOKENIZER_PRE"]
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [os.path.join(src, "convert_hf_to_gguf.py")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def llama_cpp_source():
    return subprocess.run(["bash", "-c", '. scripts/llama-cpp-source.sh && llama_cpp_source "$LLAMA_CPP_SOURCE_DIR"'],
                          cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def gguf_array_bytes(parts_type, values):
    """The GGUF encoding of an array's elements (what the test digests the same way)."""
    out = bytearray()
    for v in values:
        if parts_type == "string":
            b = v if isinstance(v, bytes) else v.encode("utf-8")
            out += struct.pack("<Q", len(b)) + b
        elif parts_type == "int32":
            out += struct.pack("<i", v)
        elif parts_type == "uint32":
            out += struct.pack("<I", v)
        elif parts_type == "float32":
            out += struct.pack("<f", v)
        elif parts_type == "bool":
            out += struct.pack("<?", v)
        else:
            raise ValueError(parts_type)
    return bytes(out)


def manifest(path, gguf):
    r = gguf.GGUFReader(path)
    T = gguf.GGUFValueType
    names = {T.UINT8: "uint8", T.INT8: "int8", T.UINT16: "uint16", T.INT16: "int16", T.UINT32: "uint32",
             T.INT32: "int32", T.FLOAT32: "float32", T.BOOL: "bool", T.STRING: "string", T.UINT64: "uint64",
             T.INT64: "int64", T.FLOAT64: "float64"}
    meta = {}
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        t = f.types[0]
        if t == T.ARRAY:
            et = names[f.types[1]]
            if et == "string":
                vals = [bytes(f.parts[i]) for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            meta[key] = {"type": "array", "elem": et, "count": len(vals),
                         "sha256": hashlib.sha256(gguf_array_bytes(et, vals)).hexdigest(),
                         "head": [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in vals[:4]]}
        elif t == T.STRING:
            meta[key] = {"type": "string", "value": bytes(f.parts[-1]).decode("utf-8")}
        else:
            v = f.parts[-1].tolist()[0]
            if t == T.FLOAT32:  # the exact bits, as a float32 read back
                v = struct.unpack("<f", struct.pack("<f", v))[0]
            meta[key] = {"type": names[t], "value": v}
    tensors = [{"name": tt.name, "type": tt.tensor_type.name, "shape": [int(x) for x in tt.shape],
                "sha256": hashlib.sha256(bytes(tt.data.tobytes())).hexdigest()} for tt in r.tensors]
    return meta, tensors


def convert(src, d, outtype, out, pre):
    env = dict(os.environ, FIXTURE_TOKENIZER_PRE=pre or "")
    cmd = [sys.executable, "-c", WRAPPER, src, d, "--outtype", outtype, "--outfile", out]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def synthetic_llama(d, H, F, L, V, NH, NKV, seed=0):
    """A Llama-shaped bf16 checkpoint of random weights in two shards, written directly."""
    import numpy as np
    rng = np.random.default_rng(seed)
    hd = H // NH

    def w(*shape):  # bf16 bits of normal(0, 0.02)
        return ((rng.standard_normal(shape, dtype=np.float32) * 0.02).view(np.uint32) >> 16).astype(np.uint16)
    t = {"model.embed_tokens.weight": w(V, H), "lm_head.weight": w(V, H), "model.norm.weight": w(H)}
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": w(H), p + "post_attention_layernorm.weight": w(H),
                  p + "self_attn.q_proj.weight": w(NH * hd, H), p + "self_attn.k_proj.weight": w(NKV * hd, H),
                  p + "self_attn.v_proj.weight": w(NKV * hd, H), p + "self_attn.o_proj.weight": w(H, NH * hd),
                  p + "mlp.gate_proj.weight": w(F, H), p + "mlp.up_proj.weight": w(F, H),
                  p + "mlp.down_proj.weight": w(H, F)})
    names = sorted(t)
    weight_map = {}
    for k, part in enumerate((names[:len(names) // 2], names[len(names) // 2:])):
        fn = f"model-0000{k + 1}-of-00002.safetensors"
        header, off = {}, 0
        for n in part:
            header[n] = {"dtype": "BF16", "shape": list(t[n].shape), "data_offsets": [off, off + t[n].nbytes]}
            off += t[n].nbytes
            weight_map[n] = fn
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(os.path.join(d, fn), "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb)
            for n in part:
                f.write(t[n].tobytes())
    write_json(os.path.join(d, "model.safetensors.index.json"), {"metadata": {}, "weight_map": weight_map})
    write_json(os.path.join(d, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": F,
        "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": hd,
        "vocab_size": V, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"})


def released_tokenizer(d, src_gguf, llama3, gguf):
    """tokenizer.json and tokenizer_config.json of a released BPE vocabulary, from llama.cpp's
    vocabulary file, in the style of the released tokenizer (Llama 3's: BOS added, whole-word
    tokens; Qwen 2's: NFC, no BOS)."""
    r = gguf.GGUFReader(src_gguf)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode() for i in f["tokenizer.ggml.merges"].data]
    bos = toks[int(f["tokenizer.ggml.bos_token_id"].parts[-1][0])]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(toks) if types[i] != 1]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    bos_template = {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                             {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {bos: {"id": bos, "ids": [toks.index(bos)], "tokens": [bos]}}}
    write_json(os.path.join(d, "tokenizer.json"), {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None if llama3 else {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_RE if llama3 else QWEN2_RE}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [byte_level, bos_template]} if llama3 else byte_level,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": llama3, "vocab": {t: i for i, t in enumerate(toks) if types[i] == 1},
                  "merges": merges}})
    write_json(os.path.join(d, "tokenizer_config.json"), {
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")} for a in added},
        "bos_token": bos if llama3 else None, "eos_token": "<|eot_id|>" if llama3 else "<|im_end|>",
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_LLAMA3 if llama3 else CHAT_CHATML})
    return len(toks)


def gemma4_released_tokenizer(d, src_gguf, gguf, transformers5):
    """Gemma 4's released tokenizer files rebuilt from llama.cpp's ggml-vocab-gemma-4.gguf (what
    its converter wrote for the 26B-A4B's tokenizer): tokenizer.json's vocabulary and merges
    with the special and marker tokens added; tokenizer_config.json naming the special tokens
    as the released one does, the unnamed one (<|video|>) in a list as released
    (transformers5) or, with the named ones, in an object: the form transformers 4.57 (the
    converter's) reads; chat_template.jinja. Returns the number of tokens."""
    f = gguf.GGUFReader(src_gguf).fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode().split(" ") for i in f["tokenizer.ggml.merges"].data]
    assert len(set(toks)) == len(toks) and all(len(m) == 2 for m in merges)
    added = [{"id": i, "content": t, "special": True} for i, t in enumerate(toks) if types[i] in (3, 4)]
    extra = ["<|video|>"] if transformers5 else {**GEMMA4_NAMED, "video_token": "<|video|>"}
    gemma4_tokenizer_files(d, {t: i for i, t in enumerate(toks)}, merges, added, extra,
                           bytes(f["tokenizer.chat_template"].parts[-1]).decode())
    return len(toks)


def compare_real_gemma4(src, binary, gguf, vocabs, tmp):
    """Gemma 4's released vocabulary on a tiny random model: its tokenizer files as released
    (transformers 5's tokenizer_config.json) give llama.cpp's tokenizer keys for them, and in
    the form transformers 4.57 reads, both converters write the same file."""
    path = os.path.join(vocabs, "ggml-vocab-gemma-4.gguf")
    if not os.path.exists(path):
        raise SystemExit(f"no {path} (scripts/fetch-vocabs.sh)")
    want = {k: v for k, v in manifest(path, gguf)[0].items() if k.startswith("tokenizer.")}
    for transformers5 in (True, False):
        d = os.path.join(tmp, "gemma-4-5" if transformers5 else "gemma-4-4")
        os.makedirs(d)
        n = gemma4_released_tokenizer(d, path, gguf, transformers5)
        gemma4_weights(d, gemma4_config(d, n), 9)
        ours = os.path.join(tmp, "gemma-4-ours.gguf")
        subprocess.run([binary, "convert", d, "--outtype", "f16", "--outfile", ours], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if transformers5:
            got = {k: v for k, v in manifest(ours, gguf)[0].items() if k.startswith("tokenizer.")}
            same = list(got.items()) == list(want.items())
            verdict = "the tokenizer keys llama.cpp wrote" if same else "OTHER tokenizer keys than llama.cpp wrote"
            print(f"gemma-4: {n} tokens, the released tokenizer files: {verdict}")
        else:
            ref = os.path.join(tmp, "gemma-4-ref.gguf")
            subprocess.run([sys.executable, os.path.join(src, "convert_hf_to_gguf.py"), d, "--outtype", "f16",
                            "--outfile", ref], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            same = open(ref, "rb").read() == open(ours, "rb").read()
            print(f"gemma-4: {n} tokens, transformers 4's tokenizer_config.json: "
                  f"{'the same file' if same else 'DIFFERENT files'}")
        if not same:
            sys.exit(1)


def timed(cmd, env=None):
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, check=True)
    wall = next(l for l in r.stderr.splitlines() if "Elapsed (wall clock)" in l).split(": ")[-1]
    rss = int(next(l for l in r.stderr.splitlines() if "Maximum resident" in l).split(": ")[-1])
    return wall, rss / 1024


def compare_real(src, binary, gguf):
    vocabs = os.environ.get("EDGELLM_VOCABS", os.path.expanduser("~/.cache/edgellm/vocab"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, llama3 in (("llama-bpe", True), ("qwen2", False)):
            path = os.path.join(vocabs, f"ggml-vocab-{name}.gguf")
            if not os.path.exists(path):
                raise SystemExit(f"no {path} (scripts/fetch-vocabs.sh)")
            d = os.path.join(tmp, name)
            os.makedirs(d)
            n = released_tokenizer(d, path, llama3, gguf)
            synthetic_llama(d, 256, 512, 2, n, 4, 2)
            ref, ours = os.path.join(tmp, name + "-ref.gguf"), os.path.join(tmp, name + "-ours.gguf")
            subprocess.run([sys.executable, os.path.join(src, "convert_hf_to_gguf.py"), d, "--outtype", "f16",
                            "--outfile", ref], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            subprocess.run([binary, "convert", d, "--outtype", "f16", "--outfile", ours], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            same = open(ref, "rb").read() == open(ours, "rb").read()
            print(f"{name}: {n} tokens: {'the same file' if same else 'DIFFERENT files'}")
            if not same:
                sys.exit(1)
        compare_real_gemma4(src, binary, gguf, vocabs, tmp)


def bench(src, binary):
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "big")
        os.makedirs(d)
        synthetic_llama(d, 2048, 5632, 4, 32000, 16, 4)
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
            shutil.copy(os.path.join(OUT, "llama", f), d)
        env = dict(os.environ, FIXTURE_TOKENIZER_PRE="llama-bpe")
        for outtype in ("f16", "q8_0"):
            ref, ours = os.path.join(tmp, "ref.gguf"), os.path.join(tmp, "ours.gguf")
            for _ in range(2):  # (the second of each, on a warm page cache)
                w1, m1 = timed([binary, "convert", d, "--outtype", outtype, "--outfile", ours])
                w2, m2 = timed([sys.executable, "-c", WRAPPER, src, d, "--outtype", outtype, "--outfile", ref], env)
            same = open(ref, "rb").read() == open(ours, "rb").read()
            print(f"{outtype}: edgellm {w1}, {m1:.0f} MiB; llama.cpp {w2}, {m2:.0f} MiB; "
                  f"{'the same file' if same else 'DIFFERENT files'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", help="make only these fixtures")
    ap.add_argument("--keep-checkpoints", action="store_true",
                    help="convert the checkpoints already in tests/data/convert (do not make them again)")
    ap.add_argument("--compare-real", action="store_true", help="released vocabularies at full size (see above)")
    ap.add_argument("--bench", action="store_true", help="time both converters on 600 MB (see above)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "edgellm"))
    a = ap.parse_args()
    src = llama_cpp_source()
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    import gguf
    if a.compare_real:
        return compare_real(src, a.bin, gguf)
    if a.bench:
        return bench(src, a.bin)
    import torch
    torch.manual_seed(0)
    for name, make, pre in FIXTURES:
        if a.only and name not in a.only:
            continue
        d = os.path.join(OUT, name)
        if not a.keep_checkpoints:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            make(d)
        result = {"how": "scripts/convert-fixtures.py: llama.cpp 0c1e57098 (llama-cpp-python 0.3.36's "
                         "vendor/llama.cpp) convert_hf_to_gguf.py %s --outtype T --outfile OUT" % name,
                  "tokenizer_pre_given": pre, "outtypes": {}}
        with tempfile.TemporaryDirectory() as tmp:
            common = None
            for outtype in OUTTYPES + ["auto"]:
                out = os.path.join(tmp, outtype + ".gguf")
                convert(src, d, outtype, out, pre)
                meta, tensors = manifest(out, gguf)
                if outtype == "auto":
                    result["auto_file_type"] = meta["general.file_type"]["value"]
                    continue
                file_type = meta.pop("general.file_type")
                if common is None:
                    common = meta
                elif meta != common:
                    raise SystemExit(f"{name}: metadata differs between outtypes")
                with open(out, "rb") as f:
                    file_sha256 = hashlib.sha256(f.read()).hexdigest()
                result["outtypes"][outtype] = {"general.file_type": file_type["value"], "file_sha256": file_sha256,
                                               "tensors": tensors}
            result["metadata"] = common
        write_json(os.path.join(d, "llama.cpp.json"), result)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name}: {len(result['outtypes']['f32']['tensors'])} tensors, {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
