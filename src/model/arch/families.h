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

}  // namespace edgellm::arch
