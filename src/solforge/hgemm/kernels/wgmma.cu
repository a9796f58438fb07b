// HGEMM on Hopper with wgmma and TMA: C[M, N] = A[M, K] @ B[K, N], fp16 or bf16 in and out,
// float32 accumulation. Built for sm_90a only (wgmma and setmaxnreg do not exist on plain
// sm_90): -gencode=arch=compute_90a,code=sm_90a (kernels/wgmma.py builds it).
//
// The search space (kernels/wgmma.py, space.py): tile BM x BN, operand stages in flight (asked
// for, capped by what the shared-memory budget holds) and the rasterisation swizzle: blocks
// walk the tiles in groups of `group_m` tile rows, so the B tiles a group shares stay in L2.
//
// Structure (one output tile of BM x BN per block, tiles in grouped order):
// - warpgroups 0 .. BM/64 - 1 consume: each owns 64 rows of the tile and issues
//   wgmma.mma_async m64nBNk16 from shared memory, four per 64-wide K slice, accumulators in
//   registers (BN/2 floats a thread);
// - the last warpgroup produces: one thread issues TMA copies (cp.async.bulk.tensor) of the A
//   and B slices into a STAGES-deep ring of shared-memory buffers, each completing on its own
//   "full" mbarrier; consumers release a buffer through its "empty" mbarrier once the wgmma
//   group that read it has retired (wgmma.wait_group 1 keeps one group in flight);
// - setmaxnreg moves registers from the producer (40) to the consumers (232 or 240).
// Shared-memory layout: every buffer is TMA's 128-byte swizzle (Swizzle<3,4,3>), 1024-byte
// aligned. A and a "nt" B (K-major: rows of 64 K-elements = 128 bytes) use the K-major
// descriptor: stride between 8-row groups (SBO) 1024 bytes, the k16 step +32 bytes. A "nn" B
// (N-major) is copied as BN/64 boxes of [64 k-rows x 64 n-columns]; its N-major descriptor
// has LBO = the box size (8192 bytes: the next 64 columns), SBO = 1024 bytes (the next 8 k-rows)
// and the k16 step +2048 bytes (PTX ISA 9.7.15.5.1.2, canonical layouts with 128B swizzling).
// These are the descriptors (and trans-b immediates: 1 for "nn", 0 for "nt") that Triton 3.6
// emits for its own TMA kernel at BLOCK_K = 64 (read off the PTX of kernels/tma.py).
// Edges: TMA zero-fills loads past M, N and K, so any K works; C is stored from registers two
// elements at a time with a bounds check (N must be even; the host asks for N % 8 == 0 and
// K % 8 == 0, TMA's 16-byte row-stride rule).
//
// The wgmma wrappers below write out their accumulator operands one by one: wgmma takes the
// accumulator tile as BN/2 separate registers.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <type_traits>

namespace solforge_hgemm {

constexpr int kBlockK = 64;  // 64 16-bit elements: one 128-byte swizzle row
constexpr int kWarpgroup = 128;
constexpr int kOperandBudget = 200 * 1024;  // bytes of operand stages (227 KB per block in all)

// Operand stages in flight: as many as asked for, at most what the budget holds.
__host__ __device__ constexpr int stage_count(int bm, int bn, int wanted) {
  return kOperandBudget / ((bm + bn) * kBlockK * 2) < wanted
             ? kOperandBudget / ((bm + bn) * kBlockK * 2)
             : wanted;
}

__host__ __device__ constexpr int shared_bytes(int bm, int bn, int stages) {
  // operand ring + full and empty barriers + slack to align the ring to 1024 bytes
  return stages * (bm + bn) * kBlockK * 2 + 2 * 8 * stages + 1024;
}

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// -- mbarriers -------------------------------------------------------------------------------

__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)),
               "r"(arrivals));
}

__device__ __forceinline__ void barrier_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   shared_address(barrier)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier))
               : "memory");
}

__device__ __forceinline__ bool barrier_try_wait(uint64_t* barrier, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(shared_address(barrier)), "r"(parity)
      : "memory");
  return done != 0;
}

// Wait for the completion of the barrier's phase of this parity.
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
  while (!barrier_try_wait(barrier, parity)) {
  }
}

// -- TMA ---------------------------------------------------------------------------------------

// Copy the box at (inner, outer) of the tensor map into shared memory; completes on `barrier`.
__device__ __forceinline__ void tma_load(void* destination, const CUtensorMap* map,
                                         uint64_t* barrier, int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(shared_address(destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_address(barrier)), "r"(inner), "r"(outer)
      : "memory");
}

// -- wgmma -----------------------------------------------------------------------------------

