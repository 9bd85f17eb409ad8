#pragma once
#define EDGELLM_VERSION "0.1.0"
