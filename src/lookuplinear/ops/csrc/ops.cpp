// lookuplinear's operators in PyTorch's dispatcher: every schema, the CPU kernels over the C
// kernels of this folder (compiled into the same shared library), and the torch-op twins
// (CompositeExplicitAutograd) that run on every other device.
//
// The schemas are the ones lookuplinear/ops/library.py registers from Python where this
// library is not built (or was built for another torch): both sides give the same bits on the
// CPU (tests/test_library.py). The fake (shape) implementations are registered from Python
// on top of these, and so are the backward formulas of the operators that have none here; a
// process that only runs a compiled graph (AOTInductor) needs neither, and loads this library
// alone: torch.ops.load_library(path).
//
// Bad input raises from inside the kernels, with the messages of the Python side:
// TORCH_CHECK_INDEX (Python's IndexError) for an index outside the table, TORCH_CHECK_VALUE
// (ValueError) for offsets or weights that do not fit the entries.
#include <torch/library.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/graph_task.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <limits>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

extern "C" {
int64_t ll_gather_rows_f32(const float *w, int64_t num_rows, int64_t dim, const int64_t *rows,
                           int64_t n, float *out);
int64_t ll_gather_rows_f64(const double *w, int64_t num_rows, int64_t dim, const int64_t *rows,
                           int64_t n, double *out);
int64_t ll_first_outside(const int64_t *rows, int64_t n, int64_t num_rows);
void ll_gather_into_f32(int64_t n_tables, const float *const *ws, const int64_t *dims,
                        const int64_t *const *rows, int64_t n, const int64_t *f,
                        const int64_t *const *cols, float *out, int64_t ld);
void ll_gather_into_f64(int64_t n_tables, const double *const *ws, const int64_t *dims,
                        const int64_t *const *rows, int64_t n, const int64_t *f,
                        const int64_t *const *cols, double *out, int64_t ld);
void ll_interleave(int64_t n, int64_t n_seg, char *const *blocks, const int64_t *block_ld,
                   const int64_t *seg_block, const int64_t *seg_off, const int64_t *seg_len,
                   char *out, int64_t out_ld, int64_t to_out);
void ll_idmap_find(const int64_t *table, int64_t mask, const int64_t *keys, int64_t n,
                   int64_t *out);
int64_t ll_murmur3_32(const uint8_t *data, int64_t n);
#define LL_BAG_MAX_DECL(T, I, SFX)                                                           \
    int64_t ll_bag_max_##SFX(const T *w, int64_t rows, int64_t dim, const I *idx,         \
                             const I *offsets, int64_t n_bags, T *out, int64_t *arg);
LL_BAG_MAX_DECL(float, int32_t, f32_i32)
LL_BAG_MAX_DECL(float, int64_t, f32_i64)
LL_BAG_MAX_DECL(double, int32_t, f64_i32)
LL_BAG_MAX_DECL(double, int64_t, f64_i64)
void ll_bag_max_backward_f32(float *grad_w, const int64_t *arg, const float *grad_out,
                             int64_t n_bags, int64_t dim);
void ll_bag_max_backward_f64(double *grad_w, const int64_t *arg, const double *grad_out,
                             int64_t n_bags, int64_t dim);
int64_t ll_offsets_ok_i32(const int32_t *o, int64_t n, int64_t nnz, int64_t include_last);
int64_t ll_offsets_ok_i64(const int64_t *o, int64_t n, int64_t nnz, int64_t include_last);
#define LL_MODE_WEIGHTS_DECL(T, I, SFX)                                                      \
    void ll_mode_weights_##SFX(const I *offsets, int64_t n_bags, const T *w, int64_t sqrt_, \
                               T *out);
LL_MODE_WEIGHTS_DECL(float, int32_t, f32_i32)
LL_MODE_WEIGHTS_DECL(float, int64_t, f32_i64)
LL_MODE_WEIGHTS_DECL(double, int32_t, f64_i32)
LL_MODE_WEIGHTS_DECL(double, int64_t, f64_i64)
int64_t ll_group_rows_f32(const int64_t *idx, int64_t n, const int64_t *offsets, int64_t n_bags,
                          int64_t padding_idx, const float *weights, const float *grad_out,
                          int64_t dim, int64_t *rows_out, float *values_out);
int64_t ll_group_rows_f64(const int64_t *idx, int64_t n, const int64_t *offsets, int64_t n_bags,
                          int64_t padding_idx, const double *weights, const double *grad_out,
                          int64_t dim, int64_t *rows_out, double *values_out);
}

