// The table entries, one per family (each in its own file).
#pragma once

#include "edgellm/arch.h"

namespace edgellm::arch {

const ArchInfo& llama();
const ArchInfo& qwen2();
const ArchInfo& qwen3();
const ArchInfo& gemma3();
const ArchInfo& gemma4();
const ArchInfo& phi3();
const ArchInfo& smollm3();
const ArchInfo& lfm2();

// llama.cpp's LlamaModel converter, which SmolLM3's extends (llama.cpp).
void llama_convert(HfConvert& c);
void llama_convert_vocab(HfConvert& c);
// llama.cpp's Gemma3Model converter's keys, which Gemma 4's extends.
void gemma3_convert_keys(HfConvert& c);

}  // namespace edgellm::arch
