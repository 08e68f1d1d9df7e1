/* k_paged.cu: attention_paged (backend.h) over a batch of rows of many sequences (cf_batch_view), where
 * position j of sequence s lives in cache slot table[s][j / B] * B + j % B. Launch shapes depend only on the
 * host arguments (so a step can be recorded as a graph); the kernels read pos, row_seq, seq_start and the
 * block table on the device and skip what lies past each row's keys. Three kernels, and a fallback:
 *
 * - pg_decode_kernel (fewer than PG_MMA_MIN_ROWS rows per sequence; 16-bit caches, head size 64/128/256/512,
 *   v_head_dim == head_dim): one block per (row, KV head (8 of its query heads at most), key split), a warp per
 *   query head, so each K/V row is read once per GQA group. Tiles stream through shared memory with
 *   cp.async, double-buffered; lane j scores key j of a tile (head size 512: 16-key tiles, two lanes a key,
 *   half the dimensions each) and the warp accumulates V with lanes across dimensions. A row's splits are
 *   sized from its own key count, so the splits past it exit at once; the last split to finish merges.
 * - pg_dmma_kernel (the same on tensor cores, for GQA groups of at least cfk_cfg.paged_mma_group query heads;
 *   off by default): the group's heads are the rows of m16n8k16 tiles; every warp scores all heads and
 *   accumulates a quarter of the value dimensions. Slower than pg_decode_kernel at batch 1 and short
 *   contexts on the H200, faster only for many long sequences (cuda_bench --paged compares them).
 * - pg_mma_kernel (prefill; 16-bit caches, head size 64/128/256/512, v == k): FlashAttention-2 on tensor
 *   cores as attn_mma_kernel in k_attention.cu: 64 rows of one sequence and 1, 2 or 4 query heads of one
 *   GQA group per block, sharing the K/V tiles; head size 512 splits the value dimensions over two blocks
 *   (registers). Sequence s's tiles are numbered from seq_start[s] / 64 + s (vLLM's trick), so the grid is
 *   n_rows / 64 + n_seqs tiles; a block finds its sequence by binary search. Key splits merge in
 *   pg_reduce_kernel.
 * - anything else (f32 caches, other head sizes, v_head_dim != head_dim): the plain kernel of k_paged_ref.cu.
 *
 * The decode kernels fetch the K/V rows of positions before the sequence's first row in this batch before
 * it waits for the kernel ahead (programmatic dependent launch): those rows, and the batch tables, must not
 * be written by the op right before attention_paged (the new rows' store may be). Scores are in log2 units. */
#include "backend/cuda/k_common.cuh"

#define PG_MMA_MIN_ROWS 16   /* max_rows_per_seq from which prefill takes the tensor-core kernel */
#define PG_MAX_SPLITS 64

namespace {

constexpr float LOG2E = 1.4426950408889634f;

struct PagedP {
    const void *q;
    int qdt;
    int64_t qstride;
    const void *k, *v;
    int64_t kstride, vstride;
    TV out;
    float *part;
    int *counters;
    const int32_t *pos, *row_seq, *seq_start, *table;
    int64_t tstride;
    int n_rows, n_seqs, n_heads, n_kv_heads, group, D, Dv;
    int B, bshift;   /* block size; its log2, or -1 */
    int window, n_splits;
    int sub;         /* decode: blocks per KV head (groups of more than 8 query heads) */
    int one_row;     /* decode: every sequence has one row */
    float scale, softcap;
};

__device__ __forceinline__ int first_key(int window, int p) { return window > 0 ? max(0, p - window + 1) : 0; }

__device__ __forceinline__ int64_t slot_of(const PagedP &P, const int32_t *tab, int key) {
    if (P.bshift >= 0) return ((int64_t)tab[key >> P.bshift] << P.bshift) + (key & (P.B - 1));
    return (int64_t)tab[key / P.B] * P.B + key % P.B;
}

__device__ __forceinline__ float score_fix(float softcap, float s) {
    if (softcap > 0) s = softcap * tanhf(s / softcap);
    return s * LOG2E;
}

/* keys per split when n keys go to n_splits splits that start a multiple of align keys apart */
__device__ __forceinline__ int split_chunk(int n, int n_splits, int align) {
    return ((n + n_splits - 1) / n_splits + align - 1) / align * align;
}

/* a split's partial result: m (log2 units), l, then Dv unnormalized outputs */
__device__ __forceinline__ float *part_at(const PagedP &P, int i, int h, int split) {
    return P.part + ((int64_t)i * P.n_heads + h) * P.n_splits * (P.Dv + 2) + (int64_t)split * (P.Dv + 2);
}

/* whether this block is the last of n to arrive at *ctr (zeroed, left zeroed by the last); what the
 * others wrote before arriving is then visible to it */
__device__ __forceinline__ bool last_to_arrive(int *ctr, int n) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(ctr, 1) == n - 1;
        if (last) *ctr = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

/* one online-softmax step of a warp (lane j: score s of its key, if it has one): the running max m and sum
 * l move on, the outputs o are rescaled, and this lane's weight is returned; lane 0 must have a key */
template <int N>
__device__ __forceinline__ float softmax_step(float s, bool has_key, float &m, float &l, float (&o)[N]) {
    const float mn = fmaxf(m, warp_max(s));
    const float corr = exp2f(m - mn);
    const float p = has_key ? exp2f(s - mn) : 0.0f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int j = 0; j < N; j++) o[j] *= corr;
    m = mn;
    return p;
}

/* acc + q[0..7] . the 8 16-bit values in u */
template <typename KT>
__device__ __forceinline__ float dot8(const float *q, uint4 u, float acc) {
    const KT *e = reinterpret_cast<const KT *>(&u);
    const float4 q0 = *reinterpret_cast<const float4 *>(q), q1 = *reinterpret_cast<const float4 *>(q + 4);
    acc = fmaf(q0.x, (float)e[0], acc); acc = fmaf(q0.y, (float)e[1], acc);
    acc = fmaf(q0.z, (float)e[2], acc); acc = fmaf(q0.w, (float)e[3], acc);
    acc = fmaf(q1.x, (float)e[4], acc); acc = fmaf(q1.y, (float)e[5], acc);
    acc = fmaf(q1.z, (float)e[6], acc); acc = fmaf(q1.w, (float)e[7], acc);
    return acc;
}

