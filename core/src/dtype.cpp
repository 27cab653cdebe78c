#include "kevolve/core/dtype.h"

namespace kevolve {

std::optional<DType> ParseDType(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "fp32") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "fp16" || name == "half") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f64" || name == "float64") return DType::kF64;
  if (name == "i32" || name == "int32") return DType::kI32;
  return std::nullopt;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
  }
  return "?";
}

const char* DTypeCppName(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    case DType::kF64: return "double";
    case DType::kI32: return "int";
  }
  return "?";
}

int DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF64: return 8;
  }
  return 0;
}

}  // namespace kevolve