namespace lookuplinear {
namespace {

using at::Tensor;
using c10::optional;

bool is_f32_f64(const Tensor &t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble;
}
bool is_i32_i64(const Tensor &t) {
    return t.scalar_type() == at::kInt || t.scalar_type() == at::kLong;
}
// the real floating dtypes: a table's, a gradient's (the C kernels take float32 and float64,
// the torch-op twins float16 and bfloat16 too)
bool is_real_float(at::ScalarType t) {
    return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble;
}

// ---- checks, with the Python side's messages ---------------------------------------------

// IndexError naming the first index outside [0, num_rows), if any (found by one vectorized
// pass, ll_first_outside)
void check_range(const char *op, const Tensor &indices, int64_t num_rows) {
    const Tensor flat = indices.reshape(-1).to(at::kLong).contiguous();
    const int64_t *p = flat.data_ptr<int64_t>();
    const int64_t k = ll_first_outside(p, flat.numel(), num_rows);
    TORCH_CHECK_INDEX(k < 0, "lookuplinear::", op, ": index ", k < 0 ? 0 : p[k], " at indices[",
                      k, "] is out of range for a table of ", num_rows, " rows. Map the IDs "
                      "into [0, ", num_rows, ") first (hashing=, or an IdMap for raw IDs), or "
                      "make the table larger.");
}

// ValueError unless `what` (an operand's dtype) is a real floating dtype
void check_float(const char *op, const char *what, at::ScalarType dtype) {
    TORCH_CHECK_VALUE(is_real_float(dtype), "lookuplinear::", op, ": ", what, " must be a real "
                      "floating dtype (float32, float64, float16 or bfloat16); got ", dtype,
                      ". Convert it first (.float()).");
}

// ValueError unless padding_idx is a row of a table of num_rows rows (or `none`, the value
// that means no padding)
void check_padding(const char *op, const char *what, int64_t padding_idx, int64_t num_rows,
                   optional<int64_t> none = c10::nullopt) {
    TORCH_CHECK_VALUE((none.has_value() && padding_idx == *none) ||
                          (padding_idx >= 0 && padding_idx < num_rows),
                      "lookuplinear::", op, ": ", what, " must be a row of the table, in [0, ",
                      num_rows, ")", none.has_value() ? ", or " + std::to_string(*none) +
                      " for none" : std::string(", or None"), "; got ", padding_idx,
                      ". Normalize it first (a negative padding_idx counts from the end, as "
                      "nn.Embedding's).");
}

// include_last: CSR offsets (N + 1, the last the end), else nn.EmbeddingBag's N start offsets
bool offsets_ok(const Tensor &offsets, int64_t nnz, bool include_last = true) {
    const Tensor o = offsets.contiguous();
    if (o.scalar_type() == at::kInt)
        return ll_offsets_ok_i32(o.data_ptr<int32_t>(), o.numel(), nnz, include_last) != 0;
    const Tensor l = o.to(at::kLong).contiguous();
    return ll_offsets_ok_i64(l.data_ptr<int64_t>(), l.numel(), nnz, include_last) != 0;
}

// ValueError unless `offsets` are the CSR offsets of nnz entries (the C kernels read the
// entries they name); include_last=false: nn.EmbeddingBag's start offsets, the last at most
// nnz
void check_offsets(const char *op, const Tensor &offsets, int64_t nnz,
                   bool include_last = true) {
    if (offsets_ok(offsets, nnz, include_last)) return;
    const Tensor head = offsets.reshape(-1).slice(0, 0, 8).to(at::kLong).contiguous();
    std::ostringstream got;
    got << "[";
    for (int64_t k = 0; k < head.numel(); k++)
        got << (k ? ", " : "") << head.data_ptr<int64_t>()[k];
    got << "]" << (offsets.numel() > 8 ? " ..." : "");
    TORCH_CHECK_VALUE(false, "lookuplinear::", op, ": offsets must start at 0, never decrease "
                      "and ", include_last ? "end at" : "stay within", " the number of entries, ",
                      nnz, "; got ", got.str(), " (",
                      offsets.numel(), " offsets). Build the batch with Bags or KeyedBags (they "
                      "check it), or give lengths instead of offsets.");
}

// ---- bag_lookup --------------------------------------------------------------------------
// mode: ATen's embedding_bag modes 0 (sum) and 1 (mean: each bag's sum divided by its number of
// non-padding entries, an empty bag 0; unweighted, as ATen's)

void check_pooling(const optional<Tensor> &offsets, const optional<Tensor> &weights,
                   int64_t mode) {
    TORCH_CHECK_VALUE(mode == 0 || mode == 1, "lookuplinear::bag_lookup: mode must be 0 (sum) or "
                      "1 (mean), ATen's embedding_bag modes; got ", mode, ". A max is the "
                      "operator lookuplinear::bag_max.");
    TORCH_CHECK_VALUE(mode == 0 || offsets.has_value(), "lookuplinear::bag_lookup: mode=1 "
                      "(mean) pools bags, so it needs offsets; got none. Give the bags' offsets, "
                      "or mode=0 for a lookup of each index.");
    TORCH_CHECK_VALUE(mode == 0 || !weights.has_value(), "lookuplinear::bag_lookup: mode=1 "
                      "(mean) takes no per-entry weights (ATen's embedding_bag takes them for "
                      "a sum only); got weights. Use mode=0 with the weights divided by their "
                      "bag's total.");
    TORCH_CHECK_VALUE(offsets.has_value() || !weights.has_value(), "lookuplinear::bag_lookup: "
                      "per-entry weights scale the entries of bags, so they need offsets; got "
                      "weights and no offsets. Give the bags' offsets (one index a bag: "
                      "torch.arange(n + 1)), or no weights.");
}

Tensor bag_lookup_twin(const Tensor &weight, const Tensor &indices,
                       const optional<Tensor> &offsets, const optional<Tensor> &weights,
                       optional<int64_t> padding_idx, int64_t mode, bool include_last_offset) {
    if (!offsets.has_value()) return at::embedding(weight, indices, padding_idx.value_or(-1));
    // ATen's forward-only kernel: the operator's backward is its own, so the offset2bag and
    // bag sizes that embedding_bag builds for its backward would be wasted (about half of a
    // 128-bag lookup); the same sums, in the same order. It reads indices and offsets as
    // contiguous whatever their strides (embedding_bag makes them so before calling it)
    return std::get<0>(at::_embedding_bag_forward_only(
        weight, indices.contiguous(), offsets->contiguous(), false, mode, false, weights,
        include_last_offset, padding_idx.value_or(-1)));
}

Tensor bag_lookup_other(const Tensor &weight, const Tensor &indices,
                        const optional<Tensor> &offsets, const optional<Tensor> &weights,
                        optional<int64_t> padding_idx, int64_t mode, bool include_last_offset) {
    check_pooling(offsets, weights, mode);
    if (padding_idx.has_value() && weight.dim() == 2)
        check_padding("bag_lookup", "padding_idx", *padding_idx, weight.size(0));
    try {
        return bag_lookup_twin(weight, indices, offsets, weights, padding_idx, mode,
                               include_last_offset);
    } catch (const c10::Error &) {
        if (weight.dim() == 2) check_range("bag_lookup", indices.cpu(), weight.size(0));
        throw;
    }
}

Tensor bag_lookup_cpu(const Tensor &weight, const Tensor &indices,
                      const optional<Tensor> &offsets, const optional<Tensor> &weights,
                      optional<int64_t> padding_idx, int64_t mode, bool include_last_offset) {
    check_pooling(offsets, weights, mode);
    if (padding_idx.has_value() && weight.dim() == 2)
        check_padding("bag_lookup", "padding_idx", *padding_idx, weight.size(0));
    if (!offsets.has_value() && weight.dim() == 2 && is_f32_f64(weight) &&
        weight.is_contiguous() && is_i32_i64(indices)) {
        // an index lookup: the C gather (fixed-width copies, the rows ahead prefetched)
        const Tensor rows = indices.to(at::kLong).contiguous();
        std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
        shape.push_back(weight.size(1));
        Tensor out = at::empty(shape, weight.options());
        const int64_t bad =
            weight.scalar_type() == at::kFloat
                ? ll_gather_rows_f32(weight.data_ptr<float>(), weight.size(0), weight.size(1),
                                     rows.data_ptr<int64_t>(), rows.numel(),
                                     out.data_ptr<float>())
                : ll_gather_rows_f64(weight.data_ptr<double>(), weight.size(0), weight.size(1),
                                     rows.data_ptr<int64_t>(), rows.numel(),
                                     out.data_ptr<double>());
        if (bad >= 0) check_range("bag_lookup", indices, weight.size(0));
        return out;
    }
    // the offsets as Bags checks them (ATen's CPU kernel, on one thread, takes decreasing ones)
    if (offsets.has_value() && is_i32_i64(*offsets) && offsets->dim() == 1)
        check_offsets("bag_lookup", *offsets, indices.numel(), include_last_offset);
    return bag_lookup_other(weight, indices, offsets, weights, padding_idx, mode,
                            include_last_offset);
}

// ---- in_feature_order --------------------------------------------------------------------

// the (N, width) blocks of `outs`: a feature-major output (features[i] = F, (F * N, dim)) is
// one block per feature, an example-major one (0) one block
std::vector<Tensor> blocks_of(at::TensorList outs, at::IntArrayRef features) {
    const char *op = "lookuplinear::in_feature_order";
    TORCH_CHECK_VALUE(!outs.empty() && outs.size() == features.size(), op,
                      ": one feature count per output (", outs.size(), " outputs, ",
                      features.size(), " counts)");
    for (size_t i = 0; i < outs.size(); i++)
        TORCH_CHECK_VALUE(features[i] >= 0 && outs[i].dim() == 2, op, ": the outputs are 2-D, "
                          "(F * N, dim) or (N, width), with feature counts F >= 0; got output ",
                          i, " of shape ", outs[i].sizes(), " and the count ", features[i]);
    const int64_t n = features[0] ? outs[0].size(0) / features[0] : outs[0].size(0);
    for (size_t i = 0; i < outs.size(); i++) {
        const int64_t f = features[i] ? features[i] : 1;
        TORCH_CHECK_VALUE(outs[i].size(0) == f * n, op, ": output ", i, " has ",
                          outs[i].size(0), " rows; its ", f, " block(s) of the batch's ", n,
                          " rows (output 0's) take ", f * n);
    }
    std::vector<Tensor> blocks;
    for (size_t i = 0; i < outs.size(); i++) {
        if (!features[i]) {
            blocks.push_back(outs[i]);
            continue;
        }
        for (const Tensor &b : outs[i].view({features[i], n, outs[i].size(1)}).unbind(0))
            blocks.push_back(b);
    }
    return blocks;
}

Tensor in_feature_order_twin(at::TensorList outs, at::IntArrayRef features,
                             at::IntArrayRef segments) {
    TORCH_CHECK_VALUE(segments.size() % 3 == 0, "lookuplinear::in_feature_order: segments are "
                      "(block, first column, columns) triples; got ", segments.size(),
                      " numbers");
    const std::vector<Tensor> blocks = blocks_of(outs, features);
    std::vector<Tensor> parts;
    for (size_t s = 0; s < segments.size(); s += 3) {
        const int64_t b = segments[s], first = segments[s + 1], cols = segments[s + 2];
        TORCH_CHECK_VALUE(b >= 0 && b < static_cast<int64_t>(blocks.size()) && first >= 0 &&
                              cols >= 0 && first + cols <= blocks[b].size(1),
                          "lookuplinear::in_feature_order: segment ", s / 3, " (", b, ", ",
                          first, ", ", cols, ") is not columns of one of the ", blocks.size(),
                          " blocks; build the segments with segment_triples");
        parts.push_back(blocks[b].narrow(1, first, cols));
    }
    if (parts.empty() && !blocks.empty())  // no columns: the CPU kernel's (N, 0)
        return blocks[0].new_empty({blocks[0].size(0), 0});
    return at::cat(parts, 1);
}

Tensor in_feature_order_cpu(at::TensorList outs, at::IntArrayRef features,
                            at::IntArrayRef segments) {
    const std::vector<Tensor> blocks = blocks_of(outs, features);
    bool c = segments.size() % 3 == 0;
    for (const Tensor &b : blocks)
        c = c && b.dim() == 2 && b.scalar_type() == blocks[0].scalar_type() && b.stride(1) == 1;
    const int64_t n_seg = static_cast<int64_t>(segments.size() / 3);
    for (int64_t s = 0; c && s < n_seg; s++) {
        const int64_t b = segments[3 * s], first = segments[3 * s + 1],
                      cols = segments[3 * s + 2];
        c = b >= 0 && b < static_cast<int64_t>(blocks.size()) && first >= 0 && cols >= 0 &&
            first + cols <= blocks[b].size(1);
    }
    if (!c) return in_feature_order_twin(outs, features, segments);
    // one C pass: each row's segments copied side by side (in bytes)
    const int64_t size = blocks[0].element_size(), n = blocks[0].size(0);
    int64_t total = 0;
    std::vector<int64_t> seg_block(n_seg), seg_off(n_seg), seg_len(n_seg);
    for (int64_t s = 0; s < n_seg; s++) {
        seg_block[s] = segments[3 * s];
        seg_off[s] = segments[3 * s + 1] * size;
        seg_len[s] = segments[3 * s + 2] * size;
        total += segments[3 * s + 2];
    }
    std::vector<char *> pointers;
    std::vector<int64_t> block_ld;
    for (const Tensor &b : blocks) {
        TORCH_CHECK_VALUE(b.size(0) == n, "lookuplinear::in_feature_order: every block has ",
                          n, " rows; got one of ", b.size(0));
        pointers.push_back(static_cast<char *>(b.data_ptr()));
        block_ld.push_back(b.stride(0) * size);
    }
    Tensor out = at::empty({n, total}, blocks[0].options());
    ll_interleave(n, n_seg, pointers.data(), block_ld.data(), seg_block.data(), seg_off.data(),
                  seg_len.data(), static_cast<char *>(out.data_ptr()), total * size, 1);
    return out;
}

// ---- idmap_find, idmap_rows --------------------------------------------------------------

Tensor idmap_find_cpu(const Tensor &table, const Tensor &keys) {
    TORCH_CHECK_VALUE(table.scalar_type() == at::kLong && table.dim() == 1,
                      "lookuplinear::idmap_find: the table is 1-D int64; got ",
                      table.scalar_type(), " of ", table.dim(), " dimensions");
    const int64_t slots = table.numel() / 2;  // the probe masks by slots - 1
    TORCH_CHECK_VALUE(table.numel() % 2 == 0 && slots >= 1 && (slots & (slots - 1)) == 0,
                      "lookuplinear::idmap_find: the table holds a power of 2 of (key, value) "
                      "slots; got ", table.numel(), " entries");
    const Tensor t = table.contiguous();
    const Tensor k = keys.reshape(-1).to(at::kLong).contiguous();
    Tensor out = at::empty_like(k);
    ll_idmap_find(t.data_ptr<int64_t>(), t.numel() / 2 - 1, k.data_ptr<int64_t>(), k.numel(),
                  out.data_ptr<int64_t>());
    return out;
}

// hash_ids of one int64 ID: abs(murmurhash3_32 of its 8 little-endian bytes) % num_rows,
// abs(-2**31) taken as 2**31 (scikit-learn's definition)
int64_t hashed_row(int64_t key, int64_t num_rows) {
    const int64_t h = ll_murmur3_32(reinterpret_cast<const uint8_t *>(&key), 8);
    return (h < 0 ? -h : h) % num_rows;
}

Tensor idmap_rows_cpu(const Tensor &found, const Tensor &keys, int64_t fallback_rows) {
    TORCH_CHECK_VALUE(fallback_rows >= 0, "lookuplinear::idmap_rows: fallback_rows (the "
                      "rows before the map's) must be >= 0; got ", fallback_rows);
    TORCH_CHECK_VALUE(found.numel() == keys.numel(), "lookuplinear::idmap_rows: one found "
                      "value per key; got ", found.numel(), " values for ", keys.numel(),
                      " keys");
    const Tensor f = found.to(at::kLong).contiguous();
    const Tensor k = keys.to(at::kLong).contiguous();
    Tensor rows = at::empty_like(f);
    const int64_t *fp = f.data_ptr<int64_t>(), *kp = k.data_ptr<int64_t>();
    int64_t *rp = rows.data_ptr<int64_t>();
    for (int64_t i = 0; i < f.numel(); i++) {
        if (fp[i] < 0) {  // only the keys the map does not hold are hashed
            TORCH_CHECK_VALUE(fallback_rows >= 1, "lookuplinear::idmap_rows: a key absent "
                              "from the map is hashed into fallback_rows, which must be >= 1; "
                              "got ", fallback_rows);
            rp[i] = hashed_row(kp[i], fallback_rows);
        } else {
            rp[i] = fp[i] + fallback_rows;
        }
    }
    return rows.to(found.scalar_type());
}

// ---- idmap_find, idmap_rows on other devices (torch ops) -------------------------------
// (the Python twins' formulas: library._idmap_find_twin, library._idmap_rows_twin)

// the slots sorted by key (a filled slot before an empty one of the same key), then a binary
// search: O(size log size) per call where the CPU's probe is O(1), and no loop on the host
Tensor idmap_find_twin(const Tensor &table, const Tensor &keys) {
    TORCH_CHECK_VALUE(table.scalar_type() == at::kLong && table.dim() == 1,
                      "lookuplinear::idmap_find: the table is 1-D int64; got ",
                      table.scalar_type(), " of ", table.dim(), " dimensions");
    const Tensor k = keys.reshape(-1).to(at::kLong);
    const Tensor slot_keys = table.slice(0, 0, std::nullopt, 2);
    const Tensor values = table.slice(0, 1, std::nullopt, 2);
    const Tensor by_fill = std::get<1>(at::sort(values.lt(0).to(at::kChar), true, 0, false));
    const Tensor order = by_fill.index_select(
        0, std::get<1>(at::sort(slot_keys.index_select(0, by_fill), true, 0, false)));
    const Tensor sorted_keys = slot_keys.index_select(0, order);
    const Tensor sorted_values = values.index_select(0, order);
    const Tensor at_ = at::searchsorted(sorted_keys, k).clamp_max(sorted_keys.numel() - 1);
    return at::where(sorted_keys.index_select(0, at_).eq(k), sorted_values.index_select(0, at_),
                     c10::Scalar(int64_t{-1}));
}

constexpr int64_t M32 = 0xFFFFFFFF;

Tensor rotl32(const Tensor &x, int64_t r) {
    return (x.__lshift__(r) | x.__rshift__(32 - r)) & M32;
}

// x * c mod 2**32 for 32-bit x held in int64, c split so that no product passes 2**63
Tensor mul32(const Tensor &x, int64_t c) {
    const int64_t lo = c & 0xFFFF, hi = c >> 16;
    return (x * lo + ((x * hi) & 0xFFFF).__lshift__(16)) & M32;
}

// hash_ids of int64 IDs with torch ops: abs(signed MurmurHash3_x86_32 (seed 0) of each ID's 8
// little-endian bytes) % num_rows (ops/_hashing.py's murmur3_int64, the same steps)
Tensor hashed_rows(const Tensor &ids, int64_t num_rows) {
    Tensor h = at::zeros_like(ids);
    for (const Tensor &block : {ids & M32, ids.__rshift__(32) & M32}) {  // low 4 bytes first
        const Tensor k = mul32(rotl32(mul32(block, 0xCC9E2D51), 15), 0x1B873593);
        h = rotl32(h ^ k, 13);
        h = (mul32(h, 5) + 0xE6546B64) & M32;
    }
    h = h ^ 8;  // the key's length
    h = h ^ h.__rshift__(16);
    h = mul32(h, 0x85EBCA6B);
    h = h ^ h.__rshift__(13);
    h = mul32(h, 0xC2B2AE35);
    h = h ^ h.__rshift__(16);
    const Tensor signed_h = at::where(h >= (int64_t{1} << 31), h - (int64_t{1} << 32), h);
    return signed_h.abs().remainder(num_rows);  // abs(-2**31) is 2**31 in int64
}

Tensor idmap_rows_twin(const Tensor &found, const Tensor &keys, int64_t fallback_rows) {
    TORCH_CHECK_VALUE(fallback_rows >= 0, "lookuplinear::idmap_rows: fallback_rows (the "
                      "rows before the map's) must be >= 0; got ", fallback_rows);
    TORCH_CHECK_VALUE(found.numel() == keys.numel(), "lookuplinear::idmap_rows: one found "
                      "value per key; got ", found.numel(), " values for ", keys.numel(),
                      " keys");
    if (fallback_rows < 1) {  // nothing to hash into: right only where every key was found
        TORCH_CHECK_VALUE(!found.lt(0).any().item<bool>(), "lookuplinear::idmap_rows: a key "
                          "absent from the map is hashed into fallback_rows, which must be "
                          ">= 1; got ", fallback_rows);
        return found + fallback_rows;
    }
    const Tensor f = found.to(at::kLong);
    const Tensor hashed = hashed_rows(keys.reshape(found.sizes()).to(at::kLong), fallback_rows);
    return at::where(f.lt(0), hashed, f + fallback_rows).to(found.scalar_type());
}

// ---- bag_max -----------------------------------------------------------------------------

bool bag_max_takes(const Tensor &weight, const Tensor &indices, const Tensor &offsets) {
    return weight.dim() == 2 && is_f32_f64(weight) && weight.is_contiguous() &&
           is_i32_i64(indices) && is_i32_i64(offsets) && offsets.numel() > 0;
}

// (out, arg): the max pool by the C kernel, and the row that gave each maximum (-1 in an
// empty bag); the offsets checked
std::tuple<Tensor, Tensor> bag_max_c(const char *op, const Tensor &weight,
                                     const Tensor &indices, const Tensor &offsets) {
    Tensor idx = indices.reshape(-1), off = offsets;
    if (idx.scalar_type() != off.scalar_type()) {
        idx = idx.to(at::kLong);
        off = off.to(at::kLong);
    }
    idx = idx.contiguous();
    off = off.contiguous();
    check_offsets(op, off, idx.numel());
    const Tensor w = weight.contiguous();
    const int64_t n = off.numel() - 1, dim = w.size(1);
    Tensor out = at::empty({n, dim}, w.options());
    Tensor arg = at::empty({n, dim}, w.options().dtype(at::kLong));
    int64_t bad = -1;
    AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "bag_max", [&] {
        const bool f32 = std::is_same<scalar_t, float>::value;
        const bool i32 = idx.scalar_type() == at::kInt;
        auto *wp = w.data_ptr<scalar_t>();
        auto *op_ = out.data_ptr<scalar_t>();
        auto *ap = arg.data_ptr<int64_t>();
        if (f32 && i32)
            bad = ll_bag_max_f32_i32(reinterpret_cast<const float *>(wp), w.size(0), dim,
                                     idx.data_ptr<int32_t>(), off.data_ptr<int32_t>(), n,
                                     reinterpret_cast<float *>(op_), ap);
        else if (f32)
            bad = ll_bag_max_f32_i64(reinterpret_cast<const float *>(wp), w.size(0), dim,
                                     idx.data_ptr<int64_t>(), off.data_ptr<int64_t>(), n,
                                     reinterpret_cast<float *>(op_), ap);
        else if (i32)
            bad = ll_bag_max_f64_i32(reinterpret_cast<const double *>(wp), w.size(0), dim,
                                     idx.data_ptr<int32_t>(), off.data_ptr<int32_t>(), n,
                                     reinterpret_cast<double *>(op_), ap);
        else
            bad = ll_bag_max_f64_i64(reinterpret_cast<const double *>(wp), w.size(0), dim,
                                     idx.data_ptr<int64_t>(), off.data_ptr<int64_t>(), n,
                                     reinterpret_cast<double *>(op_), ap);
    });
    if (bad >= 0) check_range("bag_max", idx, w.size(0));
    return {out, arg};
}

Tensor bag_max_twin(const Tensor &weight, const Tensor &indices, const Tensor &offsets) {
    try {
        return std::get<0>(at::embedding_bag(weight, indices, offsets, false, 2, false,
                                             optional<Tensor>(), true));
    } catch (const c10::Error &) {
        if (weight.dim() == 2) check_range("bag_max", indices.cpu(), weight.size(0));
        throw;
    }
}

// the offsets of the bags the twin takes on the CPU, checked as the C kernel checks them
// (ATen's CPU kernel takes some that do not cover the entries: decreasing ones)
void check_twin_offsets(const char *op, const Tensor &indices, const Tensor &offsets) {
    if (offsets.dim() == 1 && offsets.numel() > 0 && is_i32_i64(offsets))
        check_offsets(op, offsets, indices.numel());
}

Tensor bag_max_cpu(const Tensor &weight, const Tensor &indices, const Tensor &offsets) {
    if (!bag_max_takes(weight, indices, offsets)) {
        check_twin_offsets("bag_max", indices, offsets);
        return bag_max_twin(weight, indices, offsets);
    }
    return std::get<0>(bag_max_c("bag_max", weight, indices, offsets));
}

// ---- bag_max_arg: the max pool and the row that gave each maximum (-1 in an empty bag) ----

// ATen's max_indices (0 in an empty bag: made -1, as the C kernel's)
std::tuple<Tensor, Tensor> bag_max_arg_twin(const Tensor &weight, const Tensor &indices,
                                            const Tensor &offsets) {
    try {
        const auto pooled = at::embedding_bag(weight, indices, offsets, false, 2, false,
                                              optional<Tensor>(), true);
        const Tensor rows = std::get<3>(pooled).to(at::kLong);
        const Tensor empty =
            offsets.slice(0, 1).eq(offsets.slice(0, 0, -1)).unsqueeze(1).expand_as(rows);
        return {std::get<0>(pooled), rows.masked_fill(empty, -1)};
    } catch (const c10::Error &) {
        if (weight.dim() == 2) check_range("bag_max", indices.cpu(), weight.size(0));
        throw;
    }
}

std::tuple<Tensor, Tensor> bag_max_arg_cpu(const Tensor &weight, const Tensor &indices,
                                           const Tensor &offsets) {
    if (!bag_max_takes(weight, indices, offsets)) {
        check_twin_offsets("bag_max", indices, offsets);
        return bag_max_arg_twin(weight, indices, offsets);
    }
    return bag_max_c("bag_max", weight, indices, offsets);
}

// ---- bag_max_backward: grad added to the rows arg names (none where arg is -1) -------------

// ValueError unless grad has arg's shape, one row per bag
void check_bag_max_grad(const Tensor &grad, const Tensor &arg) {
    TORCH_CHECK_VALUE(grad.sizes() == arg.sizes(), "lookuplinear::bag_max_backward: the "
                      "gradient has one row per bag, ", arg.sizes(), "; got ", grad.sizes());
}

// torch ops, differentiable in grad (a gradient under create_graph=True differentiates again):
// an empty bag's gradient goes to a spare row past the table's, left out
Tensor bag_max_backward_twin(const Tensor &grad, const Tensor &arg, c10::SymInt num_rows) {
    check_bag_max_grad(grad, arg);
    const Tensor rows = arg.masked_fill(arg.lt(0), c10::Scalar(num_rows));
    return at::zeros_symint({num_rows + 1, grad.sym_size(1)}, grad.options())
        .scatter_add(0, rows, grad)
        .narrow_symint(0, 0, num_rows);
}

Tensor bag_max_backward_cpu(const Tensor &grad, const Tensor &arg, int64_t num_rows) {
    check_bag_max_grad(grad, arg);
    TORCH_CHECK_VALUE(arg.dim() == 2 && arg.scalar_type() == at::kLong,
                      "lookuplinear::bag_max_backward: arg is bag_max_arg's, 2-D int64; got ",
                      arg.scalar_type(), " of ", arg.dim(), " dimensions");
    if (arg.numel() > 0) {  // the C kernel writes where arg says: every row in the table
        const auto range = at::aminmax(arg);
        const int64_t lo = std::get<0>(range).item<int64_t>(),
                      hi = std::get<1>(range).item<int64_t>();
        TORCH_CHECK_INDEX(lo >= -1 && hi < num_rows, "lookuplinear::bag_max_backward: arg "
                          "holds rows of a table of ", num_rows, " rows, or -1 for an empty "
                          "bag; got values in [", lo, ", ", hi, "]");
    }
    if (grad.scalar_type() != at::kFloat && grad.scalar_type() != at::kDouble)
        return bag_max_backward_twin(grad, arg, num_rows);
    const Tensor g = grad.contiguous(), a = arg.contiguous();
    Tensor grad_weight = at::zeros({num_rows, g.size(1)}, g.options());
    if (g.scalar_type() == at::kFloat)
        ll_bag_max_backward_f32(grad_weight.data_ptr<float>(), a.data_ptr<int64_t>(),
                                g.data_ptr<float>(), a.size(0), a.size(1));
    else
        ll_bag_max_backward_f64(grad_weight.data_ptr<double>(), a.data_ptr<int64_t>(),
                                g.data_ptr<double>(), a.size(0), a.size(1));
    return grad_weight;
}

// ---- mode_weights ------------------------------------------------------------------------

Tensor mode_weights_twin(const Tensor &offsets, const optional<Tensor> &weights, bool sqrt,
                         at::ScalarType dtype, c10::SymInt nnz) {
    check_float("mode_weights", "dtype", dtype);
    const auto options = offsets.options();
    if (offsets.numel() == 0) return at::empty({0}, options.dtype(dtype));
    const Tensor lengths = (offsets.slice(0, 1) - offsets.slice(0, 0, -1)).to(at::kLong);
    const int64_t n_bags = lengths.numel();
    Tensor total;
    if (!weights.has_value()) {
        total = lengths.to(at::kDouble);
    } else {
        const Tensor bag = at::repeat_interleave_symint(
            at::arange(n_bags, options.dtype(at::kLong)), lengths, 0, nnz);
        const Tensor vals = weights->to(at::kDouble);
        total = at::zeros({n_bags}, options.dtype(at::kDouble))
                    .index_add_(0, bag, sqrt ? vals * vals : vals);
    }
    if (sqrt) total = total.sqrt();
    const Tensor inv = at::where(total == 0, at::zeros_like(total), 1.0 / total);
    if (!weights.has_value())
        return at::repeat_interleave_symint(inv, lengths, 0, nnz).to(dtype);
    const Tensor bag = at::repeat_interleave_symint(
        at::arange(n_bags, options.dtype(at::kLong)), lengths, 0, nnz);
    return (weights->to(at::kDouble) * inv.index_select(0, bag)).to(dtype);
}

Tensor mode_weights_cpu(const Tensor &offsets, const optional<Tensor> &weights, bool sqrt,
                        at::ScalarType dtype, int64_t nnz) {
    check_float("mode_weights", "dtype", dtype);
    if (offsets.numel() > 0) check_offsets("mode_weights", offsets, nnz);
    TORCH_CHECK_VALUE(!weights.has_value() || weights->numel() == nnz,
                      "lookuplinear::mode_weights: weights must hold one value per entry, ", nnz,
                      "; got ", weights.has_value() ? weights->numel() : 0,
                      ". Give per-entry weights as long as the indices.");
    const bool c = (dtype == at::kFloat || dtype == at::kDouble) && is_i32_i64(offsets) &&
                   (!weights.has_value() || weights->scalar_type() == dtype) &&
                   offsets.numel() > 0;
    if (!c) return mode_weights_twin(offsets, weights, sqrt, dtype, nnz);
    const Tensor off = offsets.contiguous();
    const Tensor w = weights.has_value() ? weights->contiguous() : Tensor();
    Tensor out = at::empty({nnz}, off.options().dtype(dtype));
    const int64_t n_bags = off.numel() - 1;
    const bool i32 = off.scalar_type() == at::kInt;
    if (dtype == at::kFloat) {
        const float *wp = w.defined() ? w.data_ptr<float>() : nullptr;
        if (i32)
            ll_mode_weights_f32_i32(off.data_ptr<int32_t>(), n_bags, wp, sqrt,
                                    out.data_ptr<float>());
        else
            ll_mode_weights_f32_i64(off.data_ptr<int64_t>(), n_bags, wp, sqrt,
                                    out.data_ptr<float>());
    } else {
        const double *wp = w.defined() ? w.data_ptr<double>() : nullptr;
        if (i32)
            ll_mode_weights_f64_i32(off.data_ptr<int32_t>(), n_bags, wp, sqrt,
                                    out.data_ptr<double>());
        else
            ll_mode_weights_f64_i64(off.data_ptr<int64_t>(), n_bags, wp, sqrt,
                                    out.data_ptr<double>());
    }
    return out;
}

// ---- row_sums ----------------------------------------------------------------------------
// bag_lookup's weight gradient, one row per distinct row of the entries: (rows, values), the
// rows sorted (padding entries left out), each row's sum in entry order (as ll_group_rows,
// group_rows' kernel, sums it). How many rows the data decides: a recorded graph's fake
// implementation gives it a size of its own (lookuplinear/ops/library.py).

// the bag of every entry, for CSR offsets over nnz entries
Tensor bag_ids(const Tensor &offsets, int64_t nnz) {
    const Tensor lengths = offsets.slice(0, 1) - offsets.slice(0, 0, -1);
    return at::repeat_interleave(at::arange(lengths.numel(), offsets.options().dtype(at::kLong)),
                                 lengths, 0, nnz);
}

std::tuple<Tensor, Tensor> row_sums_twin(const Tensor &grad, const Tensor &indices,
                                         const optional<Tensor> &offsets,
                                         const optional<Tensor> &weights,
                                         optional<int64_t> padding_idx, c10::SymInt num_rows) {
    check_float("row_sums", "grad", grad.scalar_type());
    if (padding_idx.has_value() && num_rows.maybe_as_int().has_value())
        check_padding("row_sums", "padding_idx", *padding_idx, *num_rows.maybe_as_int());
    const Tensor idx = indices.reshape(-1).to(at::kLong);
    const Tensor order = std::get<1>(at::sort(idx, /*stable=*/true, 0, false));
    const Tensor rows = idx.index_select(0, order);
    Tensor first = at::ones_like(rows, rows.options().dtype(at::kBool));
    if (rows.numel() > 1) first.slice(0, 1).copy_(rows.slice(0, 1).ne(rows.slice(0, 0, -1)));
    if (padding_idx.has_value()) first.logical_and_(rows.ne(*padding_idx));
    const Tensor rank = at::cumsum(first, 0) - 1;
    Tensor contrib = offsets.has_value() ? grad.index_select(0, bag_ids(*offsets, idx.numel()))
                                         : grad;
    if (weights.has_value()) contrib = contrib * weights->to(grad.scalar_type()).unsqueeze(1);
    Tensor slot = rank;  // padding entries add into a row of their own, past the others
    if (padding_idx.has_value())
        slot = at::where(rows.eq(*padding_idx), at::scalar_tensor(idx.numel(), rank.options()),
                         rank);
    Tensor sums = at::zeros({idx.numel() + 1, contrib.size(1)}, contrib.options());
    sums.index_add_(0, slot, contrib.index_select(0, order));
    const Tensor distinct = rows.masked_select(first);
    return {distinct, sums.narrow(0, 0, distinct.numel())};
}

std::tuple<Tensor, Tensor> row_sums_cpu(const Tensor &grad, const Tensor &indices,
                                        const optional<Tensor> &offsets,
                                        const optional<Tensor> &weights,
                                        optional<int64_t> padding_idx, int64_t num_rows) {
    check_float("row_sums", "grad", grad.scalar_type());
    if (padding_idx.has_value()) check_padding("row_sums", "padding_idx", *padding_idx, num_rows);
    const Tensor idx = indices.reshape(-1).to(at::kLong).contiguous();
    check_range("row_sums", idx, num_rows);
    // the C kernel reads the entries the offsets name, a gradient row per bag (per entry
    // without offsets) and a weight per entry
    if (offsets.has_value()) check_offsets("row_sums", *offsets, idx.numel());
    const int64_t n_out = offsets.has_value() ? offsets->numel() - 1 : idx.numel();
    TORCH_CHECK_VALUE(grad.dim() == 2 && grad.size(0) == n_out, "lookuplinear::row_sums: the "
                      "gradient is 2-D, one row per ", offsets.has_value() ? "bag" : "entry",
                      ", ", n_out, "; got shape ", grad.sizes());
    TORCH_CHECK_VALUE(!weights.has_value() || weights->numel() == idx.numel(),
                      "lookuplinear::row_sums: weights must hold one value per entry, ",
                      idx.numel(), "; got ", weights.has_value() ? weights->numel() : 0,
                      ". Give per-entry weights as long as the indices.");
    const Tensor g = grad.contiguous();
    constexpr int64_t max_entries = std::numeric_limits<int32_t>::max();
    if (!is_f32_f64(g) || g.dim() != 2 || idx.numel() > max_entries ||
        g.size(0) > max_entries || num_rows > (int64_t{1} << 32))
        return row_sums_twin(grad, indices, offsets, weights, padding_idx, num_rows);
    const Tensor off = offsets.has_value() ? offsets->to(at::kLong).contiguous() : Tensor();
    const Tensor w = weights.has_value() ? weights->to(g.scalar_type()).contiguous() : Tensor();
    const int64_t n = idx.numel(), dim = g.size(1);
    const int64_t n_bags = off.defined() ? off.numel() - 1 : -1;
    Tensor rows = at::empty({n}, idx.options());  // at most one row per entry
    Tensor values = at::empty({n, dim}, g.options());
    int64_t m;
    if (g.scalar_type() == at::kFloat)
        m = ll_group_rows_f32(idx.data_ptr<int64_t>(), n,
                              off.defined() ? off.data_ptr<int64_t>() : nullptr, n_bags,
                              padding_idx.value_or(-1),
                              w.defined() ? w.data_ptr<float>() : nullptr, g.data_ptr<float>(),
                              dim, rows.data_ptr<int64_t>(), values.data_ptr<float>());
    else
        m = ll_group_rows_f64(idx.data_ptr<int64_t>(), n,
                              off.defined() ? off.data_ptr<int64_t>() : nullptr, n_bags,
                              padding_idx.value_or(-1),
                              w.defined() ? w.data_ptr<double>() : nullptr, g.data_ptr<double>(),
                              dim, rows.data_ptr<int64_t>(), values.data_ptr<double>());
    TORCH_CHECK(m >= 0, "lookuplinear::row_sums: out of memory grouping the rows");
    return {rows.narrow(0, 0, m), values.narrow(0, 0, m)};
}

// ---- bag_lookup's backward ---------------------------------------------------------------
// (sizes as SymInts: a graph records the backward with symbolic shapes)

std::tuple<Tensor, Tensor> call_row_sums(const Tensor &grad, const Tensor &indices,
                                         const optional<Tensor> &offsets,
                                         const optional<Tensor> &weights,
                                         optional<int64_t> padding_idx,
                                         const c10::SymInt &num_rows) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("lookuplinear::row_sums", "")
                         .typed<std::tuple<Tensor, Tensor>(
                             const Tensor &, const Tensor &, const optional<Tensor> &,
                             const optional<Tensor> &, optional<int64_t>, c10::SymInt)>();
    at::AutoDispatchBelowADInplaceOrView below;  // not differentiable: no autograd layer
    return op.call(grad, indices, offsets, weights, padding_idx, num_rows);
}