/* N (2, 4 or 8) consecutive 16-bit values from shared memory in one load */
template <int N, typename KT>
__device__ __forceinline__ void ld_vec(KT (&d)[N], const KT *s) {
    if constexpr (N == 8) *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(s);
    else if constexpr (N == 4) *reinterpret_cast<uint2 *>(d) = *reinterpret_cast<const uint2 *>(s);
    else *reinterpret_cast<uint32_t *>(d) = *reinterpret_cast<const uint32_t *>(s);
}

/* m16n8k16 with f32 accumulation, operands of the cache's type */
template <typename KT>
__device__ __forceinline__ void mma16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16<__half>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename KT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

template <typename KT>
__device__ __forceinline__ KT to_kt(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 to_kt<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half to_kt<__half>(float v) { return __float2half_rn(v); }

/* ---- decode ---- */

__host__ __device__ constexpr int dec_tk(int D) { return D == 512 ? 16 : 32; }   /* keys per tile */

template <int D, int NW>
constexpr size_t dec_smem() {
    return (size_t)2 * dec_tk(D) * (2 * D + 8) * 2 + (size_t)NW * D * 4;
}

template <int D, int NW, typename KT>
__global__ void __launch_bounds__(32 * NW) pg_decode_kernel(PagedP P) {
    constexpr int TK = dec_tk(D), LP = 32 / TK;   /* keys per tile; lanes per key when scoring */
    constexpr int VL = D / 32, CH = VL < 8 ? VL : 8, NU = VL / CH;   /* V dims per lane: NU runs of CH */
    constexpr int PR = D / 8, LD = D + 8;   /* 16-byte pieces per row; K rows padded (conflict-free row reads) */
    extern __shared__ __align__(16) unsigned char smem[];
    KT *ks = reinterpret_cast<KT *>(smem), *vs = ks + 2 * TK * LD;   /* [2][TK][LD], [2][TK][D] */
    float *qs = reinterpret_cast<float *>(vs + 2 * TK * D);          /* [NW][D] */
    const int i = blockIdx.x, kvh = blockIdx.y / P.sub, sg = blockIdx.y % P.sub, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gh = sg * NW + warp, h = kvh * P.group + gh;
    const bool active = gh < P.group;   /* warps past the group only help load */
    const int p = P.pos[i], seq = P.row_seq[i];
    const int first_new = P.one_row ? p : P.pos[P.seq_start[seq]];   /* rows before it were written by earlier steps */
    const int lo = first_key(P.window, p), n = p - lo + 1;
    const int chunk = split_chunk(n, P.n_splits, TK), nact = (n + chunk - 1) / chunk;
    if (split >= nact) return;
    const int k0 = lo + split * chunk, k1 = min(p + 1, k0 + chunk), ntiles = (k1 - k0 + TK - 1) / TK;
    const int32_t *tab = P.table + (int64_t)seq * P.tstride;
    const KT *K = (const KT *)P.k + (int64_t)kvh * D, *V = (const KT *)P.v + (int64_t)kvh * D;
    /* tile t into buffer t % 2: the rows of earlier steps (old 1), of this one (old 0), or all (old -1);
     * rows past k1 repeat the last key, weighted 0 */
    auto load_tile = [&](int t, int old) {
        const int b = t & 1, base = k0 + t * TK;
        for (int e = threadIdx.x; e < 2 * TK * PR; e += 32 * NW) {
            const int r = (e / PR) % TK, c = e % PR, key = min(base + r, k1 - 1);
            if (old >= 0 && (key < first_new) != (old == 1)) continue;
            const int64_t sl = slot_of(P, tab, key);
            if (e < TK * PR) cp_async16(ks + (b * TK + r) * LD + c * 8, K + sl * P.kstride + c * 8);
            else cp_async16(vs + (b * TK + r) * D + c * 8, V + sl * P.vstride + c * 8);
        }
    };
    const int first_tiles = min(ntiles, 2);
    for (int t = 0; t < first_tiles; t++) load_tile(t, 1);
    cp_async_commit();
    pdl_wait();
    pdl_launch_next();
    for (int t = 0; t < first_tiles; t++) load_tile(t, 0);
    cp_async_commit();
    if (active)
        for (int c = lane; c < D; c += 32) qs[warp * D + c] = ld_elem(P.q, P.qdt, (int64_t)i * P.qstride + (int64_t)h * D + c) * P.scale;
    cp_async_wait<0>();
    __syncthreads();

    float m = -INFINITY, l = 0.0f, o[VL];
#pragma unroll
    for (int j = 0; j < VL; j++) o[j] = 0.0f;
    const int kr = lane % TK, kpart = lane / TK;
    for (int t = 0; t < ntiles; t++) {
        if (t >= 2) {   /* tile t was committed two iterations ago */
            cp_async_wait<1>();
            __syncthreads();
        }
        const int b = t & 1;
        if (active) {
            const int kk = k0 + t * TK + kr;
            const KT *krow = ks + (b * TK + kr) * LD + kpart * (D / LP);
            const float *qw = qs + warp * D + kpart * (D / LP);
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < PR / LP; c++) acc = dot8<KT>(qw + 8 * c, *reinterpret_cast<const uint4 *>(krow + 8 * c), acc);
            if constexpr (LP == 2) acc += __shfl_xor_sync(0xffffffffu, acc, 16);
            const bool has = kpart == 0 && kk < k1;
            const float pj = softmax_step(has ? score_fix(P.softcap, acc) : -INFINITY, has, m, l, o);
#pragma unroll
            for (int r = 0; r < TK; r++) {
                const float pt = __shfl_sync(0xffffffffu, pj, r);
                const KT *vr = vs + (b * TK + r) * D + lane * CH;
#pragma unroll
                for (int u = 0; u < NU; u++) {
                    KT vv[CH];
                    ld_vec<CH>(vv, vr + u * 32 * CH);
#pragma unroll
                    for (int j = 0; j < CH; j++) o[u * CH + j] = fmaf(pt, (float)vv[j], o[u * CH + j]);
                }
            }
        }
        if (t + 2 < ntiles) {
            __syncthreads();   /* buffer b is free */
            load_tile(t + 2, -1);
        }
        cp_async_commit();
    }

    /* this lane's output dimensions: u * 32 * CH + lane * CH + j */
    const int64_t oc = (int64_t)h * D + lane * CH;
    if (nact == 1) {
        if (active) {
            const float inv = 1.0f / l;
#pragma unroll
            for (int u = 0; u < NU; u++)
#pragma unroll
                for (int j = 0; j < CH; j++) st(P.out, i, oc + u * 32 * CH + j, o[u * CH + j] * inv);
        }
        return;
    }
    if (active) {
        float *part = part_at(P, i, h, split);
        if (lane == 0) { part[0] = m; part[1] = l; }
#pragma unroll
        for (int u = 0; u < NU; u++)
#pragma unroll
            for (int j = 0; j < CH; j++) part[2 + u * 32 * CH + lane * CH + j] = o[u * CH + j];
    }
    if (!last_to_arrive(P.counters + ((int64_t)i * P.n_kv_heads + kvh) * P.sub + sg, nact) || !active) return;
    /* the warp merges its head over the splits (at most 64: splits lane and lane + 32), reading past L1 */
    const float *pp = part_at(P, i, h, 0);
    constexpr int W = D + 2, U = VL >= 16 ? 4 : VL >= 8 ? 8 : 16;   /* splits' loads in flight */
    float ms[2], ls[2], ws[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int sp = lane + 32 * u;
        ms[u] = sp < nact ? __ldcg(pp + sp * W) : -INFINITY;
        ls[u] = sp < nact ? __ldcg(pp + sp * W + 1) : 0.0f;
    }
    const float M = warp_max(fmaxf(ms[0], ms[1]));
#pragma unroll
    for (int u = 0; u < 2; u++) ws[u] = ms[u] == -INFINITY ? 0.0f : exp2f(ms[u] - M);
    const float L = warp_sum(ws[0] * ls[0] + ws[1] * ls[1]);
    float acc[VL];
#pragma unroll
    for (int j = 0; j < VL; j++) acc[j] = 0.0f;
    for (int s0 = 0; s0 < nact; s0 += U) {
        float ov[U][VL];
#pragma unroll
        for (int x = 0; x < U; x++)
#pragma unroll
            for (int u = 0; u < NU; u++)
#pragma unroll
                for (int j = 0; j < CH; j++)
                    ov[x][u * CH + j] = s0 + x < nact ? __ldcg(pp + (s0 + x) * W + 2 + u * 32 * CH + lane * CH + j) : 0.0f;
#pragma unroll
        for (int x = 0; x < U; x++) {
            const int sp = s0 + x;
            const float w = __shfl_sync(0xffffffffu, sp < 32 ? ws[0] : ws[1], sp & 31);
#pragma unroll
            for (int j = 0; j < VL; j++) acc[j] = fmaf(w, ov[x][j], acc[j]);
        }
    }
    const float inv = 1.0f / L;
#pragma unroll
    for (int u = 0; u < NU; u++)
#pragma unroll
        for (int j = 0; j < CH; j++) st(P.out, i, oc + u * 32 * CH + j, acc[u * CH + j] * inv);
}

