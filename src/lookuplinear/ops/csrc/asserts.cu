// lookuplinear::assert_bags on CUDA tensors: a batch's indices and CSR offsets checked by one
// kernel launch on the current stream, without a host synchronisation (ops.cpp registers it
// where the build compiled this file). A bad value is a device-side assert, raised at the next
// synchronisation, as nn.EmbeddingBag's CUDA kernels raise for a bad index; the torch ops of
// assert_bags_twin (two _assert_async, about a dozen launches) check the same.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>

#ifndef CUDA_KERNEL_ASSERT_MSG  // torch's headers before the message variant
#define CUDA_KERNEL_ASSERT_MSG(cond, msg) CUDA_KERNEL_ASSERT(cond)
#endif

namespace lookuplinear {

void assert_bags_twin(const at::Tensor &indices, const c10::optional<at::Tensor> &offsets,
                      int64_t num_rows, c10::string_view where, c10::string_view owner,
                      bool include_last);

namespace {

// entry i: 0 <= idx[i] < num_rows; offset i: off[0] == 0, off[i] <= off[i + 1], and the last
// equal to n, the number of entries (include_last; else at most n: start offsets)
template <typename I, typename O>
__global__ void assert_bags_kernel(const I *idx, int64_t n, const O *off, int64_t n_off,
                                   int64_t num_rows, bool include_last) {
    const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
    const int64_t m = n > n_off ? n : n_off;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
         i += stride) {
        if (i < n) {
            const int64_t v = static_cast<int64_t>(idx[i]);
            CUDA_KERNEL_ASSERT_MSG(v >= 0 && v < num_rows,
                                   "lookuplinear: an index is out of range for the table");
        }
        if (i < n_off) {
            const int64_t o = static_cast<int64_t>(off[i]);
            const bool ok =
                (i > 0 || o == 0) && (i + 1 < n_off ? o <= static_cast<int64_t>(off[i + 1])
                                                    : (include_last ? o == n : o <= n));
            CUDA_KERNEL_ASSERT_MSG(ok, "lookuplinear: offsets are not the CSR offsets of the "
                                       "entries");
        }
    }
}

template <typename I, typename O>
void launch(const at::Tensor &idx, const O *off, int64_t n_off, int64_t num_rows,
            bool include_last) {
    const int64_t n = idx.numel();
    const int64_t m = std::max(n, n_off);
    if (m == 0) return;
    constexpr int threads = 256;
    const int64_t blocks = std::min<int64_t>((m + threads - 1) / threads, 65535);
    assert_bags_kernel<I, O><<<static_cast<unsigned>(blocks), threads, 0,
                               c10::cuda::getCurrentCUDAStream()>>>(idx.data_ptr<I>(), n, off,
                                                                   n_off, num_rows,
                                                                   include_last);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool is_index(const at::Tensor &t) {
    return t.scalar_type() == at::kInt || t.scalar_type() == at::kLong;
}

}  // namespace

void assert_bags_cuda(const at::Tensor &indices, const c10::optional<at::Tensor> &offsets,
                      int64_t num_rows, c10::string_view where, c10::string_view owner,
                      bool last) {
    const bool with_offsets = offsets.has_value() && offsets->defined();
    if (!is_index(indices) || (with_offsets && !is_index(*offsets))) {
        // what ATen's ops take
        assert_bags_twin(indices, offsets, num_rows, where, owner, last);
        return;
    }
    if (with_offsets) {
        TORCH_CHECK_VALUE(offsets->dim() == 1 && offsets->numel() > 0,
                          "lookuplinear::assert_bags: offsets must be the non-empty 1-D "
                          "offsets of the bags; got shape ", offsets->sizes(), ".");
        TORCH_CHECK_VALUE(offsets->device() == indices.device(), "lookuplinear::assert_bags: "
                          "offsets must be on the indices' device, ", indices.device(),
                          "; got ", offsets->device(), ". Move them with .to(indices.device).");
    }
    const c10::cuda::CUDAGuard guard(indices.device());
    const at::Tensor idx = indices.reshape(-1).contiguous();
    const at::Tensor off = with_offsets ? offsets->contiguous() : at::Tensor();
    const int64_t n_off = with_offsets ? off.numel() : 0;
    if (idx.scalar_type() == at::kInt) {
        if (!with_offsets) launch<int32_t, int64_t>(idx, nullptr, 0, num_rows, last);
        else if (off.scalar_type() == at::kInt)
            launch<int32_t, int32_t>(idx, off.data_ptr<int32_t>(), n_off, num_rows, last);
        else launch<int32_t, int64_t>(idx, off.data_ptr<int64_t>(), n_off, num_rows, last);
    } else {
        if (!with_offsets) launch<int64_t, int64_t>(idx, nullptr, 0, num_rows, last);
        else if (off.scalar_type() == at::kInt)
            launch<int64_t, int32_t>(idx, off.data_ptr<int32_t>(), n_off, num_rows, last);
        else launch<int64_t, int64_t>(idx, off.data_ptr<int64_t>(), n_off, num_rows, last);
    }
}

}  // namespace lookuplinear