// the bag of every entry, for CSR offsets over nnz entries
Tensor entry_bags(const Tensor &offsets, const c10::SymInt &nnz) {
    const Tensor lengths = offsets.slice(0, 1) - offsets.slice(0, 0, -1);
    return at::repeat_interleave_symint(
        at::arange(c10::Scalar(lengths.sym_numel()), offsets.options().dtype(at::kLong)),
        lengths, 0, nnz);
}

// the weight gradient of a sum lookup whose output rows have the gradient g ((rows, dim);
// offsets: CSR, or none for one entry per row): an uncoalesced sparse COO tensor, one row per
// entry (padding entries left out), as nn.EmbeddingBag(sparse=True)'s; its values keep their
// graph
Tensor entry_grads(const Tensor &indices, const optional<Tensor> &offsets,
                   const optional<Tensor> &weights, optional<int64_t> padding_idx,
                   const Tensor &g, c10::SymIntArrayRef shape) {
    const Tensor idx = indices.reshape(-1).to(at::kLong);
    Tensor contrib =
        offsets.has_value() ? g.index_select(0, entry_bags(*offsets, idx.sym_numel())) : g;
    if (weights.has_value()) contrib = contrib * weights->to(g.scalar_type()).unsqueeze(1);
    if (!padding_idx.has_value())
        return at::_sparse_coo_tensor_unsafe_symint(idx.unsqueeze(0), contrib, shape);
    // the padding entries left out, as ATen's sparse embedding backward leaves them out (the
    // same rows, selected by position: faster than its boolean mask; index_select reads a
    // broadcast gradient, out.sum()'s, element by element: made contiguous first)
    const Tensor keep = at::nonzero(idx.ne(*padding_idx)).view(-1);
    return at::_sparse_coo_tensor_unsafe_symint(idx.index_select(0, keep).unsqueeze(0),
                                                contrib.contiguous().index_select(0, keep),
                                                shape);
}

// d out[b] / d weights[e] = g[b] . weight[indices[e]], 0 for a padding entry, in dtype
Tensor per_sample_weights_grad(const Tensor &g, const Tensor &weight, const Tensor &idx,
                               const Tensor &offsets, at::ScalarType dtype,
                               optional<int64_t> padding_idx) {
    Tensor grad = (g.index_select(0, entry_bags(offsets, idx.sym_numel())) *
                   weight.index_select(0, idx)).sum(1);
    if (padding_idx.has_value()) grad = grad.masked_fill(idx.eq(*padding_idx), 0);
    return grad.to(dtype);
}

// ---- tables an optimizer updates in the backward ------------------------------------------
// A table bound to a fused=True optimizer (lookuplinear/_fusion.py) is named here by
// fused_bind. In a backward that accumulates into such a table, its lookup's backward hands
// (grad_out, the lookup) to the optimizer (the operator fused_defer, implemented by the
// optimizer's side) instead of returning the weight gradient; where the operator says it took
// them, no gradient is returned. The rows are updated at the end of the backward.

std::mutex bound_mutex;
std::atomic<size_t> bound_count{0};
// the bound tables, by their TensorImpl; the weak reference keeps the address from being
// reused while it is here, and says whether the table is still alive
std::unordered_map<const c10::TensorImpl *, c10::weak_intrusive_ptr<c10::TensorImpl>> bound;

void fused_bind(const Tensor &table, bool bind) {
    std::lock_guard<std::mutex> lock(bound_mutex);
    for (auto it = bound.begin(); it != bound.end();)  // the tables gone since
        it = it->second.expired() ? bound.erase(it) : std::next(it);
    if (bind)
        bound.insert_or_assign(table.unsafeGetTensorImpl(),
                               c10::weak_intrusive_ptr<c10::TensorImpl>(table.getIntrusivePtr()));
    else
        bound.erase(table.unsafeGetTensorImpl());
    bound_count.store(bound.size());
}

// The bound table the running node's gradient edge `edge` accumulates into in this backward,
// or an undefined tensor: none bound, a gradient with a graph (create_graph=True), an edge
// that leads elsewhere, or a backward that does not accumulate into it (autograd.grad, which
// captures the table's gradient, or backward(inputs=...) without the table)
Tensor fused_table(size_t edge) {
    if (bound_count.load(std::memory_order_relaxed) == 0 || at::GradMode::is_enabled())
        return Tensor();
    const auto node = torch::autograd::get_current_node();
    if (!node || edge >= node->num_outputs()) return Tensor();
    auto *acc =
        dynamic_cast<torch::autograd::AccumulateGrad *>(node->next_edge(edge).function.get());
    if (acc == nullptr) return Tensor();
    const Tensor &table = acc->variable;
    {
        std::lock_guard<std::mutex> lock(bound_mutex);
        const auto it = bound.find(table.unsafeGetTensorImpl());
        if (it == bound.end() || it->second.expired()) return Tensor();
    }
    const auto *info = torch::autograd::get_current_graph_task_exec_info();
    if (info == nullptr) return Tensor();
    if (!info->empty()) {  // autograd.grad or backward(inputs=...): executed only if needed
        const auto it = info->find(acc);
        if (it == info->end() || !it->second.needed_) return Tensor();
    }
    return table;
}

// whether the optimizer bound to `table` took this lookup's gradient (fused_defer)
bool fused_defer(const Tensor &table, const Tensor &grad_out, const Tensor &indices,
                 const optional<Tensor> &offsets, const optional<Tensor> &weights,
                 optional<int64_t> padding_idx) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("lookuplinear::fused_defer", "")
                         .typed<bool(const Tensor &, const Tensor &, const Tensor &,
                                     const optional<Tensor> &, const optional<Tensor> &,
                                     optional<int64_t>)>();
    at::AutoDispatchBelowADInplaceOrView below;
    return op.call(table, grad_out, indices, offsets, weights, padding_idx);
}

// The weight gradient of a sum lookup (the running node's gradient edge `edge` leads to the
// table) whose output rows have the gradient g: taken by the table's fused=True optimizer
// (undefined: no gradient); each entry's contribution, a graph to differentiate, or, for an
// index tensor (one entry per output row), nn.Embedding(sparse=True)'s gradient as it is, or
// off the CPU nn.EmbeddingBag(sparse=True)'s (how many distinct rows there are is known on
// the device only: reading it back would synchronise); else one row per distinct row,
// sorted, its sum (row_sums: padding entries left out)
Tensor sum_weight_grad(size_t edge, const Tensor &g, const Tensor &idx,
                       const optional<Tensor> &offsets, const optional<Tensor> &weights,
                       optional<int64_t> padding_idx, const c10::SymInt &rows,
                       const c10::SymInt &dim) {
    const Tensor table = fused_table(edge);
    if (table.defined() && fused_defer(table, g, idx, offsets, weights, padding_idx))
        return Tensor();
    const std::vector<c10::SymInt> shape{rows, dim};
    if (at::GradMode::is_enabled() || (!offsets.has_value() && !weights.has_value()) ||
        !idx.is_cpu())
        return entry_grads(idx, offsets, weights, padding_idx, g, shape);
    const auto grouped = call_row_sums(g, idx, offsets, weights, padding_idx, rows);
    const Tensor &sums = std::get<1>(grouped);  // the rows distinct and sorted: coalesced
    return at::_sparse_coo_tensor_with_dims_and_tensors_symint(
        1, 1, shape, std::get<0>(grouped).unsqueeze(0), sums,
        sums.options().layout(at::kSparse), /*is_coalesced=*/true);
}

// the gradient of a mean lookup's sums from its output's gradient g: each bag's row times
// 1 / its number of non-padding entries (1 for an empty bag), ATen's mean backward
// (apply_bag_size_backward: the product by the reciprocal, not a division)
Tensor mean_grad(const Tensor &g, const Tensor &idx, const Tensor &offsets,
                 optional<int64_t> padding_idx) {
    Tensor sizes;
    if (padding_idx.has_value()) {  // the entries that count, summed between the offsets
        const Tensor counted = at::cat({at::zeros({1}, idx.options().dtype(at::kLong)),
                                        at::cumsum(idx.ne(*padding_idx), 0)});
        const Tensor at_offsets = counted.index_select(0, offsets.to(at::kLong));
        sizes = at_offsets.slice(0, 1) - at_offsets.slice(0, 0, -1);
    } else {
        sizes = offsets.slice(0, 1) - offsets.slice(0, 0, -1);
    }
    return g * at::reciprocal(sizes.clamp_min(1).to(g.scalar_type())).unsqueeze(1);
}

struct BagLookupFunction : public torch::autograd::Function<BagLookupFunction> {
    static Tensor forward(torch::autograd::AutogradContext *ctx, const Tensor &weight,
                          const Tensor &indices, const optional<Tensor> &offsets,
                          const optional<Tensor> &weights, optional<int64_t> padding_idx,
                          int64_t mode, bool include_last_offset) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::bag_lookup", "")
                             .typed<Tensor(const Tensor &, const Tensor &,
                                           const optional<Tensor> &, const optional<Tensor> &,
                                           optional<int64_t>, int64_t, bool)>();
        const bool weights_grad = weights.has_value() && weights->requires_grad();
        ctx->save_for_backward({indices, offsets.value_or(Tensor()),
                                weights.value_or(Tensor()), weights_grad ? weight : Tensor()});
        ctx->saved_data["rows"] = weight.sym_size(0);
        ctx->saved_data["dim"] = weight.sym_size(1);
        ctx->saved_data["padding_idx"] = padding_idx;
        ctx->saved_data["include_last_offset"] = include_last_offset;
        ctx->saved_data["mode"] = mode;
        at::AutoDispatchBelowADInplaceOrView below;
        return op.call(weight, indices, offsets, weights, padding_idx, mode,
                       include_last_offset);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const auto opt = [](const Tensor &t) { return t.defined() ? optional<Tensor>(t)
                                                                  : optional<Tensor>(); };
        const Tensor idx = saved[0].reshape(-1);
        optional<Tensor> offsets = opt(saved[1]);
        const optional<Tensor> weights = opt(saved[2]);
        const c10::SymInt rows = ctx->saved_data["rows"].toSymInt(),
                          dim = ctx->saved_data["dim"].toSymInt();
        const optional<int64_t> padding_idx =
            ctx->saved_data["padding_idx"].toOptional<int64_t>();
        // the output's rows (not reshape {-1, dim}, which a table of no columns leaves open)
        Tensor g = grads[0].dim() > 1 ? grads[0].flatten(0, -2)
                                      : grads[0].reshape_symint({1, dim});
        if (offsets.has_value() && !ctx->saved_data["include_last_offset"].toBool())  // the end
            offsets = at::cat({*offsets, offsets->new_full({1}, c10::Scalar(idx.sym_numel()))});
        if (ctx->saved_data["mode"].toInt() == 1) g = mean_grad(g, idx, *offsets, padding_idx);
        Tensor grad_weight, grad_weights;
        if (ctx->needs_input_grad(0))
            grad_weight = sum_weight_grad(0, g, idx, offsets, weights, padding_idx, rows, dim);
        if (saved[3].defined())
            grad_weights = per_sample_weights_grad(g, saved[3], idx, *offsets,
                                                   weights->scalar_type(), padding_idx);
        return {grad_weight, Tensor(), Tensor(), grad_weights, Tensor(), Tensor(), Tensor()};
    }
};