// Matrix descriptor (PTX ISA 9.7.15.5.1.2.2): start address, leading and stride byte offsets
// (each >> 4), 128-byte swizzle in bits 62-63.
__device__ __forceinline__ uint64_t descriptor(const void* tile, uint32_t leading_bytes,
                                               uint32_t stride_bytes) {
  const uint64_t start = (shared_address(tile) & 0x3FFFF) >> 4;
  return start | (uint64_t((leading_bytes & 0x3FFFF) >> 4) << 16) |
         (uint64_t((stride_bytes & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}

// One wgmma instruction per (N, type): a macro writes the f16 and bf16 forms of each, which differ
// only in the type suffix of the instruction (the 64 or 128 accumulator operands are the same).
#define WGMMA_M64N128K16(TYPE)                                                             \
template <int TRANS_B>                                                                     \
__device__ __forceinline__ void wgmma_m64n128k16_##TYPE(float (&d)[64], uint64_t desc_a,   \
                                                     uint64_t desc_b) {                    \
  asm volatile(                                                                            \
      "{\n"                                                                                \
      ".reg .pred p;\n"                                                                    \
      "setp.ne.b32 p, %66, 0;\n"                                                           \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." #TYPE "." #TYPE "\n"                  \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"           \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"  \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"  \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n" \
      "%64, %65, p, 1, 1, 0, %67;\n"                                                       \
      "}\n"                                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),            \
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),          \
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),      \
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),      \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),      \
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),      \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),      \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),      \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),      \
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),      \
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                 \
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TRANS_B));                                   \
}
WGMMA_M64N128K16(f16)
WGMMA_M64N128K16(bf16)
#undef WGMMA_M64N128K16

#define WGMMA_M64N256K16(TYPE)                                                                             \
template <int TRANS_B>                                                                                     \
__device__ __forceinline__ void wgmma_m64n256k16_##TYPE(float (&d)[128], uint64_t desc_a,                  \
                                                     uint64_t desc_b) {                                    \
  asm volatile(                                                                                            \
      "{\n"                                                                                                \
      ".reg .pred p;\n"                                                                                    \
      "setp.ne.b32 p, %130, 0;\n"                                                                          \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." #TYPE "." #TYPE "\n"                                  \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"                           \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"                  \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"                  \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"                  \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"                  \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,\n"                  \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,\n"      \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},\n" \
      "%128, %129, p, 1, 1, 0, %131;\n"                                                                    \
      "}\n"                                                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),                            \
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),                          \
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),                      \
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),                      \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),                      \
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),                      \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),                      \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),                      \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),                      \
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),                      \
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),                      \
        "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),                      \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),                      \
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),                      \
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),                      \
        "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),                      \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),                    \
        "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),                \
        "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),                \
        "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),                \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),                \
        "+f"(d[126]), "+f"(d[127])                                                                         \
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TRANS_B));                                                   \
}
WGMMA_M64N256K16(f16)
WGMMA_M64N256K16(bf16)
#undef WGMMA_M64N256K16

// Keep the compiler from moving accesses to the accumulators across wgmma fences and waits.
template <int COUNT>
__device__ __forceinline__ void fence_accumulators(float (&d)[COUNT]) {
#pragma unroll
  for (int i = 0; i < COUNT; ++i) {
    asm volatile("" : "+f"(d[i])::"memory");
  }
}

// One m64 x BN x k16 product: the accumulators, A's and B's descriptors.
template <int BN, bool BF16, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_step(float (&d)[BN / 2], uint64_t desc_a,
                                           uint64_t desc_b) {
  constexpr int TRANS_B = B_KMAJOR ? 0 : 1;
  if constexpr (BN == 128 && !BF16) {
    wgmma_m64n128k16_f16<TRANS_B>(d, desc_a, desc_b);
  } else if constexpr (BN == 128 && BF16) {
    wgmma_m64n128k16_bf16<TRANS_B>(d, desc_a, desc_b);
  } else if constexpr (BN == 256 && !BF16) {
    wgmma_m64n256k16_f16<TRANS_B>(d, desc_a, desc_b);
  } else {
    static_assert(BN == 256 && BF16, "BN must be 128 or 256");
    wgmma_m64n256k16_bf16<TRANS_B>(d, desc_a, desc_b);
  }
}

// -- the kernel ------------------------------------------------------------------------------

template <typename T>
struct Pair;
template <>
struct Pair<__half> {
  using type = __half2;
  static __device__ __forceinline__ type make(float x, float y) { return __floats2half2_rn(x, y); }
};
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ type make(float x, float y) {
    return __floats2bfloat162_rn(x, y);
  }
};

