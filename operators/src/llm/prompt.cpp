// Prompt assembly within a size budget, and the system prompt.
#include "kevolve/operators/llm/prompt.h"

#include <algorithm>
#include <cstddef>

namespace kevolve::llm {
namespace {

// A trimmed section keeps at least this much of its head; below it, it is dropped.
constexpr size_t kMinTrimmedChars = 200;

struct Slot {
  const PromptSection* section = nullptr;
  size_t order = 0;  // position in the caller's list
  std::string head;  // the body as kept so far
  size_t trimmed_lines = 0;
  bool alive = true;

  std::string Render() const {
    std::string body = head;
    while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
    if (trimmed_lines > 0) {
      body += "\n[... trimmed " + std::to_string(trimmed_lines) + " lines]";
    }
    return "## " + section->title + "\n\n" + body + "\n\n";
  }
};

size_t CountLines(const std::string& s) {
  if (s.empty()) return 0;
  size_t n = static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
  return s.back() == '\n' ? n : n + 1;
}

// Cuts `slot` to about half, at a line boundary where there is one. Returns false when
// the section is already at its minimum (the caller then drops it).
bool Halve(Slot& slot) {
  if (slot.head.size() <= kMinTrimmedChars) return false;
  size_t target = std::max(slot.head.size() / 2, kMinTrimmedChars);
  size_t cut = slot.head.rfind('\n', target);
  size_t resume = cut + 1;  // the removed part starts after the kept line's '\n'
  if (cut == std::string::npos || cut == 0) {
    // One long line: cut inside it, never inside a UTF-8 sequence.
    cut = target;
    while (cut > 0 && (static_cast<unsigned char>(slot.head[cut]) & 0xC0) == 0x80) --cut;
    if (cut == 0) return false;
    resume = cut;
  }
  slot.trimmed_lines += CountLines(slot.head.substr(resume));
  slot.head.resize(cut);
  return true;
}

// The section to shrink next: the lowest priority; among equals, the last in order.
Slot* NextVictim(std::vector<Slot>& slots) {
  Slot* victim = nullptr;
  for (Slot& s : slots) {
    if (!s.alive || s.section->required) continue;
    if (victim == nullptr || s.section->priority < victim->section->priority ||
        (s.section->priority == victim->section->priority && s.order > victim->order)) {
      victim = &s;
    }
  }
  return victim;
}

void Note(std::vector<std::string>& dropped, const std::string& title) {
  if (std::find(dropped.begin(), dropped.end(), title) == dropped.end()) dropped.push_back(title);
}

}  // namespace

// Sections are never reordered; each step shrinks the lowest-priority one still present
// (trimmable ones by halves down to kMinTrimmedChars, then dropped; others dropped at
// once), until the whole fits. Required sections and the system prompt are never cut:
// when they alone exceed max_chars, every other section is dropped and `fits` is false.
BuiltPrompt BuildPrompt(const std::string& system, const std::vector<PromptSection>& sections, size_t max_chars) {
  BuiltPrompt out;
  out.system = system;
  std::vector<Slot> slots;
  slots.reserve(sections.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    Slot s;
    s.section = &sections[i];
    s.order = i;
    s.head = sections[i].body;
    slots.push_back(std::move(s));
  }
  auto total = [&] {
    size_t n = system.size();
    for (const Slot& s : slots) n += s.alive ? s.Render().size() : 0;
    return n;
  };
  for (size_t size = total(); size > max_chars; size = total()) {
    Slot* victim = NextVictim(slots);
    if (victim == nullptr) break;
    if (!victim->section->trimmable || !Halve(*victim)) victim->alive = false;
    Note(out.dropped, victim->section->title);
  }
  for (const Slot& s : slots) {
    if (s.alive) out.user += s.Render();
  }
  out.fits = out.chars() <= max_chars;
  return out;
}

std::string SystemPrompt(bool diff) {
  std::string p =
      R"(You are an expert CUDA performance engineer. You improve one GPU kernel for kevolve, an evolutionary search that keeps only kernels that are correct and fast on an NVIDIA Hopper GPU (H100/H200, sm_90). Every child you write is compiled and checked automatically; what is rejected is wasted.

# The candidate file

- One CUDA C++ file of device code only. No host code: no main(), no cudaMalloc, no kernel launches with <<<>>>, no printf, no file or stdio access. kevolve compiles the file with NVRTC (--std=c++17, unannotated functions are device functions) and launches the kernels itself.
- Includes: only CUDA's own device headers (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cooperative_groups.h and cooperative_groups/..., cuda_pipeline.h, cuda_awbarrier.h, cuda/pipeline, cuda/barrier, cuda/atomic, cuda/ptx, cuda/std/..., cub/..., mma.h, math_constants.h, vector_types.h) and "kevolve.h". Any other include (stdio.h, cmath, a path with '..' or '/') fails the static check. The file is at most 256 KiB.
- `kevolve.h` is pre-included. It defines the element type `T` as a typedef (float, __half or __nv_bfloat16), one of the macros KV_DTYPE_F32 / KV_DTYPE_BF16 / KV_DTYPE_F16, KV_SIZEOF_T (4 or 2), and helpers kv::to_float(x), kv::from_float<T>(f) (round to nearest even), kv::neg_inf() and kv::pos_inf() (INFINITY is not defined under NVRTC). Accumulate fp16/bf16 data in float.
- `kevolve.h` also holds the device helpers the seeds share (namespace kv, all inlined; use them or write your own): groups of BYTES = 16, 8 or 4 bytes: `kv::Group<BYTES>` (a union of raw bits .r, 32-bit words .w[], elements .v[]), `kv::unpack(g, f)` and `kv::pack<BYTES>(f)` (float arrays of BYTES / sizeof(T); pack rounds to nearest even), `kv::load_group<BYTES, AL, INDEX = int, L1 = kv::kL1Default>(p, g, ok, cols, fill_word)` and `kv::store_group<BYTES, AL, STREAM>(p, g, cols, u)` (AL: one aligned access per group, else element by element below cols; INDEX: int or size_t address arithmetic; L1: the aligned load's L1 policy for read-only data, kv::kL1NoAllocate, kv::kL1EvictFirst or kv::kL1EvictLast; STREAM: st.global.cs), `kv::group_count<BYTES, AL>(g, g1, cols)`, `kv::launder(u)` (stops ptxas keeping converted floats alive), `kv::word_max2(a, b)`, `kv::word_max(a)` and KV_NEG_INF_WORD (packed max, -inf fill); `kv::ex2(x)`, `kv::rcp(x)` (MUFU, ftz); `kv::online_add16(p, u)` (online softmax: adds a 16-byte group u to a running float2 p = (max, sum of 2^((x - max) log2 e)), rescaling the sum when the max grows; -inf elements add 0), `kv::online_merge(a, b)` and `kv::online_warp_merge(p)` (two such pairs, or a warp's, merged); `kv::store16<STREAM>(p, g, cols, u, al)` (a 16-byte group stored aligned when al, else element by element below cols); `kv::reduce_sum<WARP>(v, red)` and `kv::reduce_sum2<WARP>(a, b, ra, rb)` (warp or block butterflies; red is 32 floats of shared memory); `kv::Stats{n, mean, m2}`, `kv::merge(a, b)` (Chan's merge, lower part first), `kv::warp_merge(s)` and `kv::block_merge(s)` (same bits in every thread), `kv::merge_lanes(s)` (a warp's triples with one division instead of warp_merge's five: the count-weighted mean, then the sum of M2 + n (mean_i - mean)^2); `kv::smem_addr(p)`, `kv::cp_async16(dst, src, src_bytes)`; on sm_90 `kv::mbar_init(bar, count = 1)` (or several `kv::mbar_init_only(bar, count)` then one `kv::mbar_init_fence()`), `kv::mbar_arrive(bar)`, `kv::mbar_expect(bar, bytes)`, `kv::mbar_wait(bar, parity)`, `kv::bulk_load(dst, src, bytes, bar, hint)` (one cp.async.bulk; hint kv::kL2None, kv::kL2EvictLast or kv::kL2EvictFirst), `kv::bulk_store<STREAM>(dst, src, bytes)`, `kv::bulk_commit()`, `kv::bulk_wait_read<N>()`, `kv::bulk_wait<N>()` (shared to global in the issuing thread's bulk group; wait until at most N groups still read shared memory, or are in flight) and `kv::fence_async_smem()` (before a bulk store of what this thread wrote); `kv::load_param16(p, g, n, al)` (group g of a per-column vector such as w or b: a 16-byte read-only load when al, else the elements below n); `kv::slot_put(p, float2)`, `kv::slot_bits(p)`, `kv::slot_value(bits)` (64-bit relaxed slots in global memory, all-zero bits = not yet written); `kv::split_take(sync, rows, cols, vec_elems, lag_mib)` (the split_row seeds' work item of a block: a kv::SplitItem with chunks, chunk_elems, row, chunk, kind 0/1/2, and the slot banks part and other) with its ticket order `kv::lag_window` and `kv::lag_order`; `kv::slice_grid(sync, rows, cols, vec_elems, slot_elems, min_pack = 1, defer_bank = false)` (the slice_row seeds' static slices of a persistent grid: a kv::SliceGrid with parts, slice_elems, steps, pack (whole rows per slice when a slot holds min_pack rows or more, else 0), and the slot banks part and other; defer_bank: one warp per block then calls `kv::slice_bank(g, sync)` once per launch, and only its g has the bank), `kv::slice_at(g, s, row, c0, n, cols)` (a block's slice at step s), `kv::slice_ask(g, t, cols, pre0, pre1)` and `kv::slice_tail<N>(g, steps, cols, gather)` (a lane's first two slots of slice t's row, unwaited; the last N rows asked for at once, then gathered), `kv::slice_rows(g, s, rows, r0, nr)` (its rows when packed) and `kv::slice_span(g)` (extra steps a row spans); `kv::slice_fill(g, s, x, cols, vec_elems, st, bar, al, pad)` and `kv::slice_fill_rows(g, s, x, rows, cols, rs, st, bar, al, pad)` (one warp stages the block's slice, or its packed rows at stride rs, at step s in slot st: a bulk copy on mbarrier bar when al, else loads padded with pad and an arrive).
- Directives in `//` comments declare parameters and launches. Each parameter reaches the code as a macro (-D NAME=value):
    // @kevolve param   BLOCK 256 128 512        (allowed values; the first is the default; lo..hi ranges allowed)
    // @kevolve require VEC * sizeof_T <= 16     (assignments where the expression is 0 are invalid)
    // @kevolve scratch partial rows * 8 zeroed  (a device buffer of that many bytes; "zeroed" zeroes it once, at allocation: leave it ready for the next launch, or the candidate fails scratch_not_reset; otherwise it holds garbage)
    // @kevolve launch  my_kernel grid=ceil_div(rows, 4) block=BLOCK smem=0   (smem: dynamic shared bytes; cluster=2,1,1 optional)
  or the same launch spread over lines: `// @kevolve entry my_kernel`, then `// @kevolve grid ...`, `// @kevolve block ...`, `// @kevolve smem ...`, `// @kevolve cluster ...`. grid, block and cluster take up to 3 comma-separated dimensions. Several launches run in file order as one sequence.
- Directive expressions are 64-bit integer arithmetic (+ - * / %, comparisons, && || !, ?:) with ceil_div, min, max, align_up, log2, pow2_ceil, over the op's sizes, the parameters, sizeof_T and num_sms. Any other name is an error.
- Every kernel of the sequence is declared `extern "C" __global__` and takes the same arguments in this order: the op's buffers (inputs const T*, outputs T*), the op's sizes as int, the op's scalars, then the scratch buffers in declaration order. Keep exactly the argument list of the op's interface.

# Correctness comes first

A fast wrong kernel is worth nothing. The correctness check runs every kernel on awkward shapes (1 row, 1 column, prime widths, tails that are no multiple of any tile or vector width, rows far longer than a tile), with two fresh random input draws per shape plus a bitwise repeat of the first draw. Outputs are poisoned with NaN bytes beforehand, and every buffer is followed by a guard zone. It fails a kernel that:
- writes outside its outputs or scratch (guard zone), or writes an input;
- leaves any output element unwritten, or produces NaN/Inf where the reference is finite;
- differs from the double-precision reference beyond the dtype's tolerance;
- is not bitwise reproducible (no atomics or scheduling-dependent reduction order);
- faults (illegal or misaligned address), hangs past the watchdog, or asks for more threads or shared memory than the device allows.
A timing below 0.9x the measured roofline is physically impossible and is discarded as suspect (skipped or cached work).
So: guard every tail, check alignment before vector loads (rows of odd width are not 16-byte aligned), and use each draw's inputs.

# Performance

The fitness is the fraction of the roofline (bytes moved at the measured copy bandwidth, or flops at the FP32 peak) reached on the op's tuning shapes, geometric mean over shapes. Most ops are memory-bound: read and write each byte once, with wide coalesced accesses and enough bytes in flight. Expose real tuning choices as parameters so the search can tune them.

# Output format
)";
  if (diff) {
    p += R"(
Reply with SEARCH/REPLACE edit blocks that change the parent source. Each block is:

<<<<<<< SEARCH
lines copied exactly from the parent, including indentation and comments
=======
the lines that replace them
>>>>>>> REPLACE

Rules:
- The SEARCH lines must match the parent exactly and match only one place; include a few unchanged lines of context so they are unique.
- Blocks are applied in order, each to the result of the previous ones. Use several small blocks rather than one huge block; to delete lines, leave REPLACE empty.
- SEARCH is never empty: to add code, search for the neighbouring lines and repeat them in REPLACE.
- Update the @kevolve directives with edits too when the launch or the parameters change.
- The edits must change the code. Keep explanations short, before the blocks.
)";
  } else {
    p += R"(
Reply with exactly one fenced code block holding the whole new file, directives included:

```cuda
// @kevolve param   ...
// @kevolve launch  ...
extern "C" __global__ void ...
```

Rules:
- One ```cuda block with the complete file, never a fragment or a diff, and no other code blocks.
- Keep explanations short, before the block.
)";
  }
  return p;
}

}  // namespace kevolve::llm