// ---- bag_max's backward -------------------------------------------------------------------
// The forward keeps the row that gave each maximum (bag_max_arg); the backward adds grad_out to
// those rows (bag_max_backward), dense as nn.EmbeddingBag's for max, whatever happened to the
// table since. Under create_graph=True the same scatter by torch ops, differentiable again.

struct BagMaxFunction : public torch::autograd::Function<BagMaxFunction> {
    static torch::autograd::variable_list forward(torch::autograd::AutogradContext *ctx,
                                                  const Tensor &weight, const Tensor &indices,
                                                  const Tensor &offsets) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::bag_max_arg", "")
                             .typed<std::tuple<Tensor, Tensor>(const Tensor &, const Tensor &,
                                                               const Tensor &)>();
        Tensor out, arg;
        {
            at::AutoDispatchBelowADInplaceOrView below;
            std::tie(out, arg) = op.call(weight, indices, offsets);
        }
        ctx->saved_data["rows"] = weight.sym_size(0);
        ctx->mark_non_differentiable({arg});
        ctx->save_for_backward({arg});
        return {out, arg};
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::bag_max_backward", "")
                             .typed<Tensor(const Tensor &, const Tensor &, c10::SymInt)>();
        const Tensor arg = ctx->get_saved_variables()[0];
        const c10::SymInt rows = ctx->saved_data["rows"].toSymInt();
        Tensor grad_weight;
        if (ctx->needs_input_grad(0)) {
            if (at::GradMode::is_enabled()) {  // create_graph=True: a gradient with its graph
                grad_weight = bag_max_backward_twin(grads[0], arg, rows);
            } else {
                at::AutoDispatchBelowADInplaceOrView below;
                grad_weight = op.call(grads[0], arg, rows);
            }
        }
        return {grad_weight, Tensor(), Tensor()};
    }
};

// whether a call goes through its autograd node: grad mode on and a differentiable input
// requiring grad, or a forward-mode tangent on one (which the node refuses, as it did); else
// the autograd kernels below call the kernel straight away: what the node's forward would do,
// without building it (about 1.5 us of a small lookup)
bool records(const Tensor &weight, const optional<Tensor> &weights = c10::nullopt) {
    const bool w = weights.has_value() && weights->defined();
    return (at::GradMode::is_enabled() &&
            (weight.requires_grad() || (w && weights->requires_grad()))) ||
           weight._fw_grad(0).defined() || (w && weights->_fw_grad(0).defined());
}

Tensor bag_max_autograd(const Tensor &weight, const Tensor &indices, const Tensor &offsets) {
    if (!records(weight)) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::bag_max", "")
                             .typed<Tensor(const Tensor &, const Tensor &, const Tensor &)>();
        at::AutoDispatchBelowADInplaceOrView below;
        return op.call(weight, indices, offsets);
    }
    return BagMaxFunction::apply(weight, indices, offsets)[0];
}

std::tuple<Tensor, Tensor> bag_max_arg_autograd(const Tensor &weight, const Tensor &indices,
                                                const Tensor &offsets) {
    if (!records(weight)) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::bag_max_arg", "")
                             .typed<std::tuple<Tensor, Tensor>(const Tensor &, const Tensor &,
                                                               const Tensor &)>();
        at::AutoDispatchBelowADInplaceOrView below;
        return op.call(weight, indices, offsets);
    }
    const auto outs = BagMaxFunction::apply(weight, indices, offsets);
    return {outs[0], outs[1]};
}

Tensor bag_lookup_autograd(const Tensor &weight, const Tensor &indices,
                           const optional<Tensor> &offsets, const optional<Tensor> &weights,
                           optional<int64_t> padding_idx, int64_t mode,
                           bool include_last_offset) {
    if (!records(weight, weights)) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::bag_lookup", "")
                             .typed<Tensor(const Tensor &, const Tensor &,
                                           const optional<Tensor> &, const optional<Tensor> &,
                                           optional<int64_t>, int64_t, bool)>();
        at::AutoDispatchBelowADInplaceOrView below;
        return op.call(weight, indices, offsets, weights, padding_idx, mode,
                       include_last_offset);
    }
    return BagLookupFunction::apply(weight, indices, offsets, weights, padding_idx, mode,
                                    include_last_offset);
}

}  // namespace

// ---- assert_bags -------------------------------------------------------------------------
// A batch read off the CPU, checked without a host synchronisation: every index in
// [0, num_rows) and, where given, the offsets the CSR offsets of the entries (include_last
// false: nn.EmbeddingBag's start offsets, the last at most the entries'). A failed check
// is raised where the device reports it: at once on the CPU (a RuntimeError), at the next
// synchronisation on CUDA (a device-side assert, as nn.EmbeddingBag's CUDA kernels raise for a
// bad index). Here with torch ops, one _assert_async per check; CUDA tensors take one kernel
// launch for both where the build compiled asserts.cu. The messages are the Python side's
// (ops/_asserts.py).
void assert_bags_twin(const Tensor &indices, const optional<Tensor> &offsets, int64_t num_rows,
                      c10::string_view where, c10::string_view owner, bool include_last) {
    std::ostringstream index_message;
    index_message << "lookuplinear: an index of " << where << " is out of range for "
                  << "in_features=" << num_rows << ": ";
    if (num_rows > 0)
        index_message << "every index must be in [0, " << num_rows - 1 << "].";
    else
        index_message << "the table has no rows, so no index is valid.";
    // below num_rows only where it fits the indices' dtype (else the bound would wrap, 300
    // being 44 in uint8, and every index of the dtype is below it)
    int64_t largest = std::numeric_limits<int64_t>::max();
    switch (indices.scalar_type()) {
    case at::kByte: largest = std::numeric_limits<uint8_t>::max(); break;
    case at::kChar: largest = std::numeric_limits<int8_t>::max(); break;
    case at::kShort: largest = std::numeric_limits<int16_t>::max(); break;
    case at::kInt: largest = std::numeric_limits<int32_t>::max(); break;
    case at::kUInt16: largest = std::numeric_limits<uint16_t>::max(); break;
    case at::kUInt32: largest = std::numeric_limits<uint32_t>::max(); break;
    default: break;
    }
    Tensor in_range = indices.ge(0);
    if (num_rows <= largest) in_range = at::logical_and(in_range, indices.lt(num_rows));
    at::_assert_async(in_range.all(), index_message.str());
    if (!offsets.has_value()) return;
    const Tensor &o = *offsets;
    const int64_t nnz = indices.numel();
    const Tensor last = o.select(0, -1);
    Tensor ok = at::logical_and(o.select(0, 0).eq(0), include_last ? last.eq(nnz) : last.le(nnz));
    ok = at::logical_and(ok, o.slice(0, 1).ge(o.slice(0, 0, -1)).all());
    std::ostringstream offsets_message;
    offsets_message << "lookuplinear: " << owner << " offsets are not the "
                    << (include_last ? "CSR" : "start") << " offsets of its " << nnz
                    << " entries (they must start at 0, never decrease and "
                    << (include_last ? "end at" : "stay within") << " the number of entries); "
                    << "call validate() on the batch to see which offset is wrong.";
    at::_assert_async(ok, offsets_message.str());
}

#ifdef LOOKUPLINEAR_CUDA
// asserts.cu: both checks in one kernel launch (other dtypes: assert_bags_twin)
void assert_bags_cuda(const Tensor &indices, const optional<Tensor> &offsets, int64_t num_rows,
                      c10::string_view where, c10::string_view owner, bool include_last);
#endif

}  // namespace lookuplinear

TORCH_LIBRARY(lookuplinear, m) {
    m.def("bag_lookup(Tensor weight, Tensor indices, Tensor? offsets=None, Tensor? weights=None, "
          "int? padding_idx=None, int mode=0, *, bool include_last_offset=True) -> Tensor");
    m.def("in_feature_order(Tensor[] outs, int[] features, int[] segments) -> Tensor");
    m.def("idmap_find(Tensor table, Tensor keys) -> Tensor");
    m.def("idmap_rows(Tensor found, Tensor keys, int fallback_rows) -> Tensor");
    m.def("bag_max(Tensor weight, Tensor indices, Tensor offsets) -> Tensor");
    m.def("bag_max_arg(Tensor weight, Tensor indices, Tensor offsets) -> (Tensor, Tensor)");
    m.def("bag_max_backward(Tensor grad, Tensor arg, SymInt num_rows) -> Tensor");
    m.def("mode_weights(Tensor offsets, Tensor? weights, bool sqrt, ScalarType dtype, "
          "SymInt nnz) -> Tensor");
    m.def("fused_bind(Tensor table, bool bind) -> ()");
    m.def("fused_defer(Tensor table, Tensor grad_out, Tensor indices, Tensor? offsets, "
          "Tensor? weights, int? padding_idx) -> bool");
    m.def("row_sums(Tensor grad, Tensor indices, Tensor? offsets, Tensor? weights, "
          "int? padding_idx, SymInt num_rows) -> (Tensor, Tensor)");
    m.def("assert_bags(Tensor indices, Tensor? offsets, int num_rows, str where, str owner, "
          "bool include_last_offset=True) -> ()");
}

TORCH_LIBRARY_IMPL(lookuplinear, CPU, m) {
    using namespace lookuplinear;
    m.impl("bag_lookup", &bag_lookup_cpu);
    m.impl("in_feature_order", &in_feature_order_cpu);
    m.impl("idmap_find", &idmap_find_cpu);
    m.impl("idmap_rows", &idmap_rows_cpu);
    m.impl("bag_max", &bag_max_cpu);
    m.impl("bag_max_arg", &bag_max_arg_cpu);
    m.impl("bag_max_backward", &bag_max_backward_cpu);
    m.impl("mode_weights", &mode_weights_cpu);
    m.impl("row_sums", &row_sums_cpu);
}

// every other device (CUDA among them): torch ops, every operator's (a process without Python,
// an AOTInductor package on a GPU, has them too). The twins are ATen's CUDA kernels
// (embedding_bag, index_add, sort, ...); assert_bags alone has a CUDA kernel of its own
// (where the build had a CUDA toolkit).
TORCH_LIBRARY_IMPL(lookuplinear, CompositeExplicitAutograd, m) {
    using namespace lookuplinear;
    m.impl("assert_bags", &assert_bags_twin);
    m.impl("bag_lookup", &bag_lookup_other);
    m.impl("fused_bind", &fused_bind);  // on every device
    m.impl("in_feature_order", &in_feature_order_twin);
    m.impl("idmap_find", &idmap_find_twin);
    m.impl("idmap_rows", &idmap_rows_twin);
    m.impl("bag_max", &bag_max_twin);
    m.impl("bag_max_arg", &bag_max_arg_twin);
    m.impl("bag_max_backward", &bag_max_backward_twin);
    m.impl("mode_weights", &mode_weights_twin);
    m.impl("row_sums", &row_sums_twin);
}

#ifdef LOOKUPLINEAR_CUDA
TORCH_LIBRARY_IMPL(lookuplinear, CUDA, m) {
    m.impl("assert_bags", &lookuplinear::assert_bags_cuda);
}
#endif

// bag_lookup's backward on every device (the others' operators, bag_max's excepted, have
// theirs registered from Python)
TORCH_LIBRARY_IMPL(lookuplinear, Autograd, m) {
    m.impl("bag_lookup", &lookuplinear::bag_lookup_autograd);
}

// bag_max's backward on every device (bag_max_arg's node)
TORCH_LIBRARY_IMPL(lookuplinear, Autograd, m) {
    m.impl("bag_max", &lookuplinear::bag_max_autograd);
    m.impl("bag_max_arg", &lookuplinear::bag_max_arg_autograd);
}

// the operators that are read, not differentiated, and that Python calls eagerly: no autograd
// layer (their outputs never require grad); the eager callers map their errors to the
// project's (library.routed)
TORCH_LIBRARY_IMPL(lookuplinear, Autograd, m) {
    for (const char *name : {"idmap_find", "idmap_rows", "mode_weights"})
        m.impl(name, torch::CppFunction::makeFallthrough());
}

// ==== in_feature_order's backward ==========================================================
// The gradient of lookup outputs put in feature order, taken back apart: each output's
// gradient in its own layout (features[i] = F: (F * N, dim), its F blocks one feature's
// columns each; 0: (N, width)), each block's columns those of its segments, in order.
// in_feature_order and in_feature_order_backward are linear and each other's adjoint: the
// backward of each is the other, so a gradient differentiates again (create_graph=True) as
// often as asked, and a recorded graph holds the two operators.

namespace lookuplinear {
namespace {

// the width of every block (the columns its segments take, left to right: each block's
// columns exactly once, as segment_triples gives them), checked against the gradient's
// `total` columns and, for a feature-major output, its blocks' common width
std::vector<int64_t> block_widths(at::IntArrayRef features, at::IntArrayRef segments,
                                  int64_t total) {
    const char *op = "lookuplinear::in_feature_order_backward";
    int64_t n_blocks = 0;
    for (const int64_t f : features) {
        TORCH_CHECK_VALUE(f >= 0, op, ": feature counts are >= 0; got ", features);
        n_blocks += f ? f : 1;
    }
    TORCH_CHECK_VALUE(!features.empty() && segments.size() % 3 == 0, op, ": at least one output "
                      "and (block, first column, columns) triples; got ", features.size(),
                      " outputs and ", segments.size(), " numbers");
    std::vector<int64_t> widths(n_blocks, 0);
    int64_t cols = 0;
    for (size_t s = 0; s < segments.size(); s += 3) {
        const int64_t b = segments[s], first = segments[s + 1], c = segments[s + 2];
        TORCH_CHECK_VALUE(b >= 0 && b < n_blocks && c >= 0 && first == widths[b], op,
                          ": segment ", s / 3, " (", b, ", ", first, ", ", c, ") does not take "
                          "the next columns of one of the ", n_blocks, " blocks; the segments "
                          "take each block's columns once, left to right (segment_triples)");
        widths[b] += c;
        cols += c;
    }
    TORCH_CHECK_VALUE(cols == total, op, ": the segments take ", cols, " columns; the gradient "
                      "has ", total);
    for (size_t i = 0, b = 0; i < features.size(); b += features[i] ? features[i] : 1, i++)
        for (int64_t j = 1; j < features[i]; j++)
            TORCH_CHECK_VALUE(widths[b + j] == widths[b], op, ": the blocks of feature-major "
                              "output ", i, " have one width; got ", widths[b], " and ",
                              widths[b + j]);
    return widths;
}

std::vector<Tensor> in_feature_order_backward_twin(const Tensor &grad,
                                                   at::IntArrayRef features,
                                                   at::IntArrayRef segments) {
    TORCH_CHECK_VALUE(grad.dim() == 2, "lookuplinear::in_feature_order_backward: the gradient "
                      "is 2-D, (N, width); got shape ", grad.sizes());
    const std::vector<int64_t> widths = block_widths(features, segments, grad.size(1));
    std::vector<std::vector<Tensor>> pieces(widths.size());
    int64_t at_ = 0;
    for (size_t s = 0; s < segments.size(); s += 3) {
        pieces[segments[s]].push_back(grad.narrow(1, at_, segments[s + 2]));
        at_ += segments[s + 2];
    }
    std::vector<Tensor> blocks;  // new tensors (cat copies), none a view of grad
    for (const auto &p : pieces) blocks.push_back(p.empty() ? grad.narrow(1, 0, 0).clone()
                                                            : at::cat(p, 1));
    std::vector<Tensor> grads;
    for (size_t i = 0, b = 0; i < features.size(); i++) {
        if (!features[i]) {
            grads.push_back(blocks[b++]);
            continue;
        }
        const std::vector<Tensor> own(blocks.begin() + b, blocks.begin() + b + features[i]);
        grads.push_back(at::cat(own, 0));  // (F * N, dim)
        b += features[i];
    }
    return grads;
}

std::vector<Tensor> in_feature_order_backward_cpu(const Tensor &grad, at::IntArrayRef features,
                                                  at::IntArrayRef segments) {
    if (grad.dim() != 2) return in_feature_order_backward_twin(grad, features, segments);
    const std::vector<int64_t> widths = block_widths(features, segments, grad.size(1));
    // one C pass (ll_interleave, out into the blocks): each row's segments copied to their
    // blocks' rows, in bytes
    const Tensor g = grad.contiguous();
    const int64_t n = g.size(0), size = g.element_size();
    std::vector<Tensor> grads;
    std::vector<char *> pointers;
    std::vector<int64_t> block_ld;
    for (size_t i = 0, b = 0; i < features.size(); i++) {
        const int64_t f = features[i] ? features[i] : 1, w = widths[b];
        grads.push_back(at::empty({f * n, w}, g.options()));
        char *base = static_cast<char *>(grads.back().data_ptr());
        for (int64_t j = 0; j < f; j++, b++) {
            pointers.push_back(base + j * n * w * size);
            block_ld.push_back(w * size);
        }
    }
    const int64_t n_seg = static_cast<int64_t>(segments.size() / 3);
    std::vector<int64_t> seg_block(n_seg), seg_off(n_seg), seg_len(n_seg);
    for (int64_t s = 0; s < n_seg; s++) {
        seg_block[s] = segments[3 * s];
        seg_off[s] = segments[3 * s + 1] * size;
        seg_len[s] = segments[3 * s + 2] * size;
    }
    ll_interleave(n, n_seg, pointers.data(), block_ld.data(), seg_block.data(), seg_off.data(),
                  seg_len.data(), static_cast<char *>(g.data_ptr()), g.size(1) * size, 0);
    return grads;
}

Tensor call_in_feature_order(at::TensorList outs, at::IntArrayRef features,
                             at::IntArrayRef segments) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("lookuplinear::in_feature_order", "")
                         .typed<Tensor(at::TensorList, at::IntArrayRef, at::IntArrayRef)>();
    return op.call(outs, features, segments);
}

std::vector<Tensor> call_in_feature_order_backward(const Tensor &grad, at::IntArrayRef features,
                                                   at::IntArrayRef segments) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("lookuplinear::in_feature_order_backward", "")
                         .typed<std::vector<Tensor>(const Tensor &, at::IntArrayRef,
                                                    at::IntArrayRef)>();
    return op.call(grad, features, segments);
}

