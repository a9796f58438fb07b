// The torch operator over wgmma.cu's launcher: torch.ops.solforge_hgemm_wgmma.gemm(a, b, out,
// block_m, block_n, stages, group_m) writes a @ b into out on the current CUDA stream (so it runs inside CUDA
// graphs and under torch.compile like any CUDA op). Only the checks the kernel relies on live
// here; which tile to use is the tuner's business.

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/library.h>

namespace solforge_hgemm {

cudaError_t launch_gemm(const void* a, const void* b, void* c, int m, int n, int k, int64_t lda,
                        int64_t ldb, int64_t ldc, bool bf16, bool b_kmajor, int bm, int bn,
                        int stages, int group_m, cudaStream_t stream);

void gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor& out, int64_t block_m,
          int64_t block_n, int64_t stages, int64_t group_m) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && out.is_cuda(), "wgmma gemm: CUDA tensors only");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "wgmma gemm: 2-D tensors only");
  TORCH_CHECK(a.scalar_type() == b.scalar_type() && a.scalar_type() == out.scalar_type(),
              "wgmma gemm: a, b and out must share one dtype");
  const bool bf16 = a.scalar_type() == at::kBFloat16;
  TORCH_CHECK(bf16 || a.scalar_type() == at::kHalf, "wgmma gemm: float16 or bfloat16 only");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(b.size(0) == k && out.size(0) == m && out.size(1) == n, "wgmma gemm: shapes");
  TORCH_CHECK(a.stride(1) == 1 && out.stride(1) == 1, "wgmma gemm: a and out row-major");
  const bool b_kmajor = b.stride(0) == 1 && n > 1;
  TORCH_CHECK(b_kmajor || b.stride(1) == 1, "wgmma gemm: b row-major or a row-major transpose");
  const int64_t ldb = b_kmajor ? b.stride(1) : b.stride(0);
  TORCH_CHECK(k % 8 == 0 && n % 8 == 0 && a.stride(0) % 8 == 0 && ldb % 8 == 0,
              "wgmma gemm: TMA needs 16-byte row strides (K, N and leading dims % 8 == 0)");
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaError_t status = launch_gemm(
      a.data_ptr(), b.data_ptr(), out.data_ptr(), static_cast<int>(m), static_cast<int>(n),
      static_cast<int>(k), a.stride(0), ldb, out.stride(0), bf16, b_kmajor,
      static_cast<int>(block_m), static_cast<int>(block_n), static_cast<int>(stages),
      static_cast<int>(group_m), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "wgmma gemm: launch failed: ", cudaGetErrorString(status));
}

}  // namespace solforge_hgemm

TORCH_LIBRARY(solforge_hgemm_wgmma, m) {
  m.def("gemm(Tensor a, Tensor b, Tensor(a!) out, int block_m, int block_n, int stages, "
        "int group_m) -> ()");
}

TORCH_LIBRARY_IMPL(solforge_hgemm_wgmma, CUDA, m) { m.impl("gemm", &solforge_hgemm::gemm); }
