// An op spec: what to compute, on which shapes, how to judge it. Loaded from
// configs/ops/<op>/op.json (JSON with comments); see README "Op specs".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kevolve/core/dtype.h"
#include "kevolve/core/expr.h"
#include "kevolve/core/status.h"

namespace kevolve {

enum class BufferRole { kIn, kOut };

// How an input buffer is filled: per draw, scale and offset are drawn uniformly from
// their ranges, then elements are dist() * scale + offset.
struct Distribution {
  std::string kind = "normal";  // normal | uniform (on [-1, 1])
  double scale_lo = 1.0, scale_hi = 1.0;
  double offset_lo = 0.0, offset_hi = 0.0;
};

struct BufferSpec {
  std::string name;
  BufferRole role = BufferRole::kIn;
  std::string dtype = "T";      // "T" (the variant's type) or a concrete dtype name
  std::vector<Expr> shape;      // element count = product
  Distribution dist;            // inputs only
};

struct ScalarSpec {
  std::string name;
  DType type = DType::kF32;     // f32 (float) or i32 (int)
  double value = 0.0;
};

struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  int64_t max_mismatch = 0;     // elements allowed outside atol + rtol*|ref|
  double min_cossim = 0.0;      // 0 disables
};

struct Shape {
  Env sizes;                    // {"rows": 4096, "cols": 1024}
  std::string label;            // "4096x1024", in the order of OpSpec::sizes
};

struct OpSpec {
  std::string name;
  std::string description;
  std::string dir;              // the spec's folder
  std::string file;             // the spec file's path
  std::vector<std::string> sizes;      // scalar size arguments, in kernel order
  std::vector<ScalarSpec> scalars;     // extra scalar arguments (eps, ...)
  std::vector<BufferSpec> buffers;     // kernel order: as listed
  std::vector<DType> dtypes;
  std::map<DType, Tolerance> tolerances;
  bool deterministic = true;    // nondeterministic output fails correctness
  // Which peak bounds the flops: "fp32" (measured FMA peak) or a tensor-core rate from
  // configs/gpus.json: "bf16_tensor", "f16_tensor", "tf32_tensor", "fp8_tensor".
  std::string compute = "fp32";
  Expr cost_bytes;              // fewest bytes that must move, in terms of sizes, sizeof_T
  Expr cost_flops;
  std::string reference;        // absolute path of the reference kernel (.cu)
  std::vector<std::string> seeds;      // absolute paths of seed candidates
  std::vector<Shape> tune, check, heldout;

  // Environment for expressions: sizes, sizeof_T and dtype-independent constants.
  Env MakeEnv(const Shape& shape, DType dtype) const;
  // Element count of a buffer at a shape.
  Result<int64_t> Elements(const BufferSpec& b, const Shape& shape, DType dtype) const;
  DType BufferDType(const BufferSpec& b, DType variant) const;
  bool HasDType(DType t) const;
};

// A shape written as on the command line and in labels: the op's sizes in order, joined
// by 'x' ("1024x131072" for rows x cols, "4096x4096x512" for M x N x K). Every size must
// be a positive integer that fits an int (kernels take sizes as int). The error says what
// the op expects.
Result<Shape> ParseShapeLabel(const OpSpec& op, const std::string& text);

// Loads and validates configs/ops/<name>/op.json under `dir`. Errors name the file, the
// field and what is wrong, one per line.
Result<OpSpec> LoadOpSpec(const std::string& dir);

// The op folders under a configs/ops root, sorted by name.
std::vector<std::string> ListOpDirs(const std::string& ops_root);

}  // namespace kevolve