// each output's gradient: in_feature_order_backward, through the dispatcher's autograd layer
// (recorded under create_graph=True, its own backward in_feature_order)
struct InFeatureOrderFunction : public torch::autograd::Function<InFeatureOrderFunction> {
    static Tensor forward(torch::autograd::AutogradContext *ctx, at::TensorList outs,
                          at::IntArrayRef features, at::IntArrayRef segments) {
        ctx->saved_data["features"] = features.vec();
        ctx->saved_data["segments"] = segments.vec();
        at::AutoDispatchBelowADInplaceOrView below;
        return call_in_feature_order(outs, features, segments);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        torch::autograd::variable_list parts = call_in_feature_order_backward(
            grads[0], ctx->saved_data["features"].toIntVector(),
            ctx->saved_data["segments"].toIntVector());
        parts.emplace_back();  // features, segments
        parts.emplace_back();
        return parts;
    }
};

// the gradient of the outputs' gradients: in_feature_order of theirs
struct InFeatureOrderBackwardFunction
    : public torch::autograd::Function<InFeatureOrderBackwardFunction> {
    static torch::autograd::variable_list forward(torch::autograd::AutogradContext *ctx,
                                                  const Tensor &grad, at::IntArrayRef features,
                                                  at::IntArrayRef segments) {
        ctx->saved_data["features"] = features.vec();
        ctx->saved_data["segments"] = segments.vec();
        at::AutoDispatchBelowADInplaceOrView below;
        return call_in_feature_order_backward(grad, features, segments);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        // (an output without a gradient has zeros: the function materializes them)
        return {call_in_feature_order(grads, ctx->saved_data["features"].toIntVector(),
                                      ctx->saved_data["segments"].toIntVector()),
                Tensor(), Tensor()};
    }
};

Tensor in_feature_order_autograd(at::TensorList outs, at::IntArrayRef features,
                                 at::IntArrayRef segments) {
    return InFeatureOrderFunction::apply(outs, features, segments);
}

std::vector<Tensor> in_feature_order_backward_autograd(const Tensor &grad,
                                                       at::IntArrayRef features,
                                                       at::IntArrayRef segments) {
    return InFeatureOrderBackwardFunction::apply(grad, features, segments);
}

}  // namespace
}  // namespace lookuplinear

TORCH_LIBRARY_FRAGMENT(lookuplinear, m) {
    m.def("in_feature_order_backward(Tensor grad, int[] features, int[] segments) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(lookuplinear, CPU, m) {
    m.impl("in_feature_order_backward", &lookuplinear::in_feature_order_backward_cpu);
}

TORCH_LIBRARY_IMPL(lookuplinear, CompositeExplicitAutograd, m) {
    m.impl("in_feature_order_backward", &lookuplinear::in_feature_order_backward_twin);
}

// in_feature_order's backward, and its backward's, on every device
TORCH_LIBRARY_IMPL(lookuplinear, Autograd, m) {
    m.impl("in_feature_order", &lookuplinear::in_feature_order_autograd);
    m.impl("in_feature_order_backward", &lookuplinear::in_feature_order_backward_autograd);
}

// ==== gather_groups ==========================================================================
// Index lookups of several tables (a collection's groups, one width each) written straight
// into their columns of one (N, width) output by one call of the C kernel ll_gather_into:
// out[i, columns of feature j of group g] = weights[g][rows[g][i, j]]. Its gradient is each
// group's index lookup's (nn.Embedding(sparse=True)'s: one row per entry, in entry order, the
// gradient's columns copied back by in_feature_order_backward), as bag_lookup on that group's
// rows followed by in_feature_order gives it, to the bit.

namespace lookuplinear {
namespace {

// the operands checked (ValueError naming what came), and the segments that take the groups'
// (N, F_g * dim_g) outputs into the output's columns, in order (in_feature_order's, every
// output example-major): every feature's columns inside [0, width), the features' columns
// tiling it, a group's features left to right
std::vector<int64_t> gather_groups_segments(at::TensorList weights, at::TensorList rows,
                                            at::IntArrayRef columns, int64_t width) {
    const char *op = "lookuplinear::gather_groups";
    TORCH_CHECK_VALUE(!weights.empty() && weights.size() == rows.size(), op, ": one (N, F_g) "
                      "row tensor per table; got ", weights.size(), " tables and ",
                      rows.size(), " row tensors");
    int64_t n_cols = 0;
    for (size_t g = 0; g < weights.size(); g++) {
        TORCH_CHECK_VALUE(weights[g].dim() == 2 && weights[g].scalar_type() ==
                              weights[0].scalar_type() && weights[g].is_floating_point(),
                          op, ": the tables are 2-D, of one floating dtype; got table ", g,
                          " of shape ", weights[g].sizes(), " and dtype ",
                          weights[g].scalar_type(), " (table 0: ", weights[0].scalar_type(),
                          ")");
        TORCH_CHECK_VALUE(rows[g].dim() == 2 && is_i32_i64(rows[g]) &&
                              rows[g].size(0) == rows[0].size(0),
                          op, ": the rows are (N, F_g) int32/int64, one N for all; got rows ",
                          g, " of shape ", rows[g].sizes(), " and dtype ",
                          rows[g].scalar_type(), " (rows 0: ", rows[0].sizes(), ")");
        n_cols += rows[g].size(1);
    }
    TORCH_CHECK_VALUE(static_cast<int64_t>(columns.size()) == n_cols, op, ": one first "
                      "column per feature (", n_cols, " features); got ", columns.size());
    // (first column, group, feature of the group), sorted by column: they must tile [0, width)
    std::vector<std::tuple<int64_t, int64_t, int64_t>> at_;
    for (size_t g = 0, k = 0; g < weights.size(); g++)
        for (int64_t j = 0; j < rows[g].size(1); j++, k++) {
            TORCH_CHECK_VALUE(j == 0 || columns[k] > columns[k - 1], op, ": a group's "
                              "features take its columns left to right; got first columns ",
                              columns[k - 1], " then ", columns[k], " in group ", g);
            at_.emplace_back(columns[k], static_cast<int64_t>(g), j);
        }
    std::sort(at_.begin(), at_.end());
    std::vector<int64_t> segments;
    int64_t end = 0;
    for (const auto &[first, g, j] : at_) {
        const int64_t dim = weights[g].size(1);
        TORCH_CHECK_VALUE(first == end, op, ": the features' columns tile the output's ", width,
                          " columns, each feature's next to the one before; a feature of "
                          "group ", g, " starts at column ", first, " where column ", end,
                          " was due");
        if (!segments.empty() && segments[segments.size() - 3] == g &&
            segments[segments.size() - 2] + segments.back() == j * dim)
            segments.back() += dim;  // the group's next feature: one segment
        else
            segments.insert(segments.end(), {g, j * dim, dim});
        end += dim;
    }
    TORCH_CHECK_VALUE(end == width, op, ": the features take ", end, " columns; the output "
                      "has ", width);
    return segments;
}

// IndexError naming the first row outside its table
void gather_groups_range(at::TensorList weights, at::TensorList rows) {
    for (size_t g = 0; g < weights.size(); g++) {
        const Tensor r = rows[g].to(at::kLong).contiguous();
        const int64_t *p = r.data_ptr<int64_t>(), num = weights[g].size(0), f = r.size(1);
        const int64_t k = ll_first_outside(p, r.numel(), num);  // one vectorized pass
        TORCH_CHECK_INDEX(k < 0, "lookuplinear::gather_groups: row ", k < 0 ? 0 : p[k],
                          " at rows[", g, "][", k / f, ", ", k % f, "] is out of range for "
                          "table ", g, " of ", num, " rows. Map the IDs into [0, ", num,
                          ") first, or make the table larger.");
    }
}

Tensor gather_groups_twin(at::TensorList weights, at::TensorList rows, at::IntArrayRef columns,
                          int64_t width) {
    const std::vector<int64_t> segments = gather_groups_segments(weights, rows, columns, width);
    std::vector<Tensor> outs;  // each group's (N, F_g * dim_g)
    try {
        for (size_t g = 0; g < weights.size(); g++)
            outs.push_back(weights[g].index_select(0, rows[g].reshape(-1))
                               .view({rows[g].size(0), rows[g].size(1) * weights[g].size(1)}));
    } catch (const c10::Error &) {
        std::vector<Tensor> host;
        for (const Tensor &r : rows) host.push_back(r.cpu());
        gather_groups_range(weights, host);
        throw;
    }
    const std::vector<int64_t> features(outs.size(), 0);
    return in_feature_order_twin(outs, features, segments);
}

Tensor gather_groups_cpu(at::TensorList weights, at::TensorList rows, at::IntArrayRef columns,
                         int64_t width) {
    gather_groups_segments(weights, rows, columns, width);
    const bool f32 = weights[0].scalar_type() == at::kFloat;
    bool c = f32 || weights[0].scalar_type() == at::kDouble;
    for (const Tensor &w : weights) c = c && w.is_contiguous();
    if (!c) return gather_groups_twin(weights, rows, columns, width);
    gather_groups_range(weights, rows);  // before the C kernel reads a row
    const int64_t k = static_cast<int64_t>(weights.size()), n = rows[0].size(0);
    std::vector<Tensor> alive;  // the int64 rows, alive through the call
    std::vector<const void *> ws(k);
    std::vector<const int64_t *> rp(k), cp(k);
    std::vector<int64_t> dims(k), f(k);
    for (int64_t g = 0, first = 0; g < k; first += f[g], g++) {
        alive.push_back(rows[g].to(at::kLong).contiguous());
        ws[g] = weights[g].data_ptr();
        rp[g] = alive.back().data_ptr<int64_t>();
        cp[g] = columns.data() + first;
        dims[g] = weights[g].size(1);
        f[g] = rows[g].size(1);
    }
    Tensor out = at::empty({n, width}, weights[0].options());
    if (f32)
        ll_gather_into_f32(k, reinterpret_cast<const float *const *>(ws.data()), dims.data(),
                           rp.data(), n, f.data(), cp.data(), out.data_ptr<float>(), width);
    else
        ll_gather_into_f64(k, reinterpret_cast<const double *const *>(ws.data()), dims.data(),
                           rp.data(), n, f.data(), cp.data(), out.data_ptr<double>(), width);
    return out;
}

struct GatherGroupsFunction : public torch::autograd::Function<GatherGroupsFunction> {
    static Tensor forward(torch::autograd::AutogradContext *ctx, at::TensorList weights,
                          at::TensorList rows, at::IntArrayRef columns, int64_t width) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("lookuplinear::gather_groups", "")
                             .typed<Tensor(at::TensorList, at::TensorList, at::IntArrayRef,
                                           int64_t)>();
        ctx->saved_data["segments"] = gather_groups_segments(weights, rows, columns, width);
        for (size_t g = 0; g < weights.size(); g++) {
            ctx->saved_data["rows" + std::to_string(g)] = weights[g].sym_size(0);
            ctx->saved_data["dim" + std::to_string(g)] = weights[g].sym_size(1);
        }
        ctx->save_for_backward(rows.vec());
        at::AutoDispatchBelowADInplaceOrView below;
        return op.call(weights, rows, columns, width);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        const auto rows = ctx->get_saved_variables();
        const size_t k = rows.size();
        // each group's (N, F_g * dim_g) gradient: through the dispatcher's autograd layer
        // (recorded under create_graph=True, its own backward in_feature_order)
        const std::vector<int64_t> features(k, 0);
        const auto parts = call_in_feature_order_backward(
            grads[0], features, ctx->saved_data["segments"].toIntVector());
        torch::autograd::variable_list out(2 * k + 2);
        for (size_t g = 0; g < k; g++) {
            if (!ctx->needs_input_grad(g)) continue;
            const c10::SymInt num = ctx->saved_data["rows" + std::to_string(g)].toSymInt(),
                              dim = ctx->saved_data["dim" + std::to_string(g)].toSymInt();
            const Tensor table = fused_table(g);
            if (table.defined() &&
                fused_defer(table, parts[g].reshape_symint({-1, dim}), rows[g].reshape(-1),
                            optional<Tensor>(), optional<Tensor>(), optional<int64_t>()))
                continue;  // taken by the table's fused=True optimizer
            const std::vector<c10::SymInt> shape{num, dim};
            out[g] = entry_grads(rows[g].reshape(-1), optional<Tensor>(), optional<Tensor>(),
                                 optional<int64_t>(), parts[g].reshape_symint({-1, dim}),
                                 shape);
        }
        return out;
    }
};

Tensor gather_groups_autograd(at::TensorList weights, at::TensorList rows,
                              at::IntArrayRef columns, int64_t width) {
    return GatherGroupsFunction::apply(weights, rows, columns, width);
}

}  // namespace
}  // namespace lookuplinear

TORCH_LIBRARY_FRAGMENT(lookuplinear, m) {
    m.def("gather_groups(Tensor[] weights, Tensor[] rows, int[] columns, int width) -> Tensor");
}

TORCH_LIBRARY_IMPL(lookuplinear, CPU, m) {
    m.impl("gather_groups", &lookuplinear::gather_groups_cpu);
}

TORCH_LIBRARY_IMPL(lookuplinear, CompositeExplicitAutograd, m) {
    m.impl("gather_groups", &lookuplinear::gather_groups_twin);
}

TORCH_LIBRARY_IMPL(lookuplinear, Autograd, m) {
    m.impl("gather_groups", &lookuplinear::gather_groups_autograd);
}

// ==== hashing, n-grams, input checks, dual coordinate descent ==============================
// Host kernels (their inputs are strings, texts, a batch's offsets read on the CPU, a solver's
// state): CPU kernels only, and no autograd (a fallthrough: nothing here is differentiated).
// None appears in a recorded graph: the Python side runs their twins while one is recorded.

extern "C" {
void ll_splitmix64(const int64_t *keys, int64_t n, int64_t *out);
int64_t ll_ngram_bucket(int64_t h, int64_t bucket);
void ll_renumber_ids(int64_t *ids, int64_t n);
#define LL_COUNT_ROWS_DECL(I, SFX)                                                          \
    int64_t ll_count_rows_##SFX(const int64_t *ids, const int64_t *doc_ptr, int64_t n_docs, \
                                const int64_t *column, const uint8_t *text,                 \
                                const int64_t *starts, int64_t word_ngrams, int64_t bucket, \
                                int64_t n_words, int64_t *indptr, I *indices, float *data);
LL_COUNT_ROWS_DECL(int32_t, i32)
LL_COUNT_ROWS_DECL(int64_t, i64)
int64_t ll_count_equal_i32(const int32_t *indices, int64_t n, int64_t value);
int64_t ll_count_equal_i64(const int64_t *indices, int64_t n, int64_t value);
#define LL_DROP_ENTRIES_DECL(I, SFX)                                                         \
    int64_t ll_drop_entries_##SFX(const I *indices, const I *offsets, int64_t n_bags,        \
                                  int64_t value, int64_t *kept, I *new_indices,             \
                                  I *new_offsets);
LL_DROP_ENTRIES_DECL(int32_t, i32)
LL_DROP_ENTRIES_DECL(int64_t, i64)
#define LL_SHIFTED_ROWS_DECL(I, SFX)                                                         \
    int64_t ll_shifted_rows_##SFX(const I *values, const I *offsets, int64_t F, int64_t N,  \
                                  const int64_t *shift, const int64_t *limit, int64_t *out);
LL_SHIFTED_ROWS_DECL(int32_t, i32)
LL_SHIFTED_ROWS_DECL(int64_t, i64)
#define LL_ONE_ID_ROWS_DECL(I, SFX)                                                          \
    int64_t ll_one_id_rows_##SFX(const I *values, const I *offsets, int64_t F, int64_t N,   \
                                 const int64_t *shift, const int64_t *limit,                \
                                 const int64_t *place, int64_t *rows);
LL_ONE_ID_ROWS_DECL(int32_t, i32)
LL_ONE_ID_ROWS_DECL(int64_t, i64)
#define LL_DUAL_CD_DECL(I, SFX)                                                              \
    void ll_dual_cd_##SFX(float *w, float *b, const I *indptr, const I *indices,            \
                          const float *data, int64_t *order, int64_t *n_active,             \
                          const double *qdiag, const double *target, const double *diag,    \
                          int64_t diag_cols, double *dual, int64_t n_out, int64_t loss,     \
                          double *pg, double *f, float *step, int64_t *moved);
LL_DUAL_CD_DECL(int32_t, f32_i32)
LL_DUAL_CD_DECL(int64_t, f32_i64)
int64_t ll_idmap_assign(int64_t *table, int64_t mask, const int64_t *keys, int64_t n,
                        int64_t *next, int64_t end, int64_t *out);
}

