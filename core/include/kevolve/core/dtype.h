// Element types the harness knows. Candidates see the op's element type as the macro T.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kevolve {

enum class DType { kF32, kF16, kBF16, kF64, kI32 };

std::optional<DType> ParseDType(const std::string& name);  // "f32", "bf16", ...
const char* DTypeName(DType t);                             // "f32"
const char* DTypeCppName(DType t);                          // "float", "__nv_bfloat16"
int DTypeSize(DType t);                                     // bytes

}  // namespace kevolve