__device__ __forceinline__ void grouped_tile(int block, int num_m, int num_n, int group_m,
                                             int& tile_m, int& tile_n) {
  const int per_group = group_m * num_n;
  const int first_m = (block / per_group) * group_m;
  const int rows = min(num_m - first_m, group_m);
  const int within = block % per_group;
  tile_m = first_m + within % rows;
  tile_n = within / rows;
}

template <typename T, int BM, int BN, bool B_KMAJOR, int STAGES>
__global__ void __launch_bounds__((BM / 64 + 1) * kWarpgroup, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                T* __restrict__ c, int M, int N, int K, int ldc, int group_m) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int CONSUMERS = BM / 64;
  constexpr int A_STAGE = BM * kBlockK;  // elements
  constexpr int B_STAGE = BN * kBlockK;
  constexpr uint32_t STAGE_BYTES = (A_STAGE + B_STAGE) * sizeof(T);
  constexpr bool BF16 = std::is_same<T, __nv_bfloat16>::value;

  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(shared_raw) + 1023) & ~uintptr_t(1023));
  T* a_tiles = reinterpret_cast<T*>(shared);
  T* b_tiles = a_tiles + STAGES * A_STAGE;
  uint64_t* full = reinterpret_cast<uint64_t*>(b_tiles + STAGES * B_STAGE);
  uint64_t* empty = full + STAGES;

  int tile_m, tile_n;
  grouped_tile(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, group_m, tile_m, tile_n);
  const int k_tiles = (K + kBlockK - 1) / kBlockK;
  const int warpgroup = threadIdx.x / kWarpgroup;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == CONSUMERS) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x % kWarpgroup == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) barrier_wait(&empty[s], ((kt / STAGES) - 1) & 1);
        barrier_expect_bytes(&full[s], STAGE_BYTES);
        tma_load(a_tiles + s * A_STAGE, &a_map, &full[s], kt * kBlockK, tile_m * BM);
        if constexpr (B_KMAJOR) {
          tma_load(b_tiles + s * B_STAGE, &b_map, &full[s], kt * kBlockK, tile_n * BN);
        } else {
#pragma unroll
          for (int box = 0; box < BN / 64; ++box) {
            tma_load(b_tiles + s * B_STAGE + box * 64 * kBlockK, &b_map, &full[s],
                     tile_n * BN + box * 64, kt * kBlockK);
          }
        }
      }
    }
    return;
  }

  if constexpr (CONSUMERS == 2) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  }
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % STAGES;
    barrier_wait(&full[s], (kt / STAGES) & 1);
    const T* a_slice = a_tiles + s * A_STAGE + warpgroup * 64 * kBlockK;
    const T* b_slice = b_tiles + s * B_STAGE;
    fence_accumulators(d);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint64_t desc_a = descriptor(a_slice + kk * 16, 16, 1024);
      const uint64_t desc_b = B_KMAJOR ? descriptor(b_slice + kk * 16, 16, 1024)
                                       : descriptor(b_slice + kk * 16 * 64, 64 * kBlockK * 2, 1024);
      wgmma_step<BN, BF16, B_KMAJOR>(d, desc_a, desc_b);
    }
    wgmma_commit();
    fence_accumulators(d);
    wgmma_wait<1>();  // the previous slice's products have retired: its buffer is free
    if (kt > 0 && threadIdx.x % kWarpgroup == 0) barrier_arrive(&empty[(kt - 1) % STAGES]);
  }
  wgmma_wait<0>();
  fence_accumulators(d);

  // Accumulator layout of m64nNk16 (PTX ISA, wgmma D fragments): warp w of the warpgroup holds
  // rows 16w .. 16w + 15; lane l holds, for each 8-column block j, columns 8j + 2(l % 4) + {0, 1}
  // of row l / 4 (d[4j], d[4j + 1]) and of row l / 4 + 8 (d[4j + 2], d[4j + 3]).
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x % kWarpgroup) / 32;
  const int row = tile_m * BM + warpgroup * 64 + warp * 16 + lane / 4;
  const int col = tile_n * BN + (lane % 4) * 2;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row + half * 8;
      const int cc = col + j * 8;
      if (r < M && cc < N) {
        *reinterpret_cast<typename Pair<T>::type*>(c + static_cast<int64_t>(r) * ldc + cc) =
            Pair<T>::make(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
      }
    }
  }
#else
  __trap();  // built without sm_90a: this kernel needs wgmma
#endif
}

// -- host side -------------------------------------------------------------------------------

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult found;
    void* function = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                         cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
    }
  }
  return encode;
}