namespace lookuplinear {
namespace {

// ValueError unless t is a 1-D tensor of dtype (contiguous too where the kernel writes it)
void check_vector(const char *op, const char *name, const Tensor &t, at::ScalarType dtype,
                  bool contiguous = false) {
    TORCH_CHECK_VALUE(t.dim() == 1 && t.scalar_type() == dtype && t.device().is_cpu() &&
                          (!contiguous || t.is_contiguous()),
                      "lookuplinear::", op, ": ", name, " must be a 1-D ",
                      contiguous ? "contiguous " : "", dtype, " CPU tensor; got ",
                      t.scalar_type(), " of shape ", t.sizes(), " on ", t.device());
}

// ValueError unless s[0..n] are segment bounds in [0, size], never decreasing (the C
// kernels read the bytes, or entries, between them)
void check_bounds(const char *op, const char *name, const int64_t *s, int64_t n, int64_t size) {
    bool ok = n >= 1 && s[0] >= 0 && s[n - 1] <= size;
    for (int64_t k = 1; k < n; k++) ok &= s[k] >= s[k - 1];
    TORCH_CHECK_VALUE(ok, "lookuplinear::", op, ": ", name, " must be at least one bound, "
                      "never decreasing, within [0, ", size, "]");
}

// ---- murmur3_32, splitmix64, ngram_bucket --------------------------------------------------

// the signed MurmurHash3_x86_32 (seed 0) of each segment data[starts[i]:starts[i + 1]]
Tensor murmur3_32_cpu(const Tensor &data, const Tensor &starts) {
    check_vector("murmur3_32", "data", data, at::kByte);
    check_vector("murmur3_32", "starts", starts, at::kLong);
    const Tensor d = data.contiguous(), s = starts.contiguous();
    const int64_t *sp = s.data_ptr<int64_t>(), n = s.numel();
    check_bounds("murmur3_32", "starts", sp, n, d.numel());
    Tensor out = at::empty({n - 1}, s.options());
    const uint8_t *dp = d.data_ptr<uint8_t>();
    int64_t *op = out.data_ptr<int64_t>();
    for (int64_t i = 0; i + 1 < n; i++) op[i] = ll_murmur3_32(dp + sp[i], sp[i + 1] - sp[i]);
    return out;
}

Tensor splitmix64_cpu(const Tensor &keys) {
    TORCH_CHECK_VALUE(keys.scalar_type() == at::kLong, "lookuplinear::splitmix64: keys must "
                      "be int64; got ", keys.scalar_type());
    const Tensor k = keys.contiguous();
    Tensor out = at::empty_like(k);
    ll_splitmix64(k.data_ptr<int64_t>(), k.numel(), out.data_ptr<int64_t>());
    return out;
}

// FeatureHasher's column of each signed 32-bit hash (the low 32 bits of each int64)
Tensor ngram_bucket_cpu(const Tensor &hashes, int64_t buckets) {
    TORCH_CHECK_VALUE(buckets >= 1, "lookuplinear::ngram_bucket: buckets must be >= 1; got ",
                      buckets);
    const Tensor h = hashes.to(at::kLong).contiguous();
    Tensor out = at::empty_like(h);
    const int64_t *hp = h.data_ptr<int64_t>();
    int64_t *op = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < h.numel(); i++) op[i] = ll_ngram_bucket(hp[i], buckets);
    return out;
}

// ---- renumber_ids, count_rows ------------------------------------------------------------

void renumber_ids_cpu(const Tensor &ids) {
    check_vector("renumber_ids", "ids", ids, at::kLong, true);
    int64_t *p = ids.data_ptr<int64_t>();
    bool ok = true;
    for (int64_t k = 0; k < ids.numel(); k++)  // one unsigned compare: a negative id wraps
        ok &= static_cast<uint64_t>(p[k]) <= static_cast<uint64_t>(k);
    TORCH_CHECK_VALUE(ok, "lookuplinear::renumber_ids: ids[k] must be the position of the "
                      "first occurrence of token k's string, in [0, k]");
    ll_renumber_ids(p, ids.numel());
}

std::tuple<Tensor, Tensor, Tensor> count_rows_cpu(const Tensor &ids, const Tensor &doc_ptr,
                                                  const Tensor &column, const Tensor &text,
                                                  const Tensor &starts, int64_t word_ngrams,
                                                  int64_t buckets, int64_t n_words,
                                                  at::ScalarType index_dtype) {
    const char *op = "count_rows";
    check_vector(op, "ids", ids, at::kLong);
    check_vector(op, "doc_ptr", doc_ptr, at::kLong);
    check_vector(op, "column", column, at::kLong);
    check_vector(op, "text", text, at::kByte);
    check_vector(op, "starts", starts, at::kLong);
    TORCH_CHECK_VALUE(index_dtype == at::kInt || index_dtype == at::kLong, "lookuplinear::",
                      op, ": index_dtype must be int32 or int64; got ", index_dtype);
    TORCH_CHECK_VALUE(word_ngrams < 2 || buckets >= 1, "lookuplinear::", op, ": n-grams need "
                      "buckets >= 1; got ", buckets);
    TORCH_CHECK_VALUE(starts.numel() == column.numel() + 1, "lookuplinear::", op, ": one start "
                      "per token string and the end (", column.numel() + 1, "); got ",
                      starts.numel());
    const Tensor i = ids.contiguous(), dp = doc_ptr.contiguous(), c = column.contiguous(),
                 t = text.contiguous(), s = starts.contiguous();
    check_bounds(op, "starts", s.data_ptr<int64_t>(), s.numel(), t.numel());
    check_bounds(op, "doc_ptr", dp.data_ptr<int64_t>(), dp.numel(), i.numel());
    const int64_t *ip = i.data_ptr<int64_t>(), n_unique = c.numel();
    bool ok = true;
    for (int64_t k = 0; k < i.numel(); k++)
        ok &= static_cast<uint64_t>(ip[k]) < static_cast<uint64_t>(n_unique);
    TORCH_CHECK_VALUE(ok, "lookuplinear::", op, ": every id must be in [0, ", n_unique, ")");
    // at most one word and word_ngrams - 1 n-grams a token
    const int64_t size = i.numel() * std::max<int64_t>(word_ngrams, 1);
    Tensor indptr = at::empty({dp.numel()}, dp.options());
    Tensor indices = at::empty({size}, dp.options().dtype(index_dtype));
    Tensor data = at::empty({size}, dp.options().dtype(at::kFloat));
    const int64_t n_docs = dp.numel() - 1;
    const int64_t nnz =
        index_dtype == at::kInt
            ? ll_count_rows_i32(ip, dp.data_ptr<int64_t>(), n_docs, c.data_ptr<int64_t>(),
                                t.data_ptr<uint8_t>(), s.data_ptr<int64_t>(), word_ngrams,
                                buckets, n_words, indptr.data_ptr<int64_t>(),
                                indices.data_ptr<int32_t>(), data.data_ptr<float>())
            : ll_count_rows_i64(ip, dp.data_ptr<int64_t>(), n_docs, c.data_ptr<int64_t>(),
                                t.data_ptr<uint8_t>(), s.data_ptr<int64_t>(), word_ngrams,
                                buckets, n_words, indptr.data_ptr<int64_t>(),
                                indices.data_ptr<int64_t>(), data.data_ptr<float>());
    return {indptr, indices.slice(0, 0, nnz), data.slice(0, 0, nnz)};
}

// ---- offsets_ok, drop_entries --------------------------------------------------------------

bool offsets_ok_cpu(const Tensor &offsets, int64_t nnz, bool include_last) {
    TORCH_CHECK_VALUE(at::isIntegralType(offsets.scalar_type(), false), "lookuplinear::"
                      "offsets_ok: offsets must be integers; got ", offsets.scalar_type());
    if (offsets.scalar_type() == at::kInt && offsets.dim() == 1 && offsets.is_contiguous())
        return ll_offsets_ok_i32(offsets.data_ptr<int32_t>(), offsets.numel(), nnz,
                                 include_last) != 0;
    const Tensor o = offsets.reshape(-1).to(at::kLong).contiguous();
    return ll_offsets_ok_i64(o.data_ptr<int64_t>(), o.numel(), nnz, include_last) != 0;
}

// the entries not equal to value (kept positions, their indices, the new offsets); three
// empty tensors where none equals it
std::tuple<Tensor, Tensor, Tensor> drop_entries_cpu(const Tensor &indices,
                                                    const Tensor &offsets, int64_t value) {
    TORCH_CHECK_VALUE(is_i32_i64(indices) && offsets.scalar_type() == indices.scalar_type() &&
                          indices.dim() == 1 && offsets.dim() == 1 && offsets.numel() > 0,
                      "lookuplinear::drop_entries: 1-D indices and offsets of one dtype, "
                      "int32 or int64, and at least one offset; got ", indices.scalar_type(),
                      " ", indices.sizes(), " and ", offsets.scalar_type(), " ",
                      offsets.sizes());
    const Tensor idx = indices.contiguous(), off = offsets.contiguous();
    const bool i32 = idx.scalar_type() == at::kInt;
    const int64_t n = idx.numel();
    const int64_t dropped = i32 ? ll_count_equal_i32(idx.data_ptr<int32_t>(), n, value)
                                : ll_count_equal_i64(idx.data_ptr<int64_t>(), n, value);
    if (dropped == 0)
        return {at::empty({0}, idx.options().dtype(at::kLong)), at::empty({0}, idx.options()),
                at::empty({0}, off.options())};
    check_offsets("drop_entries", off, n);  // the kernel reads the entries they name
    Tensor kept = at::empty({n - dropped}, idx.options().dtype(at::kLong));
    Tensor new_indices = at::empty({n - dropped}, idx.options());
    Tensor new_offsets = at::empty({off.numel()}, off.options());
    if (i32)
        ll_drop_entries_i32(idx.data_ptr<int32_t>(), off.data_ptr<int32_t>(), off.numel() - 1,
                            value, kept.data_ptr<int64_t>(), new_indices.data_ptr<int32_t>(),
                            new_offsets.data_ptr<int32_t>());
    else
        ll_drop_entries_i64(idx.data_ptr<int64_t>(), off.data_ptr<int64_t>(), off.numel() - 1,
                            value, kept.data_ptr<int64_t>(), new_indices.data_ptr<int64_t>(),
                            new_offsets.data_ptr<int64_t>());
    return {kept, new_indices, new_offsets};
}

// ---- idmap_admit_ ------------------------------------------------------------------------

// An IdMap's call in training (admit_after=1), in place on its state: every key's row (new keys
// take the free rows in order of first appearance), the rows read stamped with the call's
// number, the call counted. Returns each key's table row (its map row + fallback_rows, or its
// hashed fallback row where no row is free) and how many keys got no map row.
std::tuple<Tensor, int64_t> idmap_admit_cpu(const Tensor &table, const Tensor &keys,
                                            const Tensor &row_id, const Tensor &last_used,
                                            const Tensor &assigned, const Tensor &clock,
                                            int64_t fallback_rows) {
    const char *op = "idmap_admit_";
    check_vector(op, "table", table, at::kLong, true);
    check_vector(op, "keys", keys, at::kLong);
    check_vector(op, "row_id", row_id, at::kLong, true);
    check_vector(op, "last_used", last_used, at::kLong, true);
    const int64_t capacity = row_id.numel(), slots = table.numel() / 2;
    TORCH_CHECK_VALUE(last_used.numel() == capacity, "lookuplinear::idmap_admit_: row_id and "
                      "last_used hold one entry per row of the map; got ", capacity, " and ",
                      last_used.numel());
    // a probe ends at an empty slot: the table has more slots than the map has rows
    TORCH_CHECK_VALUE(table.numel() % 2 == 0 && slots > capacity && (slots & (slots - 1)) == 0,
                      "lookuplinear::idmap_admit_: the table holds a power of 2 of (key, value) "
                      "slots, more than the map's ", capacity, " rows; got ", table.numel(),
                      " entries");
    for (const Tensor *t : {&assigned, &clock})
        TORCH_CHECK_VALUE(t->dim() == 0 && t->scalar_type() == at::kLong && t->device().is_cpu(),
                          "lookuplinear::idmap_admit_: assigned and clock are 0-dimensional "
                          "int64 CPU tensors; got ", t->scalar_type(), " of shape ", t->sizes());
    int64_t *next_row = assigned.data_ptr<int64_t>(), *calls = clock.data_ptr<int64_t>();
    const int64_t start = *next_row, now = *calls;  // (read in place: no dispatch)
    TORCH_CHECK_VALUE(start >= 0 && start <= capacity, "lookuplinear::idmap_admit_: assigned "
                      "counts the rows given out, in [0, ", capacity, "]; got ", start);
    TORCH_CHECK_VALUE(fallback_rows >= 1, "lookuplinear::idmap_admit_: a key without a row is "
                      "hashed into fallback_rows, which must be >= 1; got ", fallback_rows);
    const Tensor k = keys.contiguous();
    const int64_t n = k.numel(), *kp = k.data_ptr<int64_t>();
    Tensor rows = at::empty({n}, k.options());
    int64_t *rp = rows.data_ptr<int64_t>(), *ids = row_id.data_ptr<int64_t>(),
            *used = last_used.data_ptr<int64_t>(), next = start, missing = 0;
    ll_idmap_assign(table.data_ptr<int64_t>(), slots - 1, kp, n, &next, capacity, rp);
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = rp[i];
        if (r < 0) {
            missing++;
            rp[i] = hashed_row(kp[i], fallback_rows);
            continue;
        }
        if (r >= start) ids[r] = kp[i];  // a row given in this call: its key
        used[r] = now;
        rp[i] = r + fallback_rows;
    }
    *next_row = next;
    *calls = now + 1;
    return {rows, missing};
}

// ---- dual_cd_epoch -----------------------------------------------------------------------

// ValueError unless t is a contiguous CPU tensor of dtype and shape
void check_array(const char *name, const Tensor &t, at::ScalarType dtype,
                 at::IntArrayRef shape) {
    TORCH_CHECK_VALUE(t.scalar_type() == dtype && t.sizes() == shape && t.is_contiguous() &&
                          t.device().is_cpu(),
                      "lookuplinear::dual_cd_epoch: ", name, " must be a contiguous ", dtype,
                      " CPU tensor of shape ", shape, "; got ", t.scalar_type(), " of shape ",
                      t.sizes());
}

// one epoch of ll_dual_cd over order[:n_active] (rows: CSR, checked once by the caller),
// weight, bias, order and dual updated in place: (n_active, pg_max, pg_min)
std::tuple<int64_t, double, double> dual_cd_epoch_cpu(
    const Tensor &weight, const Tensor &bias, const Tensor &indptr, const Tensor &indices,
    const Tensor &data, const Tensor &order, int64_t n_active, const Tensor &qdiag,
    const Tensor &target, const Tensor &diag, const Tensor &dual, int64_t loss,
    double shrink_above) {
    TORCH_CHECK_VALUE(weight.dim() == 2, "lookuplinear::dual_cd_epoch: weight must be 2-D; got ",
                      weight.sizes());
    const int64_t n_out = weight.size(1), n = order.numel(), nnz = indices.numel();
    check_array("weight", weight, at::kFloat, weight.sizes());
    check_array("bias", bias, at::kFloat, {n_out});
    check_array("order", order, at::kLong, {n});
    check_array("indptr", indptr, indices.scalar_type(), {n + 1});
    TORCH_CHECK_VALUE(is_i32_i64(indices), "lookuplinear::dual_cd_epoch: indices must be "
                      "int32 or int64; got ", indices.scalar_type());
    check_array("indices", indices, indices.scalar_type(), {nnz});
    check_array("data", data, at::kFloat, {nnz});
    check_array("qdiag", qdiag, at::kDouble, {n});
    // one C_i a row, or one a row and output
    if (diag.dim() == 2)
        check_array("diag", diag, at::kDouble, {n, n_out});
    else
        check_array("diag", diag, at::kDouble, {n});
    const int64_t diag_cols = diag.dim() == 2 ? n_out : 1;
    check_array("target", target, at::kDouble, {n, n_out});
    check_array("dual", dual, at::kDouble, {n, n_out});
    TORCH_CHECK_VALUE(0 <= n_active && n_active <= n && (loss == 0 || loss == 1),
                      "lookuplinear::dual_cd_epoch: n_active in [0, ", n, "] and loss 0 or 1; "
                      "got ", n_active, " and ", loss);
    double pg[3] = {shrink_above, 0.0, 0.0};
    std::vector<double> f(n_out);
    std::vector<float> step(n_out);
    std::vector<int64_t> moved(n_out);
    if (indices.scalar_type() == at::kInt)
        ll_dual_cd_f32_i32(weight.data_ptr<float>(), bias.data_ptr<float>(),
                           indptr.data_ptr<int32_t>(), indices.data_ptr<int32_t>(),
                           data.data_ptr<float>(), order.data_ptr<int64_t>(), &n_active,
                           qdiag.data_ptr<double>(), target.data_ptr<double>(),
                           diag.data_ptr<double>(), diag_cols, dual.data_ptr<double>(), n_out,
                           loss, pg,
                           f.data(), step.data(), moved.data());
    else
        ll_dual_cd_f32_i64(weight.data_ptr<float>(), bias.data_ptr<float>(),
                           indptr.data_ptr<int64_t>(), indices.data_ptr<int64_t>(),
                           data.data_ptr<float>(), order.data_ptr<int64_t>(), &n_active,
                           qdiag.data_ptr<double>(), target.data_ptr<double>(),
                           diag.data_ptr<double>(), diag_cols, dual.data_ptr<double>(), n_out,
                           loss, pg,
                           f.data(), step.data(), moved.data());
    return {n_active, pg[1], pg[2]};
}

// ---- shifted_rows ------------------------------------------------------------------------
// A keyed batch's IDs as rows of the table that holds its features' tables one after another:
// values[k] + shift[f] for the entries k of feature f (n_features features of N bags each,
// feature-major, CSR offsets), every ID of feature f in [0, limit[f]). On the CPU one C pass
// (an ID out of range: a RuntimeError naming it, as F.embedding_bag's and the recorded graphs'
// asserts raise); on other devices torch ops, the range asserted on the device without a host
// synchronisation.

// a keyed batch of n_features features: 1-D int32 or int64 values and offsets (of one dtype
// where one_dtype), at least one offset, n_features dividing the bags (the keyed passes'
// common operands)
void check_keyed_operands(const Tensor &values, const Tensor &offsets, int64_t n_features,
                          const char *op, bool one_dtype) {
    TORCH_CHECK_VALUE(is_i32_i64(values) && is_i32_i64(offsets) && values.dim() == 1 &&
                          offsets.dim() == 1 && offsets.numel() > 0 &&
                          (!one_dtype || offsets.scalar_type() == values.scalar_type()),
                      "lookuplinear::", op, ": 1-D values and offsets ",
                      one_dtype ? "of one dtype, int32 or int64" : "int32 or int64",
                      ", and at least one offset; got ", values.scalar_type(), " ",
                      values.sizes(), " and ", offsets.scalar_type(), " ", offsets.sizes());
    TORCH_CHECK_VALUE(n_features >= 1 && (offsets.numel() - 1) % n_features == 0,
                      "lookuplinear::", op, ": n_features must divide the ",
                      offsets.numel() - 1, " bags; got ", n_features);
}

void check_shifted_operands(const Tensor &values, const Tensor &offsets, int64_t n_features,
                            const Tensor &shift, const Tensor &limit,
                            const char *op = "shifted_rows") {
    check_keyed_operands(values, offsets, n_features, op, true);
    for (const Tensor *t : {&shift, &limit})
        TORCH_CHECK_VALUE(t->scalar_type() == at::kLong && t->dim() == 1 &&
                              t->numel() == n_features,
                          "lookuplinear::", op, ": shift and limit must be int64 of shape (",
                          n_features, ",); got ", t->scalar_type(), " ", t->sizes());
}

// an ID outside its feature's table, at values[pos] of feature f: the RuntimeError of both
// keyed passes (shifted_rows, one_id_rows), as F.embedding_bag and a recorded graph raise
void id_out_of_range(const char *op, const Tensor &values, int64_t pos, int64_t f,
                     const Tensor &limit) {
    TORCH_CHECK(false, "lookuplinear::", op, ": ID ", values.to(at::kLong).data_ptr<int64_t>()[pos],
                " at values[", pos, "] (feature ", f, ") is outside its feature's table, rows "
                "[0, ", limit.data_ptr<int64_t>()[f], "). Map raw IDs to rows first (IdMap, or "
                "a hashing TableConfig).");
}