/* ---- decode on tensor cores: the GQA group's query heads are the rows of one m16n8k16 tile ----
 * One block of 4 warps per (row, KV head (16 of its query heads at most), key split). The K/V tiles stream
 * as in pg_decode_kernel; every warp computes the scores of all heads for the tile (Q K^T, cheap on tensor
 * cores) and accumulates its quarter of the value dimensions, so the warps need no combining. Splits merge
 * as in pg_decode_kernel, the last block over all its heads. */

__host__ __device__ constexpr int dm_tk(int D) { return D == 512 ? 16 : 32; }   /* keys per tile */

template <int D>
constexpr size_t dm_smem() {
    return ((size_t)16 * (D + 8) + (size_t)4 * dm_tk(D) * (D + 8)) * 2;
}

template <int D, typename KT>
__global__ void __launch_bounds__(128) pg_dmma_kernel(PagedP P) {
    constexpr int TK = dm_tk(D), LD = D + 8, DW = D / 4, PR = D / 8;   /* DW: value dimensions per warp */
    extern __shared__ __align__(16) unsigned char smem[];
    KT *Qs = reinterpret_cast<KT *>(smem), *Ks = Qs + 16 * LD, *Vs = Ks + 2 * TK * LD;   /* [16][LD], [2][TK][LD] x 2 */
    __shared__ float wgt[16][PG_MAX_SPLITS], tot[16];
    const int i = blockIdx.x, kvh = blockIdx.y / P.sub, sg = blockIdx.y % P.sub, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int h0 = kvh * P.group + sg * 16, nh = min(16, P.group - sg * 16);
    const int p = P.pos[i], seq = P.row_seq[i];
    const int first_new = P.one_row ? p : P.pos[P.seq_start[seq]];
    const int lo = first_key(P.window, p), n = p - lo + 1;
    const int chunk = split_chunk(n, P.n_splits, TK), nact = (n + chunk - 1) / chunk;
    if (split >= nact) return;
    const int k0 = lo + split * chunk, k1 = min(p + 1, k0 + chunk), ntiles = (k1 - k0 + TK - 1) / TK;
    const int32_t *tab = P.table + (int64_t)seq * P.tstride;
    const KT *K = (const KT *)P.k + (int64_t)kvh * D, *V = (const KT *)P.v + (int64_t)kvh * D;
    auto load_tile = [&](int t, int old) {   /* as pg_decode_kernel's */
        const int b = t & 1, base = k0 + t * TK;
        for (int e = threadIdx.x; e < 2 * TK * PR; e += 128) {
            const int r = (e / PR) % TK, c = e % PR, key = min(base + r, k1 - 1);
            if (old >= 0 && (key < first_new) != (old == 1)) continue;
            const int64_t sl = slot_of(P, tab, key);
            if (e < TK * PR) cp_async16(Ks + (b * TK + r) * LD + c * 8, K + sl * P.kstride + c * 8);
            else cp_async16(Vs + (b * TK + r) * LD + c * 8, V + sl * P.vstride + c * 8);
        }
    };
    const int first_tiles = min(ntiles, 2);
    for (int t = 0; t < first_tiles; t++) load_tile(t, 1);
    cp_async_commit();
    pdl_wait();
    pdl_launch_next();
    for (int t = 0; t < first_tiles; t++) load_tile(t, 0);
    cp_async_commit();
    for (int idx = threadIdx.x; idx < 16 * D; idx += 128) {
        const int r = idx / D, c = idx % D;
        const float v = r < nh ? ld_elem(P.q, P.qdt, (int64_t)i * P.qstride + (int64_t)(h0 + r) * D + c) : 0.0f;
        Qs[r * LD + c] = to_kt<KT>(v);
    }
    cp_async_wait<0>();
    __syncthreads();

    float o[DW / 8][4];
#pragma unroll
    for (int nn = 0; nn < DW / 8; nn++) o[nn][0] = o[nn][1] = o[nn][2] = o[nn][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    const float sl = P.softcap > 0 ? P.scale : P.scale * LOG2E;
    const int mi = lane >> 3;
    for (int t = 0; t < ntiles; t++) {
        if (t >= 2) {
            cp_async_wait<1>();
            __syncthreads();
        }
        const int b = t & 1, kt = k0 + t * TK;
        float s4[TK / 8][4];
#pragma unroll
        for (int j = 0; j < TK / 8; j++) s4[j][0] = s4[j][1] = s4[j][2] = s4[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[4];
            ldsm_x4(a, Qs + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < TK / 8; j += 2) {
                uint32_t bb[4];
                ldsm_x4(bb, Ks + (b * TK + (j + (mi >> 1)) * 8 + (lane & 7)) * LD + kk * 16 + (mi & 1) * 8);
                mma16<KT>(s4[j], a, bb[0], bb[1]);
                mma16<KT>(s4[j + 1], a, bb[2], bb[3]);
            }
        }
#pragma unroll
        for (int j = 0; j < TK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s4[j][e] * sl;
                if (P.softcap > 0) x = P.softcap * tanhf(x / P.softcap) * LOG2E;
                if (kt + j * 8 + tq * 2 + (e & 1) >= k1) x = -INFINITY;
                s4[j][e] = x;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {   /* key 0 of the tile is real: every row's max is finite */
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TK / 8; j++) mx = fmaxf(mx, fmaxf(s4[j][2 * r], s4[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m_r[r], mx), corr = exp2f(m_r[r] - mn);
            m_r[r] = mn;
            float ls = 0.0f;
#pragma unroll
            for (int j = 0; j < TK / 8; j++) {
                s4[j][2 * r] = exp2f(s4[j][2 * r] - mn);
                s4[j][2 * r + 1] = exp2f(s4[j][2 * r + 1] - mn);
                ls += s4[j][2 * r] + s4[j][2 * r + 1];
            }
            l_r[r] = l_r[r] * corr + ls;
#pragma unroll
            for (int nn = 0; nn < DW / 8; nn++) {
                o[nn][2 * r] *= corr;
                o[nn][2 * r + 1] *= corr;
            }
        }
#pragma unroll
        for (int kk = 0; kk < TK / 16; kk++) {
            const uint32_t a[4] = {pack2<KT>(s4[2 * kk][0], s4[2 * kk][1]), pack2<KT>(s4[2 * kk][2], s4[2 * kk][3]),
                                   pack2<KT>(s4[2 * kk + 1][0], s4[2 * kk + 1][1]), pack2<KT>(s4[2 * kk + 1][2], s4[2 * kk + 1][3])};
#pragma unroll
            for (int nn = 0; nn < DW / 8; nn += 2) {
                uint32_t bb[4];
                ldsm_x4_t(bb, Vs + (b * TK + kk * 16 + (mi & 1) * 8 + (lane & 7)) * LD + warp * DW + (nn + (mi >> 1)) * 8);
                mma16<KT>(o[nn], a, bb[0], bb[1]);
                mma16<KT>(o[nn + 1], a, bb[2], bb[3]);
            }
        }
        if (t + 2 < ntiles) {
            __syncthreads();   /* buffer b is free */
            load_tile(t + 2, -1);
        }
        cp_async_commit();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
    }

    if (nact == 1) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = g + 8 * r;
            if (row >= nh) continue;
            const float inv = 1.0f / l_r[r];
#pragma unroll
            for (int nn = 0; nn < DW / 8; nn++) {
                const int64_t c = (int64_t)(h0 + row) * D + warp * DW + nn * 8 + tq * 2;
                st(P.out, i, c, o[nn][2 * r] * inv);
                st(P.out, i, c + 1, o[nn][2 * r + 1] * inv);
            }
        }
        return;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = g + 8 * r;
        if (row >= nh) continue;
        float *part = part_at(P, i, h0 + row, split);
        if (warp == 0 && tq == 0) { part[0] = m_r[r]; part[1] = l_r[r]; }
#pragma unroll
        for (int nn = 0; nn < DW / 8; nn++) {
            part[2 + warp * DW + nn * 8 + tq * 2] = o[nn][2 * r];
            part[2 + warp * DW + nn * 8 + tq * 2 + 1] = o[nn][2 * r + 1];
        }
    }
    if (!last_to_arrive(P.counters + ((int64_t)i * P.n_kv_heads + kvh) * P.sub + sg, nact)) return;
    /* the last block merges: each warp weighs the splits of its heads, then all threads sum (reading past L1) */
    for (int hh = warp; hh < nh; hh += 4) {
        const float *pp = part_at(P, i, h0 + hh, 0);
        float ms[2], ls[2], ws[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int sp = lane + 32 * u;
            ms[u] = sp < nact ? __ldcg(pp + sp * (D + 2)) : -INFINITY;
            ls[u] = sp < nact ? __ldcg(pp + sp * (D + 2) + 1) : 0.0f;
        }
        const float M = warp_max(fmaxf(ms[0], ms[1]));
#pragma unroll
        for (int u = 0; u < 2; u++) {
            ws[u] = ms[u] == -INFINITY ? 0.0f : exp2f(ms[u] - M);
            if (lane + 32 * u < nact) wgt[hh][lane + 32 * u] = ws[u];
        }
        const float L = warp_sum(ws[0] * ls[0] + ws[1] * ls[1]);
        if (lane == 0) tot[hh] = L;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nh * D; e += 128) {
        const int hh = e / D, c = e % D;
        const float *pp = part_at(P, i, h0 + hh, 0) + 2 + c;
        float acc = 0.0f;
#pragma unroll 8
        for (int s = 0; s < nact; s++) acc = fmaf(wgt[hh][s], __ldcg(pp + (int64_t)s * (D + 2)), acc);
        st(P.out, i, (int64_t)(h0 + hh) * D + c, acc / tot[hh]);
    }
}

/* ---- prefill: tensor cores ---- */

template <int D, int DV, int BC, int HPB>
constexpr size_t mma_smem() {
    return ((size_t)64 * HPB * (D + 8) + (size_t)2 * BC * (D + 8) + (size_t)2 * BC * (DV + 8)) * 2;
}

template <int D, int DV, int BC, int HPB, typename KT>
__global__ void __launch_bounds__(128 * HPB) pg_mma_kernel(PagedP P) {
    constexpr int LD = D + 8, LDV = DV + 8;   /* padded rows: ldmatrix rows land in distinct banks */
    extern __shared__ __align__(16) unsigned char smem[];
    KT *Qs = reinterpret_cast<KT *>(smem), *Ks = Qs + 64 * HPB * LD, *Vs = Ks + 2 * BC * LD;
    const int nvp = P.Dv / DV, h0 = blockIdx.y / nvp * HPB, vp = blockIdx.y % nvp, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int h = h0 + warp / 4, wr = warp % 4;   /* this warp's head, and its 16 rows of the 64 */
    /* the tile: sequence s's tiles are numbered from seq_start[s] / 64 + s; the last (longest rows) first */
    const int tile = gridDim.x - 1 - blockIdx.x;
    int s = 0;
    for (int hi = P.n_seqs - 1; s < hi;) {
        const int mid = (s + hi + 1) >> 1;
        if (P.seq_start[mid] / 64 + mid <= tile) s = mid;
        else hi = mid - 1;
    }
    const int ss = P.seq_start[s], se = P.seq_start[s + 1], r0 = ss + (tile - ss / 64 - s) * 64;
    if (r0 >= se) return;
    const int nq = min(64, se - r0), pos0 = P.pos[r0];   /* rows r0 .. r0+nq-1 at positions pos0 .. */
    const int32_t *tab = P.table + (int64_t)s * P.tstride;
    const int kvh = h0 / P.group;
    const int p_hi = pos0 + nq - 1, kb = first_key(P.window, pos0);
    const int chunk = split_chunk(p_hi + 1 - kb, P.n_splits, BC);
    const int k_begin = kb + split * chunk, k_end = min(p_hi + 1, k_begin + chunk);
    pdl_wait();
    pdl_launch_next();

    for (int idx = threadIdx.x; idx < HPB * 64 * D; idx += blockDim.x) {
        const int hb = idx / (64 * D), r = idx / D % 64, c = idx % D;
        const float v = r < nq ? ld_elem(P.q, P.qdt, (int64_t)(r0 + r) * P.qstride + (int64_t)(h0 + hb) * D + c) : 0.0f;
        Qs[(hb * 64 + r) * LD + c] = to_kt<KT>(v);
    }
    const KT *Kg = (const KT *)P.k + (int64_t)kvh * D, *Vg = (const KT *)P.v + (int64_t)kvh * P.Dv + vp * DV;
    auto load_kv = [&](int stage, int kt) {
        for (int idx = threadIdx.x; idx < BC * (D / 8); idx += blockDim.x) {
            const int r = idx / (D / 8), ch = idx % (D / 8), kp = kt + r;
            KT *dk = Ks + (stage * BC + r) * LD + ch * 8;
            if (kp < k_end) cp_async16(dk, Kg + slot_of(P, tab, kp) * P.kstride + ch * 8);
            else *reinterpret_cast<uint4 *>(dk) = make_uint4(0, 0, 0, 0);   /* zeros: a masked weight 0 times NaN is NaN */
        }
        for (int idx = threadIdx.x; idx < BC * (DV / 8); idx += blockDim.x) {
            const int r = idx / (DV / 8), ch = idx % (DV / 8), kp = kt + r;
            KT *dv = Vs + (stage * BC + r) * LDV + ch * 8;
            if (kp < k_end) cp_async16(dv, Vg + slot_of(P, tab, kp) * P.vstride + ch * 8);
            else *reinterpret_cast<uint4 *>(dv) = make_uint4(0, 0, 0, 0);
        }
        cp_async_commit();
    };

    float o[DV / 8][4];
#pragma unroll
    for (int n = 0; n < DV / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    const int qp0 = pos0 + wr * 16 + g;   /* position of this thread's first row; the second is +8 */
    const float sl = P.softcap > 0 ? P.scale : P.scale * LOG2E;
    const KT *Qw = Qs + (warp / 4 * 64 + wr * 16) * LD;

    int stage = 0;
    if (k_begin < k_end) load_kv(0, k_begin);
    for (int kt = k_begin; kt < k_end; kt += BC) {
        if (kt + BC < k_end) {
            load_kv(stage ^ 1, kt + BC);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        float s4[BC / 8][4];
#pragma unroll
        for (int j = 0; j < BC / 8; j++) s4[j][0] = s4[j][1] = s4[j][2] = s4[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[4];
            ldsm_x4(a, Qw + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < BC / 8; j += 2) {
                uint32_t bb[4];
                const int mi = lane >> 3;
                ldsm_x4(bb, Ks + (stage * BC + (j + (mi >> 1)) * 8 + (lane & 7)) * LD + kk * 16 + (mi & 1) * 8);
                mma16<KT>(s4[j], a, bb[0], bb[1]);
                mma16<KT>(s4[j + 1], a, bb[2], bb[3]);
            }
        }
        const int qw = qp0 - g;   /* the warp's rows are qw .. qw + 15: masking needed only on the tiles at their edges */
        const bool edge = kt + BC - 1 > qw || kt + BC > k_end || (P.window > 0 && kt <= qw + 15 - P.window);
#pragma unroll
        for (int j = 0; j < BC / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s4[j][e] * sl;
                if (P.softcap > 0) x = P.softcap * tanhf(x / P.softcap) * LOG2E;
                if (edge) {
                    const int kp = kt + j * 8 + tq * 2 + (e & 1), qp = qp0 + (e >> 1) * 8;
                    if (kp > qp || kp >= k_end || (P.window > 0 && kp <= qp - P.window)) x = -INFINITY;
                }
                s4[j][e] = x;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < BC / 8; j++) mx = fmaxf(mx, fmaxf(s4[j][2 * r], s4[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m_r[r], mx), base = mn == -INFINITY ? 0.0f : mn;
            const float corr = exp2f(m_r[r] - base);
            m_r[r] = mn;
            float ls = 0.0f;
#pragma unroll
            for (int j = 0; j < BC / 8; j++) {
                s4[j][2 * r] = exp2f(s4[j][2 * r] - base);
                s4[j][2 * r + 1] = exp2f(s4[j][2 * r + 1] - base);
                ls += s4[j][2 * r] + s4[j][2 * r + 1];
            }
            l_r[r] = l_r[r] * corr + ls;
#pragma unroll
            for (int n = 0; n < DV / 8; n++) {
                o[n][2 * r] *= corr;
                o[n][2 * r + 1] *= corr;
            }
        }
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            const uint32_t a[4] = {pack2<KT>(s4[2 * kk][0], s4[2 * kk][1]), pack2<KT>(s4[2 * kk][2], s4[2 * kk][3]),
                                   pack2<KT>(s4[2 * kk + 1][0], s4[2 * kk + 1][1]), pack2<KT>(s4[2 * kk + 1][2], s4[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < DV / 8; n += 2) {
                uint32_t bb[4];
                const int mi = lane >> 3;
                ldsm_x4_t(bb, Vs + (stage * BC + kk * 16 + (mi & 1) * 8 + (lane & 7)) * LDV + (n + (mi >> 1)) * 8);
                mma16<KT>(o[n], a, bb[0], bb[1]);
                mma16<KT>(o[n + 1], a, bb[2], bb[3]);
            }
        }
        __syncthreads();
        stage ^= 1;
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
        const int li = wr * 16 + g + 8 * r;
        if (li >= nq) continue;
        const int gi = r0 + li;
        if (P.n_splits == 1) {
            const float inv = 1.0f / l_r[r];
#pragma unroll
            for (int n = 0; n < DV / 8; n++) {
                const int64_t c = (int64_t)h * P.Dv + vp * DV + n * 8 + tq * 2;
                st(P.out, gi, c, o[n][2 * r] * inv);
                st(P.out, gi, c + 1, o[n][2 * r + 1] * inv);
            }
        } else {
            float *part = part_at(P, gi, h, split);
            if (tq == 0 && vp == 0) { part[0] = m_r[r]; part[1] = l_r[r]; }
#pragma unroll
            for (int n = 0; n < DV / 8; n++) {
                part[2 + vp * DV + n * 8 + tq * 2] = o[n][2 * r];
                part[2 + vp * DV + n * 8 + tq * 2 + 1] = o[n][2 * r + 1];
            }
        }
    }
}

/* out[i, head h] = the key splits' partial results merged (every split of an existing row wrote one) */
__global__ void __launch_bounds__(128) pg_reduce_kernel(PagedP P) {
    __shared__ float wgt[PG_MAX_SPLITS];
    __shared__ float total;
    pdl_wait();
    pdl_launch_next();
    const int i = blockIdx.x, h = blockIdx.y, S = P.n_splits, W = P.Dv + 2;
    const float *pp = part_at(P, i, h, 0);
    if (threadIdx.x == 0) {
        float M = -INFINITY, L = 0.0f;
        for (int s = 0; s < S; s++) M = fmaxf(M, pp[s * W]);
        for (int s = 0; s < S; s++) {
            const float m = pp[s * W];
            wgt[s] = m == -INFINITY ? 0.0f : exp2f(m - M);
            L += pp[s * W + 1] * wgt[s];
        }
        total = L;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < P.Dv; c += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < S; s++)
            if (wgt[s] != 0.0f) v += pp[s * W + 2 + c] * wgt[s];
        st(P.out, i, (int64_t)h * P.Dv + c, v / total);
    }
}

/* ---- host side ---- */

bool is16(cf_dtype t) { return t == CF_BF16 || t == CF_F16; }

/* the decode and tensor-core kernels: 16-bit caches of one type, head size 64/128/256/512 for keys and
 * values, 16-byte aligned rows */
bool fast_ok(cf_tensor k, cf_tensor v, const cf_paged_attn_args *a) {
    const int D = a->head_dim;
    return k.dtype == v.dtype && is16(k.dtype) && D == a->v_head_dim && (D == 64 || D == 128 || D == 256 || D == 512) &&
           (uintptr_t)k.data % 16 == 0 && (uintptr_t)v.data % 16 == 0 && k.stride % 8 == 0 && v.stride % 8 == 0;
}

enum PgKind { PG_DECODE, PG_DMMA, PG_MMA, PG_GENERIC };

struct Plan {
    PgKind kind;
    int nw, sub;        /* decode: warps per block, blocks per KV head */
    int hpb, bc, dv;    /* mma: query heads per block, keys per tile, value dims per block */
    int splits;
};

int keys_bound(const cf_paged_attn_args *a) {
    const int mk = a->max_keys > 0 ? a->max_keys : 1;
    return a->window > 0 && a->window < mk ? a->window : mk;
}

int pick_splits(int64_t base, int64_t limit, int per_sm) {
    int64_t want = ceil_div((int64_t)per_sm * cfk_cfg.n_sm, base);
    if (want > limit) want = limit;
    if (want > PG_MAX_SPLITS) want = PG_MAX_SPLITS;
    return want < 1 ? 1 : (int)want;
}

Plan plan(cf_tensor k, cf_tensor v, const cf_paged_attn_args *a, const cf_batch_view *b) {
    Plan p = {};
    const int G = a->n_heads / a->n_kv_heads, D = a->head_dim;
    p.splits = 1;
    if (!fast_ok(k, v, a)) {
        p.kind = PG_GENERIC;
        return p;
    }
    if (b->max_rows_per_seq >= PG_MMA_MIN_ROWS) {
        p.kind = PG_MMA;
        p.bc = D == 64 ? 64 : 32;
        p.dv = D == 512 ? 256 : D;
        int hpb = D == 512 ? 1 : D == 256 && cfk_cfg.attn_hpb > 2 ? 2 : cfk_cfg.attn_hpb;
        if (hpb > 4) hpb = 4;
        while (hpb > 1 && G % hpb) hpb /= 2;
        p.hpb = hpb < 1 ? 1 : hpb;
        const int64_t tiles = b->n_rows / 64 + b->n_seqs;
        p.splits = pick_splits(tiles * (a->n_heads / p.hpb) * (D / p.dv), ceil_div(keys_bound(a), 4 * p.bc), 4);
        return p;
    }
    int tk;
    if (cfk_cfg.paged_mma_group > 0 && G >= cfk_cfg.paged_mma_group) {
        p.kind = PG_DMMA;
        p.sub = (int)ceil_div(G, 16);
        tk = dm_tk(D);
    } else {
        p.kind = PG_DECODE;
        const int g8 = G < 8 ? G : 8;
        p.nw = g8 <= 1 ? 1 : g8 <= 2 ? 2 : g8 <= 4 ? 4 : 8;
        p.sub = (int)ceil_div(G, p.nw);
        tk = dec_tk(D);
    }
    const int64_t merges = (int64_t)b->n_rows * a->n_kv_heads * p.sub;   /* a counter each */
    if (merges <= CFK_ATTN_COUNTERS) {
        int cap = cfk_cfg.attn_group_splits;
        p.splits = pick_splits(merges, ceil_div(keys_bound(a), tk), cfk_cfg.paged_sm_blocks);
        if (p.splits > cap) p.splits = cap < 1 ? 1 : cap;
    }
    return p;
}

template <int D, int NW, typename KT>
cudaError_t dec_attr() {
    return cudaFuncSetAttribute(pg_decode_kernel<D, NW, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dec_smem<D, NW>());
}

template <int D, int NW, typename KT>
cudaError_t dec_launch(cudaStream_t st, dim3 grid, const PagedP &P) {
    return launch(pg_decode_kernel<D, NW, KT>, grid, dim3(32 * NW), dec_smem<D, NW>(), st, P);
}

template <int D, typename KT>
cudaError_t dec_init() {
    cudaError_t e = dec_attr<D, 1, KT>();
    if (e == cudaSuccess) e = dec_attr<D, 2, KT>();
    if (e == cudaSuccess) e = dec_attr<D, 4, KT>();
    if (e == cudaSuccess) e = dec_attr<D, 8, KT>();
    return e;
}

template <int D, typename KT>
cudaError_t dec_launch_nw(cudaStream_t st, dim3 grid, int nw, const PagedP &P) {
    if (nw == 1) return dec_launch<D, 1, KT>(st, grid, P);
    if (nw == 2) return dec_launch<D, 2, KT>(st, grid, P);
    if (nw == 4) return dec_launch<D, 4, KT>(st, grid, P);
    return dec_launch<D, 8, KT>(st, grid, P);
}

template <typename KT>
cudaError_t dec_dispatch(cudaStream_t st, dim3 grid, int D, int nw, const PagedP &P) {
    if (D == 64) return dec_launch_nw<64, KT>(st, grid, nw, P);
    if (D == 128) return dec_launch_nw<128, KT>(st, grid, nw, P);
    if (D == 256) return dec_launch_nw<256, KT>(st, grid, nw, P);
    return dec_launch_nw<512, KT>(st, grid, nw, P);
}

/* tensor-core variants: (D, DV, BC) = (64, 64, 64), (128, 128, 32), (256, 256, 32), (512, 256, 32); HPB 1, 2, 4
 * (at most 2 for 256, 1 for 512) */
template <int D, int DV, int BC, int HPB, typename KT>
cudaError_t mma_attr() {
    return cudaFuncSetAttribute(pg_mma_kernel<D, DV, BC, HPB, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)mma_smem<D, DV, BC, HPB>());
}

template <int D, int DV, int BC, int HPB, typename KT>
cudaError_t mma_launch(cudaStream_t st, dim3 grid, const PagedP &P) {
    return launch(pg_mma_kernel<D, DV, BC, HPB, KT>, grid, dim3(128 * HPB), mma_smem<D, DV, BC, HPB>(), st, P);
}

template <int D, int DV, int BC, typename KT>
cudaError_t mma_init_d() {
    cudaError_t e = mma_attr<D, DV, BC, 1, KT>();
    if constexpr (D <= 256)
        if (e == cudaSuccess) e = mma_attr<D, DV, BC, 2, KT>();
    if constexpr (D <= 128)
        if (e == cudaSuccess) e = mma_attr<D, DV, BC, 4, KT>();
    return e;
}

template <int D, int DV, int BC, typename KT>
cudaError_t mma_launch_hpb(cudaStream_t st, dim3 grid, int hpb, const PagedP &P) {
    if constexpr (D <= 128)
        if (hpb == 4) return mma_launch<D, DV, BC, 4, KT>(st, grid, P);
    if constexpr (D <= 256)
        if (hpb == 2) return mma_launch<D, DV, BC, 2, KT>(st, grid, P);
    return mma_launch<D, DV, BC, 1, KT>(st, grid, P);
}

template <typename KT>
cudaError_t mma_dispatch(cudaStream_t st, dim3 grid, int D, int hpb, const PagedP &P) {
    if (D == 64) return mma_launch_hpb<64, 64, 64, KT>(st, grid, hpb, P);
    if (D == 128) return mma_launch_hpb<128, 128, 32, KT>(st, grid, hpb, P);
    if (D == 256) return mma_launch_hpb<256, 256, 32, KT>(st, grid, hpb, P);
    return mma_launch_hpb<512, 256, 32, KT>(st, grid, hpb, P);
}

template <int D, typename KT>
cudaError_t dmma_attr() {
    return cudaFuncSetAttribute(pg_dmma_kernel<D, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dm_smem<D>());
}

template <typename KT>
cudaError_t dmma_dispatch(cudaStream_t st, dim3 grid, int D, const PagedP &P) {
    if (D == 64) return launch(pg_dmma_kernel<64, KT>, grid, dim3(128), dm_smem<64>(), st, P);
    if (D == 128) return launch(pg_dmma_kernel<128, KT>, grid, dim3(128), dm_smem<128>(), st, P);
    if (D == 256) return launch(pg_dmma_kernel<256, KT>, grid, dim3(128), dm_smem<256>(), st, P);
    return launch(pg_dmma_kernel<512, KT>, grid, dim3(128), dm_smem<512>(), st, P);
}

template <typename KT>
cudaError_t init_type() {
    cudaError_t e = dmma_attr<64, KT>();
    if (e == cudaSuccess) e = dmma_attr<128, KT>();
    if (e == cudaSuccess) e = dmma_attr<256, KT>();
    if (e == cudaSuccess) e = dmma_attr<512, KT>();
    if (e == cudaSuccess) e = dec_init<64, KT>();
    if (e == cudaSuccess) e = dec_init<128, KT>();
    if (e == cudaSuccess) e = dec_init<256, KT>();
    if (e == cudaSuccess) e = dec_init<512, KT>();
    if (e == cudaSuccess) e = mma_init_d<64, 64, 64, KT>();
    if (e == cudaSuccess) e = mma_init_d<128, 128, 32, KT>();
    if (e == cudaSuccess) e = mma_init_d<256, 256, 32, KT>();
    if (e == cudaSuccess) e = mma_init_d<512, 256, 32, KT>();
    return e;
}

}   // namespace

extern "C" cudaError_t cfk_paged_init(void) {
    cudaError_t e = init_type<__nv_bfloat16>();
    if (e == cudaSuccess) e = init_type<__half>();
    return e;
}

extern "C" size_t cfk_paged_scratch(cf_tensor k, cf_tensor v, const cf_paged_attn_args *a, const cf_batch_view *b) {
    const Plan p = plan(k, v, a, b);
    return p.splits == 1 ? 0 : (size_t)b->n_rows * a->n_heads * p.splits * (a->v_head_dim + 2) * sizeof(float);
}

extern "C" cudaError_t cfk_attention_paged(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v,
                                           const cf_paged_attn_args *a, const cf_batch_view *b, void *partial, int *counters) {
    if (a->head_dim > CFK_ATTN_MAX_D || a->v_head_dim > CFK_ATTN_MAX_D || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads ||
        a->block_size <= 0)
        return cudaErrorInvalidValue;
    if (b->n_rows <= 0) return cudaSuccess;
    const Plan p = plan(k, v, a, b);
    const int B = a->block_size;
    PagedP P = {};
    P.q = q.data;
    P.qdt = (int)q.dtype;
    P.qstride = q.stride;
    P.k = k.data;
    P.v = v.data;
    P.kstride = k.stride;
    P.vstride = v.stride;
    P.out = tv(out);
    P.part = (float *)partial;
    P.counters = counters;
    P.pos = (const int32_t *)b->pos.data;
    P.row_seq = (const int32_t *)b->row_seq.data;
    P.seq_start = (const int32_t *)b->seq_start.data;
    P.table = (const int32_t *)b->block_table.data;
    P.tstride = b->block_table.stride;
    P.n_rows = b->n_rows;
    P.n_seqs = b->n_seqs;
    P.n_heads = a->n_heads;
    P.n_kv_heads = a->n_kv_heads;
    P.group = a->n_heads / a->n_kv_heads;
    P.D = a->head_dim;
    P.Dv = a->v_head_dim;
    P.B = B;
    P.bshift = (B & (B - 1)) ? -1 : __builtin_ctz((unsigned)B);
    P.window = a->window;
    P.n_splits = p.splits;
    P.sub = p.sub;
    P.one_row = b->max_rows_per_seq <= 1;
    P.scale = a->scale;
    P.softcap = a->softcap;
    if (p.splits > 1 && !partial) return cudaErrorInvalidValue;
    cudaError_t e;
    if (p.kind == PG_DMMA) {
        dim3 grid((unsigned)b->n_rows, (unsigned)(a->n_kv_heads * p.sub), (unsigned)p.splits);
        return k.dtype == CF_BF16 ? dmma_dispatch<__nv_bfloat16>(st, grid, a->head_dim, P) : dmma_dispatch<__half>(st, grid, a->head_dim, P);
    }
    if (p.kind == PG_DECODE) {
        dim3 grid((unsigned)b->n_rows, (unsigned)(a->n_kv_heads * p.sub), (unsigned)p.splits);
        return k.dtype == CF_BF16 ? dec_dispatch<__nv_bfloat16>(st, grid, a->head_dim, p.nw, P)
                                  : dec_dispatch<__half>(st, grid, a->head_dim, p.nw, P);
    }
    if (p.kind == PG_MMA) {
        dim3 grid((unsigned)(b->n_rows / 64 + b->n_seqs), (unsigned)(a->n_heads / p.hpb * (a->head_dim / p.dv)), (unsigned)p.splits);
        e = k.dtype == CF_BF16 ? mma_dispatch<__nv_bfloat16>(st, grid, a->head_dim, p.hpb, P)
                               : mma_dispatch<__half>(st, grid, a->head_dim, p.hpb, P);
        if (e != cudaSuccess || p.splits == 1) return e;
        return launch(pg_reduce_kernel, dim3((unsigned)b->n_rows, (unsigned)a->n_heads), dim3(128), 0, st, P);
    }
    return cfk_attention_paged_ref(st, out, q, k, v, a, b);
}