// A row-major [rows, cols] matrix with row stride `ld` elements, boxes of [box_rows, 64].
bool encode_map(CUtensorMap* map, const void* base, bool bf16, int rows, int cols, int64_t ld,
                int box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = encode(
      map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

template <typename T, int BM, int BN, bool B_KMAJOR, int WANTED>
cudaError_t launch_typed(const CUtensorMap& a_map, const CUtensorMap& b_map, void* c, int m,
                         int n, int k, int64_t ldc, int group_m, cudaStream_t stream) {
  constexpr int STAGES = stage_count(BM, BN, WANTED);
  auto kernel = gemm_kernel<T, BM, BN, B_KMAJOR, STAGES>;
  constexpr int bytes = shared_bytes(BM, BN, STAGES);
  // Above 48 KB a block's dynamic shared memory must be asked for (per device: every launch).
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (status != cudaSuccess) return status;
  const int blocks = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  kernel<<<blocks, (BM / 64 + 1) * kWarpgroup, bytes, stream>>>(
      a_map, b_map, static_cast<T*>(c), m, n, k, static_cast<int>(ldc), group_m);
  return cudaGetLastError();
}

// Stages asked for: 3, 4 or 6 (each capped by the tile's shared-memory budget).
template <typename T, int BM, int BN, bool B_KMAJOR>
cudaError_t launch_stages(int stages, const CUtensorMap& a_map, const CUtensorMap& b_map,
                          void* c, int m, int n, int k, int64_t ldc, int group_m,
                          cudaStream_t stream) {
  switch (stages) {
    case 3:
      return launch_typed<T, BM, BN, B_KMAJOR, 3>(a_map, b_map, c, m, n, k, ldc, group_m, stream);
    case 4:
      return launch_typed<T, BM, BN, B_KMAJOR, 4>(a_map, b_map, c, m, n, k, ldc, group_m, stream);
    case 6:
      return launch_typed<T, BM, BN, B_KMAJOR, 6>(a_map, b_map, c, m, n, k, ldc, group_m, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T, bool B_KMAJOR>
cudaError_t launch_tile(int bm, int bn, int stages, const CUtensorMap& a_map,
                        const CUtensorMap& b_map, void* c, int m, int n, int k, int64_t ldc,
                        int group_m, cudaStream_t stream) {
  if (bm == 128 && bn == 256) {
    return launch_stages<T, 128, 256, B_KMAJOR>(stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                                 stream);
  }
  if (bm == 128 && bn == 128) {
    return launch_stages<T, 128, 128, B_KMAJOR>(stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                                 stream);
  }
  if (bm == 64 && bn == 256) {
    return launch_stages<T, 64, 256, B_KMAJOR>(stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                                stream);
  }
  if (bm == 64 && bn == 128) {
    return launch_stages<T, 64, 128, B_KMAJOR>(stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                                stream);
  }
  return cudaErrorInvalidValue;
}

// C = A @ B. A row-major [m, k] (row stride lda); B [k, n] either N-major (row-major, row stride
// ldb: "nn") or K-major (the row-major [n, k] transpose, row stride ldb: "nt"); C row-major
// [m, n] (row stride ldc). Returns cudaErrorInvalidValue for a tile shape or stage count it was
// not built for, a group_m below 1, or a tensor map the driver refuses.
cudaError_t launch_gemm(const void* a, const void* b, void* c, int m, int n, int k, int64_t lda,
                        int64_t ldb, int64_t ldc, bool bf16, bool b_kmajor, int bm, int bn,
                        int stages, int group_m, cudaStream_t stream) {
  if (group_m < 1) return cudaErrorInvalidValue;
  CUtensorMap a_map, b_map;
  const bool encoded = encode_map(&a_map, a, bf16, m, k, lda, bm) &&
                       (b_kmajor ? encode_map(&b_map, b, bf16, n, k, ldb, bn)
                                 : encode_map(&b_map, b, bf16, k, n, ldb, kBlockK));
  if (!encoded) return cudaErrorInvalidValue;
  if (bf16 && b_kmajor) {
    return launch_tile<__nv_bfloat16, true>(bm, bn, stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                            stream);
  }
  if (bf16) {
    return launch_tile<__nv_bfloat16, false>(bm, bn, stages, a_map, b_map, c, m, n, k, ldc,
                                             group_m, stream);
  }
  if (b_kmajor) {
    return launch_tile<__half, true>(bm, bn, stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                     stream);
  }
  return launch_tile<__half, false>(bm, bn, stages, a_map, b_map, c, m, n, k, ldc, group_m,
                                    stream);
}

}  // namespace solforge_hgemm