Tensor shifted_rows_cpu(const Tensor &values, const Tensor &offsets, int64_t n_features,
                        const Tensor &shift, const Tensor &limit) {
    check_shifted_operands(values, offsets, n_features, shift, limit);
    check_offsets("shifted_rows", offsets, values.numel());  // the kernel reads their entries
    const Tensor v = values.contiguous(), o = offsets.contiguous();
    const Tensor s = shift.contiguous(), l = limit.contiguous();
    const int64_t n = (o.numel() - 1) / n_features;
    Tensor out = at::empty({v.numel()}, v.options().dtype(at::kLong));
    const int64_t bad =
        v.scalar_type() == at::kInt
            ? ll_shifted_rows_i32(v.data_ptr<int32_t>(), o.data_ptr<int32_t>(), n_features, n,
                                  s.data_ptr<int64_t>(), l.data_ptr<int64_t>(),
                                  out.data_ptr<int64_t>())
            : ll_shifted_rows_i64(v.data_ptr<int64_t>(), o.data_ptr<int64_t>(), n_features, n,
                                  s.data_ptr<int64_t>(), l.data_ptr<int64_t>(),
                                  out.data_ptr<int64_t>());
    if (bad >= 0) {
        const Tensor ends = o.to(at::kLong);
        int64_t f = 0;
        while (f + 1 < n_features && ends.data_ptr<int64_t>()[(f + 1) * n] <= bad) f++;
        id_out_of_range("shifted_rows", v, bad, f, l);
    }
    return out;
}

Tensor shifted_rows_twin(const Tensor &values, const Tensor &offsets, int64_t n_features,
                         const Tensor &shift, const Tensor &limit) {
    check_shifted_operands(values, offsets, n_features, shift, limit);
    const int64_t n = (offsets.numel() - 1) / n_features;
    // each feature's first entry: gathered (its bounds), no value read on the host
    const Tensor at_ = at::arange(n_features + 1, offsets.options().dtype(at::kLong)) * n;
    const Tensor bounds = offsets.index_select(0, at_).to(at::kLong);
    const Tensor counts = bounds.slice(0, 1) - bounds.slice(0, 0, -1);
    const Tensor feature = at::repeat_interleave(
        at::arange(n_features, values.options().dtype(at::kLong)), counts, 0,
        values.numel());
    const Tensor ids = values.to(at::kLong);
    const Tensor bad = at::logical_or(
        ids.lt(0), ids.ge(limit.to(ids.device()).index_select(0, feature)));
    at::_assert_async(bad.any().logical_not(),
                      "lookuplinear: an ID is outside its feature's table [0, num_embeddings). "
                      "Map raw IDs to rows first (IdMap, or a hashing TableConfig).");
    return ids + shift.to(ids.device()).index_select(0, feature);
}

// ---- one_id_rows -------------------------------------------------------------------------
// A keyed batch whose every bag holds one ID (offsets equal to arange(F * N + 1)) as rows of
// the table that holds its features' tables: values (F, N) feature-major plus shift[f], in
// example order (N, F), or with place (F * N,): feature f's row of example n at
// place[f, 0] + n * place[f, 1] (the input of several lookups side by side). On the CPU one C
// pass: a bag that does not hold one ID is a ValueError, an ID out of range a RuntimeError
// naming it; on other devices torch ops, both asserted on the device.

void check_one_id_operands(const Tensor &values, const Tensor &offsets, int64_t n_features,
                           const Tensor &shift, const Tensor &limit,
                           const optional<Tensor> &place) {
    check_shifted_operands(values, offsets, n_features, shift, limit, "one_id_rows");
    TORCH_CHECK_VALUE(values.numel() == offsets.numel() - 1, "lookuplinear::one_id_rows: one "
                      "ID per bag; got ", values.numel(), " IDs for ", offsets.numel() - 1,
                      " bags. Give bags of any length to shifted_rows.");
    if (!place.has_value()) return;
    TORCH_CHECK_VALUE(place->scalar_type() == at::kLong && place->dim() == 2 &&
                          place->size(0) == n_features && place->size(1) == 2,
                      "lookuplinear::one_id_rows: place must be int64 of shape (", n_features,
                      ", 2); got ", place->scalar_type(), " ", place->sizes());
}

// place read on the host: every row it names inside the output, before the C pass writes it
void check_place(const Tensor &place, int64_t n_features, int64_t n) {
    const Tensor p = place.contiguous();
    const int64_t *pp = p.data_ptr<int64_t>(), size = n_features * n;
    for (int64_t f = 0; f < n_features && n > 0; f++) {
        const int64_t first = pp[2 * f], last = first + (n - 1) * pp[2 * f + 1];
        TORCH_CHECK_VALUE(std::min(first, last) >= 0 && std::max(first, last) < size,
                          "lookuplinear::one_id_rows: place[", f, "] = (", first, ", ",
                          pp[2 * f + 1], ") puts feature ", f, "'s rows outside the ", size,
                          " outputs");
    }
}

Tensor one_id_rows_cpu(const Tensor &values, const Tensor &offsets, int64_t n_features,
                       const Tensor &shift, const Tensor &limit,
                       const optional<Tensor> &place) {
    check_one_id_operands(values, offsets, n_features, shift, limit, place);
    const int64_t n = values.numel() / n_features;
    if (place.has_value()) check_place(*place, n_features, n);
    const Tensor v = values.contiguous(), o = offsets.contiguous();
    const Tensor s = shift.contiguous(), l = limit.contiguous();
    const Tensor p = place.has_value() ? place->contiguous() : Tensor();
    const int64_t *pp = p.defined() ? p.data_ptr<int64_t>() : nullptr;
    Tensor out = place.has_value() ? at::empty({v.numel()}, v.options().dtype(at::kLong))
                                   : at::empty({n, n_features}, v.options().dtype(at::kLong));
    const int64_t bad =
        v.scalar_type() == at::kInt
            ? ll_one_id_rows_i32(v.data_ptr<int32_t>(), o.data_ptr<int32_t>(), n_features, n,
                                 s.data_ptr<int64_t>(), l.data_ptr<int64_t>(), pp,
                                 out.data_ptr<int64_t>())
            : ll_one_id_rows_i64(v.data_ptr<int64_t>(), o.data_ptr<int64_t>(), n_features, n,
                                 s.data_ptr<int64_t>(), l.data_ptr<int64_t>(), pp,
                                 out.data_ptr<int64_t>());
    TORCH_CHECK_VALUE(bad != -2, "lookuplinear::one_id_rows: every bag must hold one ID "
                      "(offsets equal to arange(", offsets.numel(), ")); these offsets do not. "
                      "Give bags of any length to shifted_rows.");
    if (bad >= 0) id_out_of_range("one_id_rows", v, bad, bad / n, l);
    return out;
}

Tensor one_id_rows_twin(const Tensor &values, const Tensor &offsets, int64_t n_features,
                        const Tensor &shift, const Tensor &limit,
                        const optional<Tensor> &place) {
    check_one_id_operands(values, offsets, n_features, shift, limit, place);
    const int64_t n = values.numel() / n_features;
    const auto longs = values.options().dtype(at::kLong);
    at::_assert_async(offsets.to(at::kLong).eq(at::arange(offsets.numel(), longs)).all(),
                      "lookuplinear: one_id_rows: every bag must hold one ID.");
    const Tensor ids = values.to(at::kLong).view({n_features, n});
    const Tensor bad = at::logical_or(ids.lt(0), ids.ge(limit.to(ids.device()).unsqueeze(1)));
    at::_assert_async(bad.any().logical_not(),
                      "lookuplinear: an ID is outside its feature's table [0, num_embeddings). "
                      "Map raw IDs to rows first (IdMap, or a hashing TableConfig).");
    const Tensor rows = ids + shift.to(ids.device()).unsqueeze(1);
    if (!place.has_value()) return rows.t().contiguous();
    const Tensor p = place->to(ids.device());
    const Tensor at_ = p.slice(1, 0, 1) + at::arange(n, longs) * p.slice(1, 1, 2);
    return at::empty({n_features * n}, longs).index_put_({at_.reshape(-1)}, rows.reshape(-1));
}

// ---- group_order -------------------------------------------------------------------------
// A keyed batch (n_features features of N bags each, feature-major, CSR offsets) in group
// order: the features taken as `order` lists them, `group_features` of them per group; the
// entries of each feature copied in that order, and each group's CSR offsets from 0 (its
// features' N bags each, one after the other), group after group (n_features * N + groups
// offsets, int64). Each group's bags are then slices: the input of one lookup per group. On
// the CPU one pass; on other devices torch ops, no value read on the host.

void check_group_order_operands(const Tensor &values, const Tensor &offsets,
                                int64_t n_features, at::IntArrayRef order,
                                at::IntArrayRef group_features) {
    check_keyed_operands(values, offsets, n_features, "group_order", false);
    std::vector<bool> seen(n_features, false);
    bool permutation = (int64_t)order.size() == n_features;
    for (const int64_t f : order) {
        permutation = permutation && f >= 0 && f < n_features && !seen[f];
        if (f >= 0 && f < n_features) seen[f] = true;
    }
    TORCH_CHECK_VALUE(permutation, "lookuplinear::group_order: order must list each of the ",
                      n_features, " features once; got ", order);
    int64_t total = 0;
    for (const int64_t k : group_features) {
        TORCH_CHECK_VALUE(k >= 1, "lookuplinear::group_order: every group has a feature; got "
                          "group_features ", group_features);
        total += k;
    }
    TORCH_CHECK_VALUE(total == n_features, "lookuplinear::group_order: group_features must "
                      "add up to the ", n_features, " features; got ", group_features);
}

template <typename V, typename O>
void group_order_pass(const V *v, const O *o, int64_t n, at::IntArrayRef order,
                      at::IntArrayRef group_features, V *out_v, int64_t *out_o) {
    int64_t k = 0, pos = 0, at_ = 0;
    for (const int64_t features : group_features) {
        const int64_t base = pos;  // the group's first entry
        out_o[at_++] = 0;
        for (int64_t j = 0; j < features; j++, k++) {
            const int64_t f = order[k];
            const int64_t a = (int64_t)o[f * n], b = (int64_t)o[(f + 1) * n];
            const int64_t shift = pos - base - a;
            for (int64_t q = 1; q <= n; q++) out_o[at_++] = (int64_t)o[f * n + q] + shift;
            std::copy(v + a, v + b, out_v + pos);
            pos += b - a;
        }
    }
}

std::tuple<Tensor, Tensor> group_order_cpu(const Tensor &values, const Tensor &offsets,
                                           int64_t n_features, at::IntArrayRef order,
                                           at::IntArrayRef group_features) {
    check_group_order_operands(values, offsets, n_features, order, group_features);
    check_offsets("group_order", offsets, values.numel());  // the pass reads their entries
    const Tensor v = values.contiguous(), o = offsets.contiguous();
    const int64_t n = (o.numel() - 1) / n_features;
    Tensor out_v = at::empty_like(v);
    Tensor out_o = at::empty({o.numel() - 1 + (int64_t)group_features.size()},
                             o.options().dtype(at::kLong));
    int64_t *oo = out_o.data_ptr<int64_t>();
    if (v.scalar_type() == at::kInt) {
        if (o.scalar_type() == at::kInt)
            group_order_pass(v.data_ptr<int32_t>(), o.data_ptr<int32_t>(), n, order,
                             group_features, out_v.data_ptr<int32_t>(), oo);
        else
            group_order_pass(v.data_ptr<int32_t>(), o.data_ptr<int64_t>(), n, order,
                             group_features, out_v.data_ptr<int32_t>(), oo);
    } else if (o.scalar_type() == at::kInt) {
        group_order_pass(v.data_ptr<int64_t>(), o.data_ptr<int32_t>(), n, order,
                         group_features, out_v.data_ptr<int64_t>(), oo);
    } else {
        group_order_pass(v.data_ptr<int64_t>(), o.data_ptr<int64_t>(), n, order,
                         group_features, out_v.data_ptr<int64_t>(), oo);
    }
    return {out_v, out_o};
}

std::tuple<Tensor, Tensor> group_order_twin(const Tensor &values, const Tensor &offsets,
                                            int64_t n_features, at::IntArrayRef order,
                                            at::IntArrayRef group_features) {
    check_group_order_operands(values, offsets, n_features, order, group_features);
    const int64_t n = (offsets.numel() - 1) / n_features;
    const auto longs = offsets.options().dtype(at::kLong);
    const Tensor o = offsets.to(at::kLong);
    const Tensor every = (o.slice(0, 1) - o.slice(0, 0, -1)).view({n_features, n});
    // the features in `order` as slices of the operands: an index tensor of `order` would be
    // copied from the host, a synchronisation on CUDA
    std::vector<Tensor> picked, firsts;
    for (const int64_t f : order) {
        picked.push_back(every.slice(0, f, f + 1));
        firsts.push_back(o.slice(0, f * n, f * n + 1));
    }
    const Tensor lengths = at::cat(picked);
    std::vector<Tensor> pieces;  // each group: a zero, then its bags' ends
    int64_t k = 0;
    for (const int64_t features : group_features) {
        pieces.push_back(at::zeros({1}, longs));
        pieces.push_back(lengths.slice(0, k, k + features).reshape(-1).cumsum(0));
        k += features;
    }
    // each entry's place in the input: its feature's first entry there, plus its rank in it
    const Tensor counts = lengths.sum(1);
    const Tensor starts = at::cat(firsts);
    const Tensor moved = at::cumsum(counts, 0) - counts;  // each feature's first place out
    const Tensor from = at::arange(values.numel(), longs) +
                        at::repeat_interleave(starts - moved, counts, 0, values.numel());
    return {values.index_select(0, from), at::cat(pieces)};
}

}  // namespace
}  // namespace lookuplinear

// the host operators' schemas (ops/library.py's HOST_SCHEMAS)
TORCH_LIBRARY_FRAGMENT(lookuplinear, m) {
    m.def("murmur3_32(Tensor data, Tensor starts) -> Tensor");
    m.def("splitmix64(Tensor keys) -> Tensor");
    m.def("ngram_bucket(Tensor hashes, int buckets) -> Tensor");
    m.def("renumber_ids(Tensor(a!) ids) -> ()");
    m.def("count_rows(Tensor ids, Tensor doc_ptr, Tensor column, Tensor text, Tensor starts, "
          "int word_ngrams, int buckets, int n_words, ScalarType index_dtype) -> "
          "(Tensor, Tensor, Tensor)");
    m.def("offsets_ok(Tensor offsets, int nnz, bool include_last=True) -> bool");
    m.def("drop_entries(Tensor indices, Tensor offsets, int value) -> (Tensor, Tensor, Tensor)");
    m.def("dual_cd_epoch(Tensor(a!) weight, Tensor(b!) bias, Tensor indptr, Tensor indices, "
          "Tensor data, Tensor(c!) order, int n_active, Tensor qdiag, Tensor target, "
          "Tensor diag, Tensor(d!) dual, int loss, float shrink_above) -> (int, float, float)");
    m.def("idmap_admit_(Tensor(a!) table, Tensor keys, Tensor(b!) row_id, Tensor(c!) last_used, "
          "Tensor(d!) assigned, Tensor(e!) clock, int fallback_rows) -> (Tensor, int)");
    m.def("shifted_rows(Tensor values, Tensor offsets, int n_features, Tensor shift, "
          "Tensor limit) -> Tensor");
    m.def("one_id_rows(Tensor values, Tensor offsets, int n_features, Tensor shift, "
          "Tensor limit, Tensor? place=None) -> Tensor");
    m.def("group_order(Tensor values, Tensor offsets, int n_features, int[] order, "
          "int[] group_features) -> (Tensor, Tensor)");
}

// shifted_rows, one_id_rows, group_order: one pass on the CPU, torch ops on every other
// device (no autograd: integers)
TORCH_LIBRARY_IMPL(lookuplinear, CPU, m) {
    m.impl("shifted_rows", &lookuplinear::shifted_rows_cpu);
    m.impl("one_id_rows", &lookuplinear::one_id_rows_cpu);
    m.impl("group_order", &lookuplinear::group_order_cpu);
}
TORCH_LIBRARY_IMPL(lookuplinear, CompositeExplicitAutograd, m) {
    m.impl("shifted_rows", &lookuplinear::shifted_rows_twin);
    m.impl("one_id_rows", &lookuplinear::one_id_rows_twin);
    m.impl("group_order", &lookuplinear::group_order_twin);
}

TORCH_LIBRARY_IMPL(lookuplinear, CPU, m) {
    using namespace lookuplinear;
    m.impl("murmur3_32", &murmur3_32_cpu);
    m.impl("splitmix64", &splitmix64_cpu);
    m.impl("ngram_bucket", &ngram_bucket_cpu);
    m.impl("renumber_ids", &renumber_ids_cpu);
    m.impl("count_rows", &count_rows_cpu);
    m.impl("offsets_ok", &offsets_ok_cpu);
    m.impl("drop_entries", &drop_entries_cpu);
    m.impl("dual_cd_epoch", &dual_cd_epoch_cpu);
    m.impl("idmap_admit_", &idmap_admit_cpu);
}

TORCH_LIBRARY_IMPL(lookuplinear, AutogradCPU, m) {
    for (const char *name : {"murmur3_32", "splitmix64", "ngram_bucket", "renumber_ids",
                             "count_rows", "offsets_ok", "drop_entries", "dual_cd_epoch",
                             "idmap_admit_"})
        m.impl(name, torch::CppFunction::makeFallthrough());
}

// ==== the optimizers' row updates ==========================================================
// rows_update_: an optimizer's update of a table's rows by their gradient rows (the step of
// lookuplinear.optim on a stored row-sparse gradient: a row's entries next to each other, as a
// lookup's gradient has them, their gradient rows summed in entry order as the row is updated);
// rows_fused_: the same update straight from lookups' grad_out, the rows grouped and each
// updated as soon as its gradient is summed (fused=True), several tables in one call. In place
// on the tables and their optimizer state; no autograd (a fallthrough). The CPU kernels check
// every operand the C kernels read (dtype, layout, shapes, rows in range, the scalars' number)
// and raise a ValueError or IndexError naming it; a table the C kernels do not take (another
// dtype or layout) is left to the torch-op twins (registered from Python, library.py, with
// every other device's kernel).

extern "C" {
#define LL_ROWS_DECL(OPT, T, SFX)                                                             \
    int64_t ll_rows_##OPT##_##SFX(T *w, T *s, const int64_t *rows, int64_t n,                 \
                                  const T *values, int64_t dim, const double *params);        \
    void ll_fused_##OPT##_##SFX(int64_t n_tables, const int64_t *const *idx, const int64_t *n,  \
                                const int64_t *const *offsets, const int64_t *n_bags,        \
                                const int64_t *padding_idx, const T *const *weights,         \
                                const T *const *grad_out, const int64_t *dim, T *const *w,   \
                                T *const *s, const double *params, int64_t *groups);
#define LL_ROWS_DECL_ALL(OPT) LL_ROWS_DECL(OPT, float, f32) LL_ROWS_DECL(OPT, double, f64)
LL_ROWS_DECL_ALL(sgd)
LL_ROWS_DECL_ALL(adagrad)
LL_ROWS_DECL_ALL(rowwise_adagrad)
LL_ROWS_DECL_ALL(adam)
}

namespace lookuplinear {
namespace {

template <typename T>
using RowsFn = int64_t (*)(T *, T *, const int64_t *, int64_t, const T *, int64_t,
                           const double *);
template <typename T>
using FusedFn = void (*)(int64_t, const int64_t *const *, const int64_t *,
                         const int64_t *const *, const int64_t *, const int64_t *,
                         const T *const *, const T *const *, const int64_t *, T *const *,
                         T *const *, const double *, int64_t *);

// one optimizer's C kernels: its name, its number of scalars (ops/_clib.py's SCALARS), the
// state a table row has (in units of the row's width, or one value a row), the scalar whose
// zero means the state is not read (SGD without momentum), and the entry points
struct RowKernel {
    const char *name;
    size_t n_scalars;
    int64_t state_widths;  // a row's state: state_widths * dim values, or 1 where 0
    int state_unused_if_zero;  // -1: none
    RowsFn<float> rows_f32;
    RowsFn<double> rows_f64;
    FusedFn<float> fused_f32;
    FusedFn<double> fused_f64;
};

const RowKernel ROW_KERNELS[] = {
    {"sgd", 5, 1, 2, ll_rows_sgd_f32, ll_rows_sgd_f64, ll_fused_sgd_f32, ll_fused_sgd_f64},
    {"adagrad", 3, 1, -1, ll_rows_adagrad_f32, ll_rows_adagrad_f64, ll_fused_adagrad_f32,
     ll_fused_adagrad_f64},
    {"rowwise_adagrad", 4, 0, -1, ll_rows_rowwise_adagrad_f32, ll_rows_rowwise_adagrad_f64,
     ll_fused_rowwise_adagrad_f32, ll_fused_rowwise_adagrad_f64},
    {"adam", 8, 2, -1, ll_rows_adam_f32, ll_rows_adam_f64, ll_fused_adam_f32,
     ll_fused_adam_f64},
};
constexpr size_t N_SCALARS = 8;  // the C side's array: a kernel's scalars, zero-padded

// ValueError unless kernel names one and scalars has its number of values
const RowKernel &row_kernel(const char *op, c10::string_view kernel, size_t n_scalars) {
    for (const RowKernel &k : ROW_KERNELS) {
        if (kernel != k.name) continue;
        TORCH_CHECK_VALUE(n_scalars == k.n_scalars, "lookuplinear::", op, ": the ", k.name,
                          " kernel reads ", k.n_scalars, " scalars (ops/_clib.py's SCALARS); "
                          "got ", n_scalars);
        return k;
    }
    TORCH_CHECK_VALUE(false, "lookuplinear::", op, ": kernel must be one of sgd, adagrad, "
                      "rowwise_adagrad, adam; got '", std::string(kernel), "'");
}

// the values a table of num_rows rows of width dim keeps as kernel k's state, given its
// scalars (-1: any, the state is not read)
int64_t state_numel(const RowKernel &k, at::ArrayRef<double> scalars, int64_t num_rows,
                    int64_t dim) {
    if (k.state_unused_if_zero >= 0 && scalars[k.state_unused_if_zero] == 0) return -1;
    return num_rows * (k.state_widths ? k.state_widths * dim : 1);
}

// whether the C kernels take this table: a 2-D contiguous float32/float64 CPU weight, the state
// contiguous on the CPU in its dtype
bool rows_take(const Tensor &weight, const Tensor &state) {
    return weight.dim() == 2 && is_f32_f64(weight) && weight.is_contiguous() &&
           weight.device().is_cpu() && state.scalar_type() == weight.scalar_type() &&
           state.is_contiguous() && state.device().is_cpu() && weight.size(0) < (int64_t{1} << 32);
}

// ValueError unless the state holds what kernel k reads for this table
void check_state(const char *op, const RowKernel &k, at::ArrayRef<double> scalars,
                 const Tensor &weight, const Tensor &state) {
    TORCH_CHECK_VALUE(weight.dim() == 2, "lookuplinear::", op, ": weight must be 2-D (rows, "
                      "dim); got shape ", weight.sizes());
    check_float(op, "weight", weight.scalar_type());
    TORCH_CHECK_VALUE(state.scalar_type() == weight.scalar_type() &&
                          state.device() == weight.device() && state.is_contiguous(),
                      "lookuplinear::", op, ": the state must be contiguous (the kernel's "
                      "layout), of the weight's dtype and device, ", weight.scalar_type(),
                      " on ", weight.device(), "; got ", state.scalar_type(), " on ",
                      state.device(), state.is_contiguous() ? "" : ", not contiguous");
    const int64_t want = state_numel(k, scalars, weight.size(0), weight.size(1));
    TORCH_CHECK_VALUE(want < 0 || state.numel() == want, "lookuplinear::", op, ": the ", k.name,
                      " kernel reads ", want, " state values for a table of shape ",
                      weight.sizes(), " (", k.state_widths ? std::to_string(k.state_widths) +
                      " x dim a row" : std::string("one a row"), "); got a state of shape ",
                      state.sizes());
}

// IndexError unless every row is in [0, num_rows); whether the rows never decrease (one
// vectorized pass)
bool check_rows(const char *op, const Tensor &rows, int64_t num_rows) {
    const int64_t *p = rows.data_ptr<int64_t>();
    const int64_t n = rows.numel();
    const int64_t bad = ll_first_outside(p, n, num_rows);
    TORCH_CHECK_INDEX(bad < 0, "lookuplinear::", op, ": row ", bad < 0 ? 0 : p[bad], " at rows[",
                      bad, "] is out of range for a table of ", num_rows, " rows. Give the rows "
                      "of the table the gradient is for.");
    uint64_t down = 0;  // branch-free, so that the pass vectorizes
    for (int64_t k = 1; k < n; k++) down |= p[k] < p[k - 1];
    return !down;
}

// the Python twins (library.py), for what the C kernels do not take
void call_twin(const char *name, const std::vector<c10::IValue> &args) {
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
    at::AutoDispatchBelowADInplaceOrView below;
    c10::Stack stack(args.begin(), args.end());
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CompositeExplicitAutograd),
                       &stack);
}

void rows_update_cpu(const Tensor &weight, const Tensor &state, const Tensor &rows,
                     const Tensor &values, c10::string_view kernel, at::ArrayRef<double> scalars) {
    const char *op = "rows_update_";
    const RowKernel &k = row_kernel(op, kernel, scalars.size());
    check_state(op, k, scalars, weight, state);
    const int64_t n = rows.numel(), dim = weight.size(1);
    TORCH_CHECK_VALUE(rows.dim() == 1 && is_i32_i64(rows), "lookuplinear::", op, ": rows must "
                      "be a 1-D int32 or int64 tensor; got ", rows.scalar_type(), " of shape ",
                      rows.sizes());
    TORCH_CHECK_VALUE(values.dim() == 2 && values.size(0) == n && values.size(1) == dim &&
                          values.scalar_type() == weight.scalar_type(),
                      "lookuplinear::", op, ": values must be one gradient row per row, of the "
                      "weight's width and dtype, (", n, ", ", dim, ") ", weight.scalar_type(),
                      "; got ", values.scalar_type(), " of shape ", values.sizes());
    Tensor r = rows.to(at::kLong).contiguous();
    const bool sorted = check_rows(op, r, weight.size(0));
    if (!rows_take(weight, state) || !values.device().is_cpu()) {
        call_twin("lookuplinear::rows_update_", {weight, state, rows, values,
                                                 std::string(kernel), scalars.vec()});
        return;
    }
    if (n == 0) return;
    Tensor v = values.contiguous();
    if (!sorted)  // each row once, its entries summed (row_sums of one entry per value row)
        std::tie(r, v) = row_sums_cpu(v, r, std::nullopt, std::nullopt, std::nullopt,
                                      weight.size(0));
    double p[N_SCALARS] = {0};
    std::copy(scalars.begin(), scalars.end(), p);
    const int64_t done =
        weight.scalar_type() == at::kFloat
            ? k.rows_f32(weight.data_ptr<float>(), static_cast<float *>(state.data_ptr()),
                         r.data_ptr<int64_t>(), r.numel(), v.data_ptr<float>(), dim, p)
            : k.rows_f64(weight.data_ptr<double>(), static_cast<double *>(state.data_ptr()),
                         r.data_ptr<int64_t>(), r.numel(), v.data_ptr<double>(), dim, p);
    TORCH_CHECK(done >= 0, "lookuplinear::", op, ": out of memory summing the gradient rows "
                "(nothing was updated)");
}

// one table's lookup as the C kernels read it: int64 entries, CSR offsets, per-entry weights
// in the table's dtype; n_bags -1: one entry per grad_out row
struct FusedLookup {
    Tensor idx, off, psw, grad;
    int64_t n_bags;
};

FusedLookup fused_lookup(const char *op, size_t t, const Tensor &weight,
                         const Tensor &grad_out, const Tensor &indices,
                         const optional<Tensor> &offsets, const optional<Tensor> &psw) {
    TORCH_CHECK_VALUE(grad_out.dim() == 2 && grad_out.size(1) == weight.size(1) &&
                          grad_out.scalar_type() == weight.scalar_type(),
                      "lookuplinear::", op, ": grad_outs[", t, "] must be 2-D, of table ", t,
                      "'s width and dtype (", weight.size(1), ", ", weight.scalar_type(),
                      "); got ", grad_out.scalar_type(), " of shape ", grad_out.sizes());
    TORCH_CHECK_VALUE(is_i32_i64(indices), "lookuplinear::", op, ": indices[", t, "] must be "
                      "int32 or int64; got ", indices.scalar_type());
    FusedLookup l;
    l.idx = indices.reshape(-1).to(at::kLong).contiguous();
    const int64_t nnz = l.idx.numel();
    if (offsets.has_value()) {
        TORCH_CHECK_VALUE(offsets->dim() == 1 && is_i32_i64(*offsets), "lookuplinear::", op,
                          ": offsets[", t, "] must be 1-D int32 or int64; got ",
                          offsets->scalar_type(), " of shape ", offsets->sizes());
        l.off = offsets->to(at::kLong).contiguous();
        check_offsets(op, l.off, nnz);
        l.n_bags = l.off.numel() - 1;
    } else {
        l.n_bags = -1;
    }
    const int64_t n_out = l.n_bags < 0 ? nnz : l.n_bags;
    TORCH_CHECK_VALUE(grad_out.size(0) == n_out, "lookuplinear::", op, ": grad_outs[", t,
                      "] must have one row per ", l.n_bags < 0 ? "entry" : "bag", ", ", n_out,
                      "; got ", grad_out.size(0));
    TORCH_CHECK_VALUE(nnz < (int64_t{1} << 31) && n_out < (int64_t{1} << 31), "lookuplinear::",
                      op, ": at most 2**31 - 1 entries and bags a table; got ", nnz, " and ",
                      n_out);
    if (psw.has_value()) {
        TORCH_CHECK_VALUE(psw->numel() == nnz, "lookuplinear::", op, ": per_sample_weights[", t,
                          "] must hold one value per entry, ", nnz, "; got ", psw->numel());
        check_float(op, "per_sample_weights", psw->scalar_type());
        l.psw = psw->reshape(-1).to(weight.scalar_type()).contiguous();
    }
    check_range(op, l.idx, weight.size(0));
    l.grad = grad_out.contiguous();
    return l;
}

template <typename T>
void fused_call(const RowKernel &k, const std::vector<size_t> &tables,
                at::TensorList weights, at::TensorList states,
                const std::vector<FusedLookup> &lookups, at::IntArrayRef padding_idx,
                at::ArrayRef<double> scalars, std::vector<int64_t> &groups) {
    const size_t m = tables.size();
    std::vector<const int64_t *> idx(m), off(m);
    std::vector<int64_t> n(m), n_bags(m), pads(m), dims(m), got(m);
    std::vector<const T *> psw(m), grad(m);
    std::vector<T *> w(m), s(m);
    std::vector<double> params(N_SCALARS * m, 0.0);
    for (size_t j = 0; j < m; j++) {
        const size_t t = tables[j];
        const FusedLookup &l = lookups[t];
        idx[j] = l.idx.data_ptr<int64_t>();
        n[j] = l.idx.numel();
        off[j] = l.off.defined() ? l.off.data_ptr<int64_t>() : nullptr;
        n_bags[j] = l.n_bags;
        pads[j] = padding_idx[t];
        psw[j] = l.psw.defined() ? l.psw.data_ptr<T>() : nullptr;
        grad[j] = l.grad.data_ptr<T>();
        dims[j] = weights[t].size(1);
        w[j] = weights[t].data_ptr<T>();
        s[j] = static_cast<T *>(states[t].data_ptr());
        std::copy(scalars.begin() + t * k.n_scalars, scalars.begin() + (t + 1) * k.n_scalars,
                  params.begin() + N_SCALARS * j);
    }
    FusedFn<T> fn;
    if constexpr (std::is_same<T, float>::value) fn = k.fused_f32;
    else fn = k.fused_f64;
    fn(static_cast<int64_t>(m), idx.data(), n.data(), off.data(), n_bags.data(), pads.data(),
       psw.data(), grad.data(), dims.data(), w.data(), s.data(), params.data(), got.data());
    for (size_t j = 0; j < m; j++) groups[tables[j]] = got[j];
}

void rows_fused_cpu(at::TensorList weights, at::TensorList states, at::TensorList grad_outs,
                    at::TensorList indices, const c10::List<optional<Tensor>> &offsets,
                    const c10::List<optional<Tensor>> &per_sample_weights,
                    at::IntArrayRef padding_idx, c10::string_view kernel,
                    at::ArrayRef<double> scalars) {
    const char *op = "rows_fused_";
    const size_t nt = weights.size();
    TORCH_CHECK_VALUE(states.size() == nt && grad_outs.size() == nt && indices.size() == nt &&
                          offsets.size() == nt && per_sample_weights.size() == nt &&
                          padding_idx.size() == nt,
                      "lookuplinear::", op, ": one state, grad_out, indices, offsets, "
                      "per_sample_weights and padding_idx per table (", nt, " tables); got ",
                      states.size(), ", ", grad_outs.size(), ", ", indices.size(), ", ",
                      offsets.size(), ", ", per_sample_weights.size(), ", ",
                      padding_idx.size());
    TORCH_CHECK_VALUE(!nt || scalars.size() % nt == 0, "lookuplinear::", op, ": each table's "
                      "scalars one after the other; got ", scalars.size(), " for ", nt,
                      " tables");
    const RowKernel &k = row_kernel(op, kernel, nt ? scalars.size() / nt : 0);
    // every operand checked before any table is updated: a refused call changes nothing
    std::vector<FusedLookup> lookups;
    std::vector<size_t> f32, f64, twins;
    for (size_t t = 0; t < nt; t++) {
        check_state(op, k, scalars.slice(t * k.n_scalars, k.n_scalars), weights[t], states[t]);
        lookups.push_back(fused_lookup(op, t, weights[t], grad_outs[t], indices[t], offsets[t],
                                       per_sample_weights[t]));
        check_padding(op, "padding_idx", padding_idx[t], weights[t].size(0), -1);
        const bool c = rows_take(weights[t], states[t]) && grad_outs[t].device().is_cpu();
        (c ? weights[t].scalar_type() == at::kFloat ? f32 : f64 : twins).push_back(t);
    }
    std::vector<int64_t> groups(nt, 0);
    if (!f32.empty())
        fused_call<float>(k, f32, weights, states, lookups, padding_idx, scalars, groups);
    if (!f64.empty())
        fused_call<double>(k, f64, weights, states, lookups, padding_idx, scalars, groups);
    for (size_t t = 0; t < nt; t++)  // out of memory in the C sort (that table untouched)
        if (groups[t] < 0) twins.push_back(t);
    for (size_t t : twins) {
        call_twin("lookuplinear::rows_fused_",
                  {std::vector<Tensor>{weights[t]}, std::vector<Tensor>{states[t]},
                   std::vector<Tensor>{grad_outs[t]}, std::vector<Tensor>{indices[t]},
                   c10::List<optional<Tensor>>({offsets[t]}),
                   c10::List<optional<Tensor>>({per_sample_weights[t]}),
                   std::vector<int64_t>{padding_idx[t]}, std::string(kernel),
                   scalars.slice(t * k.n_scalars, k.n_scalars).vec()});
    }
}

}  // namespace
}  // namespace lookuplinear

// the row updates' schemas (ops/library.py's ROW_SCHEMAS)
TORCH_LIBRARY_FRAGMENT(lookuplinear, m) {
    m.def("rows_update_(Tensor(a!) weight, Tensor(b!) state, Tensor rows, Tensor values, "
          "str kernel, float[] scalars) -> ()");
    m.def("rows_fused_(Tensor(a!)[] weights, Tensor(b!)[] states, Tensor[] grad_outs, "
          "Tensor[] indices, Tensor?[] offsets, Tensor?[] per_sample_weights, "
          "int[] padding_idx, str kernel, float[] scalars) -> ()");
}

TORCH_LIBRARY_IMPL(lookuplinear, CPU, m) {
    m.impl("rows_update_", &lookuplinear::rows_update_cpu);
    m.impl("rows_fused_", &lookuplinear::rows_fused_cpu);
}

TORCH_LIBRARY_IMPL(lookuplinear, AutogradCPU, m) {
    for (const char *name : {"rows_update_", "rows_fused_"})
        m.impl(name, torch::CppFunction::makeFallthrough());
}
