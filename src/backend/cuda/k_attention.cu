/* k_attention.cu: attention over the slot-ring KV cache of backend.h (position p in slot p % cap,
 * window, GQA, softcap), in two kernels that both split the key range and merge the pieces:
 *
 * - attn_group_kernel (decode, few queries, 16-bit caches, head size 64/128, GQA groups of 2, 4 or 8): one
 *   block per (key split, KV head, query), a warp per query head of the group, sharing K/V tiles.
 * - attn_decode_kernel (decode otherwise, 16-bit caches, head size 64/128/256) and attn_split_kernel
 *   (any cache dtype and head size <= 512, e.g. Gemma 4's full layers; queries and prefill too where the
 *   others do not apply): flash-decoding. One block of 4 warps per (key split, head,
 *   query); each lane scores one key, the warp keeps a running max and sum, and accumulates V with lanes
 *   across dimensions.
 * - attn_mma_kernel (prefill, >= 16 queries, bf16 caches, head size 64/128/256): FlashAttention-2 on
 *   tensor cores (mma.sync m16n8k16 bf16, f32 accumulation). A block takes 64 queries of 1, 2 or 4 heads
 *   of one GQA group (4 warps a head), which share its K/V tiles; they stream through shared memory with
 *   cp.async, double-buffered; scores stay in registers.
 *
 * When a launch has more than one split per (query, head), each split writes (max, sum, unnormalized
 * output) to scratch and the last split to finish (or attn_reduce_kernel) combines them; attn_decode_kernel's 2-8
 * splits instead form a thread block cluster and merge through its shared memory. Scores are kept in log2 units (exp2). */
#include "backend/cuda/k_common.cuh"

#include <cooperative_groups.h>

#define LOG2E 1.4426950408889634f

struct AttnP {
    const void *q;
    int qdt;
    int64_t qstride;
    const void *k, *v;
    int64_t kstride, vstride;
    TV out;
    float *part;
    int *counters;   /* NULL: attn_reduce_kernel merges the splits */
    const int32_t *pos_dev;
    int pos0, n_q, n_heads, group, D, Dv, cap, window, n_splits;
    float scale, softcap;
};

__device__ __forceinline__ int query_pos0(const AttnP &P) { return P.pos_dev ? P.pos_dev[0] : P.pos0; }

/* Visible keys of the query at position p: [lo, p]. */
__device__ __forceinline__ int first_key(const AttnP &P, int p) { return P.window > 0 ? max(0, p - P.window + 1) : 0; }

__device__ __forceinline__ float score_fix(const AttnP &P, float s) {
    if (P.softcap > 0) s = P.softcap * tanhf(s / P.softcap);
    return s * LOG2E;
}

/* Partial results of one split: m (log2 units), l, then Dv unnormalized outputs. Written directly as the
 * output when there is one split. */
__device__ __forceinline__ float *part_at(const AttnP &P, int i, int h, int split) {
    return P.part + ((int64_t)(i * P.n_heads + h) * P.n_splits + split) * (P.Dv + 2);
}

__device__ void merge_if_last(const AttnP &P, int i, int h);

/* Keys per split when n keys go to n_splits splits that start a multiple of align keys apart. */
__device__ __forceinline__ int split_chunk(int n, int n_splits, int align) {
    return ((n + n_splits - 1) / n_splits + align - 1) / align * align;
}

/* The keys [k0, k1) of one split of the visible range of query i, and how many splits hold keys (n). */
struct KeyRange {
    int k0, k1, n;
};
__device__ __forceinline__ KeyRange key_range(const AttnP &P, int i, int split, int align) {
    const int p = query_pos0(P) + i, lo = first_key(P, p), chunk = split_chunk(p - lo + 1, P.n_splits, align);
    const int k0 = lo + split * chunk;
    return KeyRange{k0, min(p + 1, k0 + chunk), (p - lo + chunk) / chunk};
}

/* Whether this block is the last of n to arrive at *ctr (a zeroed counter, left zeroed by the last);
 * what the others wrote before arriving is then visible to it. */
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

/* A split with nothing to see still counts towards the merge. */
__device__ __forceinline__ void empty_split(const AttnP &P, int i, int h, float *part) {
    if (threadIdx.x == 0) { part[0] = -INFINITY; part[1] = 0.0f; }
    merge_if_last(P, i, h);
}

/* The merge of n online-softmax partial results (max m_s, sum l_s; ml(s) gives (m_s, l_s)): their max M, each one's
 * weight wt[s] = 2^(m_s - M) (0 for one that saw no key) and the total sum L = sum_s l_s wt[s], returned. Warps,
 * cluster blocks and split blocks all merge through it, so the three agree to the bit. */
template <int N, typename ML>
__device__ __forceinline__ float merge_weights(int n, ML ml, float (&wt)[N], float &M) {
    M = -INFINITY;
#pragma unroll(N <= 8 ? N : 1)
    for (int s = 0; s < N; s++) {
        if (s >= n) break;
        wt[s] = ml(s).x;
        M = fmaxf(M, wt[s]);
    }
    float L = 0.0f;
#pragma unroll(N <= 8 ? N : 1)
    for (int s = 0; s < N; s++) {
        if (s >= n) break;
        wt[s] = wt[s] == -INFINITY ? 0.0f : exp2f(wt[s] - M);
        L += ml(s).y * wt[s];
    }
    return L;
}

/* the 4 warps' (wm, wl) merged: weights f, max M, sum L */
__device__ __forceinline__ void warp_weights(const float *wm, const float *wl, float (&f)[4], float &M, float &L) {
    L = merge_weights(4, [&](int w) { return make_float2(wm[w], wl[w]); }, f, M);
}

/* The block's 4 warps each hold (max m, sum l, unnormalized outputs wo[warp][0 .. Dv-1]): combined, then
 * written as the output (one split) or as this split's partial result, which the last split merges. */
template <int W>
__device__ void combine_warps(const AttnP &P, int i, int h, float *part, const float *wm, const float *wl, const float (*wo)[W]) {
    float f[4], M, L;
    warp_weights(wm, wl, f, M, L);
    for (int c = threadIdx.x; c < P.Dv; c += blockDim.x) {
        const float v = wo[0][c] * f[0] + wo[1][c] * f[1] + wo[2][c] * f[2] + wo[3][c] * f[3];
        if (P.n_splits == 1) st(P.out, i, (int64_t)h * P.Dv + c, v / L);
        else part[2 + c] = v;
    }
    if (P.n_splits == 1) return;
    if (threadIdx.x == 0) { part[0] = M; part[1] = L; }
    merge_if_last(P, i, h);
}

/* One online-softmax step of a warp over 32 keys (lane j: key j's score s, if it has one): the running
 * max m and sum l move on, the outputs o are rescaled, and this lane's weight is returned. */
template <int N>
__device__ __forceinline__ float softmax_step(float s, bool has_key, float &m, float &l, float (&o)[N]) {
    const float mn = fmaxf(m, warp_max(s));   /* finite: lane 0 always has a key */
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

/* ---- decode: one lane per key ---- */

template <typename KT>
__device__ __forceinline__ float key_dot(const float *qs, const KT *kr, int D, bool vec) {
    float s = 0.0f;
    if (vec) {
        for (int c = 0; c < D; c += 8) {
            float kf[8];
            if constexpr (sizeof(KT) == 4) {
                float4 a = *reinterpret_cast<const float4 *>(kr + c), b = *reinterpret_cast<const float4 *>(kr + c + 4);
                kf[0] = a.x; kf[1] = a.y; kf[2] = a.z; kf[3] = a.w; kf[4] = b.x; kf[5] = b.y; kf[6] = b.z; kf[7] = b.w;
            } else {
                uint4 u = *reinterpret_cast<const uint4 *>(kr + c);
                const KT *e = reinterpret_cast<const KT *>(&u);
#pragma unroll
                for (int t = 0; t < 8; t++) kf[t] = (float)e[t];
            }
#pragma unroll
            for (int t = 0; t < 8; t++) s = fmaf(qs[c + t], kf[t], s);
        }
    } else {
        for (int c = 0; c < D; c++) s = fmaf(qs[c], (float)kr[c], s);
    }
    return s;
}

template <typename KT>
__global__ void __launch_bounds__(128) attn_split_kernel(AttnP P, bool vec) {
    __shared__ __align__(16) float qs[CFK_ATTN_MAX_D];
    __shared__ float wm[4], wl[4];
    __shared__ float wo[4][CFK_ATTN_MAX_D];
    pdl_wait();
    pdl_launch_next();
    const int split = blockIdx.x, h = blockIdx.y, i = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const KeyRange kr = key_range(P, i, split, 32);
    const int k0 = kr.k0, k1 = kr.k1;
    float *part = part_at(P, i, h, split);
    if (k0 >= k1) return empty_split(P, i, h, part);
    const int kvh = h / P.group;
    for (int c = threadIdx.x; c < P.D; c += blockDim.x)
        qs[c] = ld_elem(P.q, P.qdt, i * P.qstride + (int64_t)h * P.D + c) * P.scale;
    __syncthreads();

    const KT *K = (const KT *)P.k + (int64_t)kvh * P.D, *V = (const KT *)P.v + (int64_t)kvh * P.Dv;
    constexpr int OJ = CFK_ATTN_MAX_D / 32;   /* output dims per lane */
    float m = -INFINITY, l = 0.0f, o[OJ];
#pragma unroll
    for (int j = 0; j < OJ; j++) o[j] = 0.0f;
    for (int base = k0 + warp * 32; base < k1; base += 128) {
        const int kk = base + lane;
        float s = -INFINITY;
        if (kk < k1) s = score_fix(P, key_dot(qs, K + (int64_t)(kk % P.cap) * P.kstride, P.D, vec));
        const float pj = softmax_step(s, kk < k1, m, l, o);
        const int nk = min(32, k1 - base);
        for (int t = 0; t < nk; t++) {
            const float pt = __shfl_sync(0xffffffffu, pj, t);
            const KT *vr = V + (int64_t)((base + t) % P.cap) * P.vstride;
#pragma unroll
            for (int j = 0; j < OJ; j++) {
                const int c = lane + 32 * j;
                if (c < P.Dv) o[j] = fmaf(pt, (float)vr[c], o[j]);
            }
        }
    }
    if (lane == 0) { wm[warp] = m; wl[warp] = l; }
#pragma unroll
    for (int j = 0; j < OJ; j++)
        if (lane + 32 * j < P.Dv) wo[warp][lane + 32 * j] = o[j];
    __syncthreads();
    combine_warps(P, i, h, part, wm, wl, wo);
}

/* The block's 4 warps combined as in combine_warps, then the splits of (i, h), the blocks of one thread block cluster
 * (P.n_splits of them, at most 8), merged by its first block reading the others' shared memory: the same arithmetic in
 * the same order as merge_splits, without the round trips through global memory, the fence and the counter. */
template <int W>
__device__ void combine_cluster(const AttnP &P, int i, int h, const float *wm, const float *wl, float (*wo)[W]) {
    namespace cg = cooperative_groups;
    __shared__ float bm, bl;
    const cg::cluster_group cl = cg::this_cluster();
    float f[4], M, L;
    warp_weights(wm, wl, f, M, L);
    for (int c = threadIdx.x; c < P.Dv; c += blockDim.x) wo[0][c] = wo[0][c] * f[0] + wo[1][c] * f[1] + wo[2][c] * f[2] + wo[3][c] * f[3];
    if (threadIdx.x == 0) bm = M, bl = L;
    cl.sync();
    if (cl.block_rank() == 0) {
        const int S = P.n_splits;
        float wt[8], Mx;
        const float Lt = merge_weights(S, [&](int s) { return make_float2(*cl.map_shared_rank(&bm, s), *cl.map_shared_rank(&bl, s)); }, wt, Mx);
        for (int c = threadIdx.x; c < P.Dv; c += blockDim.x) {
            float v = 0.0f;
#pragma unroll
            for (int s = 0; s < 8; s++) {
                if (s >= S) break;
                if (wt[s] != 0.0f) v += cl.map_shared_rank(&wo[0][0], s)[c] * wt[s];
            }
            st(P.out, i, (int64_t)h * P.Dv + c, v / Lt);
        }
    }
    cl.sync();   /* the others' shared memory stays until the first block has read it */
}

/* N consecutive 16-bit values of a row in one load; past L1 (cg) for a row the kernel ahead may have written */
template <int N, typename KT>
__device__ __forceinline__ void ld_row(KT (&d)[N], const KT *p, bool cg) {
    if constexpr (N == 8) *reinterpret_cast<uint4 *>(d) = cg ? __ldcg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
    else if constexpr (N == 4) *reinterpret_cast<uint2 *>(d) = cg ? __ldcg(reinterpret_cast<const uint2 *>(p)) : *reinterpret_cast<const uint2 *>(p);
    else *reinterpret_cast<unsigned int *>(d) = cg ? __ldcg(reinterpret_cast<const unsigned int *>(p)) : *reinterpret_cast<const unsigned int *>(p);
}

__device__ __forceinline__ void prefetch_l1(const void *p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

/* The same for 16-bit caches and head sizes 64/128/256, written for latency: each lane's key row is
 * fetched with all its 16-byte loads in flight, and V is read lane-across-dimensions 16 keys at a time
 * with every load issued before use. A block takes 128 keys per round (32 per warp). Before waiting for the kernel
 * ahead, each lane of the first round whose key an earlier pass wrote (a position below the pass's first) loads its K
 * row into registers and prefetches its V row into L1; the rows of this pass are read after the wait, past L1.
 * CL: the splits are one thread block cluster and merge in it (combine_cluster). */
template <int D, typename KT, bool CL>
__global__ void __launch_bounds__(128) attn_decode_kernel(AttnP P) {
    constexpr int VL = D / 32;   /* V elements per lane: 2, 4 or 8 */
    __shared__ __align__(16) float qs[D];
    __shared__ float wm[4], wl[4];
    __shared__ float wo[4][D];
    const int split = blockIdx.x, h = blockIdx.y, i = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int first_new = query_pos0(P);   /* positions are written before a step's kernels run (backend.h) */
    const KeyRange kr = key_range(P, i, split, 128);
    const int k0 = kr.k0, k1 = kr.k1, kvh = h / P.group;
    const KT *K = (const KT *)P.k + (int64_t)kvh * D, *V = (const KT *)P.v + (int64_t)kvh * D;
    uint4 kv[D / 8];
    const int first = k0 + warp * 32;   /* this warp's first round */
    const bool pre = first + lane < min(k1, first_new);
    if (pre) {
        const int64_t slot = (first + lane) % P.cap;
        const uint4 *kp = reinterpret_cast<const uint4 *>(K + slot * P.kstride);
#pragma unroll
        for (int c = 0; c < D / 8; c++) kv[c] = kp[c];
        const char *vp = reinterpret_cast<const char *>(V + slot * P.vstride);
#pragma unroll
        for (int b = 0; b < D * 2; b += 128) prefetch_l1(vp + b);
    }
    pdl_wait();
    pdl_launch_next();
    float *part = part_at(P, i, h, split);
    if (!CL && k0 >= k1) return empty_split(P, i, h, part);   /* in a cluster an empty split takes part in the merge */
    for (int c = threadIdx.x; c < D; c += blockDim.x) qs[c] = ld_elem(P.q, P.qdt, i * P.qstride + (int64_t)h * D + c) * P.scale;
    __syncthreads();
    float m = -INFINITY, l = 0.0f, o[VL];
#pragma unroll
    for (int j = 0; j < VL; j++) o[j] = 0.0f;
    for (int base = first; base < k1; base += 128) {
        const int kk = base + lane;
        float s = -INFINITY;
        if (kk < k1) {
            if (!(pre && base == first)) {
                const uint4 *kp = reinterpret_cast<const uint4 *>(K + (int64_t)(kk % P.cap) * P.kstride);
                const bool cg = kk >= first_new;
#pragma unroll
                for (int c = 0; c < D / 8; c++) kv[c] = cg ? __ldcg(kp + c) : kp[c];
            }
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};   /* four chains a quarter as long */
#pragma unroll
            for (int c = 0; c < D / 8; c++) acc[c & 3] = dot8<KT>(qs + 8 * c, kv[c], acc[c & 3]);
            s = score_fix(P, (acc[0] + acc[1]) + (acc[2] + acc[3]));
        }
        const float pj = softmax_step(s, kk < k1, m, l, o);
        const int nk = min(32, k1 - base), slot0 = base % P.cap;
#pragma unroll
        for (int t0 = 0; t0 < 32; t0 += 16) {
            KT vv[16][VL];
#pragma unroll
            for (int t = 0; t < 16; t++) {
                const int r = min(t0 + t, nk - 1);   /* past the end: a valid row, weighted 0 */
                int slot = slot0 + r;
                while (slot >= P.cap) slot -= P.cap;
                ld_row<VL>(vv[t], V + (int64_t)slot * P.vstride + lane * VL, base + r >= first_new);
            }
#pragma unroll
            for (int t = 0; t < 16; t++) {
                const float pt = __shfl_sync(0xffffffffu, pj, t0 + t);
#pragma unroll
                for (int j = 0; j < VL; j++) o[j] = fmaf(pt, (float)vv[t][j], o[j]);
            }
        }
    }
    if (lane == 0) { wm[warp] = m; wl[warp] = l; }
#pragma unroll
    for (int j = 0; j < VL; j++) wo[warp][lane * VL + j] = o[j];
    __syncthreads();
    if constexpr (CL) combine_cluster(P, i, h, wm, wl, wo);
    else combine_warps(P, i, h, part, wm, wl, wo);
}

/* out[i, head h] = the splits' partial results merged (read past L1: other blocks wrote them). */
__device__ void merge_splits(const AttnP &P, int i, int h) {
    __shared__ float wgt[256];
    __shared__ float total;
    const float *pp = part_at(P, i, h, 0);
    const int S = P.n_splits, W = P.Dv + 2;
    if (threadIdx.x == 0) {
        float M;
        total = merge_weights(S, [&](int s) { return make_float2(__ldcg(pp + s * W), __ldcg(pp + s * W + 1)); }, wgt, M);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < P.Dv; c += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < S; s++)
            if (wgt[s] != 0.0f) v += __ldcg(pp + s * W + 2 + c) * wgt[s];
        st(P.out, i, (int64_t)h * P.Dv + c, v / total);
    }
}

/* The last split block of (i, h) to finish merges them all, and re-arms the counter for the next launch. */
__device__ void merge_if_last(const AttnP &P, int i, int h) {
    if (P.counters && last_to_arrive(P.counters + (int64_t)i * P.n_heads + h, P.n_splits)) merge_splits(P, i, h);
}

__global__ void attn_reduce_kernel(AttnP P) {
    pdl_wait();
    pdl_launch_next();
    merge_splits(P, blockIdx.y, blockIdx.x);
}

/* ---- prefill: tensor cores ---- */


__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* ---- decode, one block per KV head: the group's query heads (a warp each) share its K/V tiles ----
 * Keys go through shared memory 32 at a time, double-buffered with cp.async; lane j of each warp scores
 * key j of the tile for the warp's head, and the warp accumulates V with lanes across dimensions. The
 * first two tiles' rows that this pass did not write (positions below the pass's first) are fetched
 * before waiting for the kernel ahead, so their latency hides behind its tail. Only the splits that hold
 * keys run; with one, the block writes the output, else the last split of the KV head to finish merges. */

#define GT 32   /* keys per tile */

template <int D, int G, typename KT>
__global__ void __launch_bounds__(32 * G) attn_group_kernel(AttnP P) {
    constexpr int VL = D / 32, PR = D / 8;   /* V elements per lane; 16-byte pieces per row */
    __shared__ __align__(16) KT ks[2][GT][D + 8];   /* rows padded: lanes reading 8 rows at once hit 8 bank groups */
    __shared__ __align__(16) KT vs[2][GT][D];
    __shared__ __align__(16) float qs[G][D];
    const int split = blockIdx.x, kvh = blockIdx.y, i = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = kvh * G + warp;
    /* the pass's positions were written before the kernel ahead of this one started */
    const int first_new = query_pos0(P);
    const KeyRange kr = key_range(P, i, split, GT);
    const int nact = kr.n;
    if (split >= nact) return;
    const int k0 = kr.k0, k1 = kr.k1, ntiles = (k1 - k0 + GT - 1) / GT;
    const KT *K = (const KT *)P.k + (int64_t)kvh * D, *V = (const KT *)P.v + (int64_t)kvh * D;
    /* tile t into buffer t % 2: the rows of earlier passes (old 1), of this pass (old 0), or all (old -1);
     * rows past k1 repeat the last key, weighted 0 */
    auto load_tile = [&](int t, int old) {
        const int b = t & 1, base = k0 + t * GT;
        for (int e = threadIdx.x; e < 2 * GT * PR; e += 32 * G) {
            const int r = (e / PR) % GT, c = e % PR, key = min(base + r, k1 - 1);
            if (old >= 0 && (key < first_new) != (old == 1)) continue;
            const int64_t slot = key % P.cap;
            if (e < GT * PR) cp_async16(&ks[b][r][c * 8], K + slot * P.kstride + c * 8);
            else cp_async16(&vs[b][r][c * 8], V + slot * P.vstride + c * 8);
        }
    };
    const int first_tiles = min(ntiles, 2);
    for (int t = 0; t < first_tiles; t++) load_tile(t, 1);
    cp_async_commit();
    pdl_wait();
    pdl_launch_next();
    for (int t = 0; t < first_tiles; t++) load_tile(t, 0);
    cp_async_commit();
    float qv[VL];
#pragma unroll
    for (int j = 0; j < VL; j++) qv[j] = ld_elem(P.q, P.qdt, i * P.qstride + (int64_t)h * D + lane + 32 * j);
#pragma unroll
    for (int j = 0; j < VL; j++) qs[warp][lane + 32 * j] = qv[j] * P.scale;
    cp_async_wait<0>();
    __syncthreads();

    float m = -INFINITY, l = 0.0f, o[VL];
#pragma unroll
    for (int j = 0; j < VL; j++) o[j] = 0.0f;
    for (int t = 0; t < ntiles; t++) {
        if (t >= 2) {   /* tile t was committed two iterations ago */
            cp_async_wait<1>();
            __syncthreads();
        }
        const int b = t & 1, kk = k0 + t * GT + lane;
        float s = -INFINITY;
        if (kk < k1) {
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < PR; c++) acc = dot8<KT>(&qs[warp][8 * c], *reinterpret_cast<const uint4 *>(&ks[b][lane][c * 8]), acc);
            s = score_fix(P, acc);
        }
        const float pj = softmax_step(s, kk < k1, m, l, o);
#pragma unroll
        for (int r = 0; r < GT; r++) {
            const float pt = __shfl_sync(0xffffffffu, pj, r);
            KT vv[VL];
            if constexpr (VL == 4) *reinterpret_cast<uint2 *>(vv) = *reinterpret_cast<const uint2 *>(&vs[b][r][lane * VL]);
            else *reinterpret_cast<uint32_t *>(vv) = *reinterpret_cast<const uint32_t *>(&vs[b][r][lane * VL]);
#pragma unroll
            for (int j = 0; j < VL; j++) o[j] = fmaf(pt, (float)vv[j], o[j]);
        }
        if (t + 2 < ntiles) {
            __syncthreads();   /* buffer b is free */
            load_tile(t + 2, -1);
        }
        cp_async_commit();
    }

    if (nact == 1) {
#pragma unroll
        for (int j = 0; j < VL; j++) st(P.out, i, (int64_t)h * D + lane * VL + j, o[j] / l);
        return;
    }
    float *part = part_at(P, i, h, split);
    if (lane == 0) { part[0] = m; part[1] = l; }
#pragma unroll
    for (int j = 0; j < VL; j++) part[2 + lane * VL + j] = o[j];
    if (!last_to_arrive(P.counters + (int64_t)i * (P.n_heads / P.group) + kvh, nact)) return;
    /* the warp merges its head over the splits (at most 64: splits lane and lane + 32), reading past L1 */
    const float *pp = part_at(P, i, h, 0);
    const int W = D + 2;
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
    for (int s0 = 0; s0 < nact; s0 += 16) {   /* 16 splits' loads in flight */
        float ov[16][VL];
#pragma unroll
        for (int u = 0; u < 16; u++)
#pragma unroll
            for (int j = 0; j < VL; j++) ov[u][j] = s0 + u < nact ? __ldcg(pp + (s0 + u) * W + 2 + lane * VL + j) : 0.0f;
#pragma unroll
        for (int u = 0; u < 16; u++) {
            const int sp = s0 + u;
            const float w = __shfl_sync(0xffffffffu, sp < 32 ? ws[0] : ws[1], sp & 31);
#pragma unroll
            for (int j = 0; j < VL; j++) acc[j] = fmaf(w, ov[u][j], acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < VL; j++) st(P.out, i, (int64_t)h * D + lane * VL + j, acc[j] / L);
}

template <int D, int BC, int HPB>
constexpr size_t mma_smem() { return (size_t)(64 * HPB + 4 * BC) * (D + 8) * 2; }

template <int D, int BC, int HPB>
__global__ void __launch_bounds__(128 * HPB) attn_mma_kernel(AttnP P) {
    constexpr int LD = D + 8;   /* padded row: ldmatrix rows land in distinct banks */
    extern __shared__ __align__(16) unsigned char smem[];
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *Ks = Qs + 64 * HPB * LD, *Vs = Ks + 2 * BC * LD;
    const int qt = gridDim.x - 1 - blockIdx.x, h0 = blockIdx.y * HPB, split = blockIdx.z;   /* longest rows first */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int h = h0 + warp / 4, wr = warp % 4;   /* this warp's head, and its 16 rows of the 64 */
    pdl_wait();
    pdl_launch_next();
    const int pos0 = query_pos0(P), i0 = qt * 64, kvh = h0 / P.group;
    const int p_hi = pos0 + min(i0 + 63, P.n_q - 1);
    const int kb = first_key(P, pos0 + i0);
    const int chunk = split_chunk(p_hi + 1 - kb, P.n_splits, BC);
    const int k_begin = kb + split * chunk, k_end = min(p_hi + 1, k_begin + chunk);

    for (int idx = threadIdx.x; idx < HPB * 64 * D; idx += blockDim.x) {
        const int hb = idx / (64 * D), r = idx / D % 64, c = idx % D;
        const float v = i0 + r < P.n_q ? ld_elem(P.q, P.qdt, (int64_t)(i0 + r) * P.qstride + (int64_t)(h0 + hb) * D + c) : 0.0f;
        Qs[(hb * 64 + r) * LD + c] = __float2bfloat16_rn(v);
    }
    const __nv_bfloat16 *Kg = (const __nv_bfloat16 *)P.k + (int64_t)kvh * D, *Vg = (const __nv_bfloat16 *)P.v + (int64_t)kvh * D;
    auto load_kv = [&](int stage, int kt) {
        for (int idx = threadIdx.x; idx < BC * (D / 8); idx += blockDim.x) {
            const int r = idx / (D / 8), ch = idx % (D / 8), kp = kt + r;
            __nv_bfloat16 *dk = Ks + (stage * BC + r) * LD + ch * 8, *dv = Vs + (stage * BC + r) * LD + ch * 8;
            if (kp < k_end) {
                const int64_t slot = kp < P.cap ? kp : kp % P.cap;
                cp_async16(dk, Kg + slot * P.kstride + ch * 8);
                cp_async16(dv, Vg + slot * P.vstride + ch * 8);
            } else {   /* zeros, not garbage: a masked score's zero weight times NaN would be NaN */
                *reinterpret_cast<uint4 *>(dk) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4 *>(dv) = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };

    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    const int qp0 = pos0 + i0 + wr * 16 + g;   /* position of this thread's first row; the second is +8 */
    const float sl = P.softcap > 0 ? P.scale : P.scale * LOG2E;
    const __nv_bfloat16 *Qw = Qs + (warp / 4 * 64 + wr * 16) * LD;

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

        float s[BC / 8][4];
#pragma unroll
        for (int j = 0; j < BC / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[4];
            ldsm_x4(a, Qw + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < BC / 8; j += 2) {
                uint32_t b[4];
                const int mi = lane >> 3;
                ldsm_x4(b, Ks + (stage * BC + (j + (mi >> 1)) * 8 + (lane & 7)) * LD + kk * 16 + (mi & 1) * 8);
                mma_bf16(s[j], a, b[0], b[1]);
                mma_bf16(s[j + 1], a, b[2], b[3]);
            }
        }
        const int qw = qp0 - g;   /* the warp's rows are qw .. qw + 15: masking needed only on the tiles at their edges */
        const bool edge = kt + BC - 1 > qw || kt + BC > k_end || (P.window > 0 && kt <= qw + 15 - P.window);
#pragma unroll
        for (int j = 0; j < BC / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[j][e] * sl;
                if (P.softcap > 0) x = P.softcap * tanhf(x / P.softcap) * LOG2E;
                if (edge) {
                    const int kp = kt + j * 8 + tq * 2 + (e & 1), qp = qp0 + (e >> 1) * 8;
                    if (kp > qp || kp >= k_end || (P.window > 0 && kp <= qp - P.window)) x = -INFINITY;
                }
                s[j][e] = x;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < BC / 8; j++) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m_r[r], mx), base = mn == -INFINITY ? 0.0f : mn;
            const float corr = exp2f(m_r[r] - base);
            m_r[r] = mn;
            float ls = 0.0f;
#pragma unroll
            for (int j = 0; j < BC / 8; j++) {
                s[j][2 * r] = exp2f(s[j][2 * r] - base);
                s[j][2 * r + 1] = exp2f(s[j][2 * r + 1] - base);
                ls += s[j][2 * r] + s[j][2 * r + 1];
            }
            l_r[r] = l_r[r] * corr + ls;
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                o[n][2 * r] *= corr;
                o[n][2 * r + 1] *= corr;
            }
        }
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                   pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                uint32_t b[4];
                const int mi = lane >> 3;
                ldsm_x4_t(b, Vs + (stage * BC + kk * 16 + (mi & 1) * 8 + (lane & 7)) * LD + (n + (mi >> 1)) * 8);
                mma_bf16(o[n], a, b[0], b[1]);
                mma_bf16(o[n + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();
        stage ^= 1;
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
        const int i = i0 + wr * 16 + g + 8 * r;
        if (i >= P.n_q) continue;
        if (P.n_splits == 1) {
            const float inv = 1.0f / l_r[r];
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                const int64_t c = (int64_t)h * D + n * 8 + tq * 2;
                st(P.out, i, c, o[n][2 * r] * inv);
                st(P.out, i, c + 1, o[n][2 * r + 1] * inv);
            }
        } else {
            float *part = part_at(P, i, h, split);
            if (tq == 0) { part[0] = m_r[r]; part[1] = l_r[r]; }
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                part[2 + n * 8 + tq * 2] = o[n][2 * r];
                part[2 + n * 8 + tq * 2 + 1] = o[n][2 * r + 1];
            }
        }
    }
}

/* ---- host side ---- */

static bool use_mma(cf_tensor k, cf_tensor v, const cf_attn_args *a) {
    const int D = a->head_dim;
    return a->n_q >= 16 && k.dtype == CF_BF16 && v.dtype == CF_BF16 && D == a->v_head_dim && (D == 64 || D == 128 || D == 256) &&
           (uintptr_t)k.data % 16 == 0 && (uintptr_t)v.data % 16 == 0 && k.stride % 8 == 0 && v.stride % 8 == 0;
}

/* keys per tile: 32 for head size 256 (registers); for 128, cfk_cfg.attn_bc (64, or 32: more blocks per SM) */
static int mma_bc(int D) { return D == 256 ? 32 : D == 128 && cfk_cfg.attn_bc == 32 ? 32 : 64; }

/* query heads per block (sharing each K/V tile): cfk_cfg.attn_hpb, at most 2 for head size 256, and a
 * divisor of the GQA group */
static int mma_hpb(const cf_attn_args *a) {
    int hpb = a->head_dim == 256 && cfk_cfg.attn_hpb > 2 ? 2 : cfk_cfg.attn_hpb;
    while (hpb > 1 && (a->n_heads / a->n_kv_heads) % hpb) hpb /= 2;
    return hpb < 1 ? 1 : hpb;
}

/* the latency-tuned decode kernel: 16-bit caches, head size 64/128/256, 16-byte aligned rows */
static bool use_decode(cf_tensor k, cf_tensor v, const cf_attn_args *a) {
    const int D = a->head_dim;
    return k.dtype == v.dtype && (k.dtype == CF_BF16 || k.dtype == CF_F16) && D == a->v_head_dim && (D == 64 || D == 128 || D == 256) &&
           (uintptr_t)k.data % 16 == 0 && (uintptr_t)v.data % 16 == 0 && k.stride % 8 == 0 && v.stride % 8 == 0;
}

/* the GQA decode kernel: as use_decode, head size 64/128, groups of 2/4/8, a merge counter per (query, KV head) */
static bool use_group(cf_tensor k, cf_tensor v, const cf_attn_args *a) {
    const int g = a->n_heads / a->n_kv_heads;
    return cfk_cfg.attn_group && use_decode(k, v, a) && (a->head_dim == 64 || a->head_dim == 128) && (g == 2 || g == 4 || g == 8) &&
           (int64_t)a->n_q * a->n_kv_heads <= CFK_ATTN_COUNTERS;
}

static int n_splits(cf_tensor k, cf_tensor v, const cf_attn_args *a, int max_keys) {
    int64_t base, limit, cap;
    if (use_mma(k, v, a)) {
        base = ceil_div(a->n_q, 64) * (a->n_heads / mma_hpb(a));
        limit = ceil_div(max_keys, 4 * mma_bc(a->head_dim));
        cap = 64;
    } else if (use_group(k, v, a)) {
        base = (int64_t)a->n_q * a->n_kv_heads;
        limit = ceil_div(max_keys, GT);
        cap = cfk_cfg.attn_group_splits;
    } else {
        base = (int64_t)a->n_q * a->n_heads;
        limit = ceil_div(max_keys, use_decode(k, v, a) ? 128 : 32);
        cap = 256;
    }
    int64_t want = ceil_div(4 * (int64_t)cfk_cfg.n_sm, base);   /* 4 blocks per SM (8 or 16: slower decode at 4096 keys) */
    if (want > limit) want = limit;
    if (want > cap) want = cap;
    return want < 1 ? 1 : (int)want;
}

extern "C" size_t cfk_attention_scratch(cf_tensor k, cf_tensor v, const cf_attn_args *a, int max_keys) {
    int s = n_splits(k, v, a, max_keys);
    return s == 1 ? 0 : (size_t)a->n_q * a->n_heads * s * (a->v_head_dim + 2) * sizeof(float);
}

template <int D, int BC, int HPB>
static cudaError_t mma_attr() {
    return cudaFuncSetAttribute(attn_mma_kernel<D, BC, HPB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma_smem<D, BC, HPB>());
}

template <int D, int BC>
static cudaError_t mma_init() {
    cudaError_t e = mma_attr<D, BC, 1>();
    if (e == cudaSuccess) e = mma_attr<D, BC, 2>();
    if constexpr (D <= 128)
        if (e == cudaSuccess) e = mma_attr<D, BC, 4>();
    return e;
}

extern "C" cudaError_t cfk_init(void) {
    cudaError_t e = mma_init<64, 64>();
    if (e == cudaSuccess) e = mma_init<128, 64>();
    if (e == cudaSuccess) e = mma_init<128, 32>();
    if (e == cudaSuccess) e = mma_init<256, 32>();
    if (e == cudaSuccess) e = cfk_quant_init();
    return e;
}

template <int D, int BC>
static cudaError_t mma_launch(cudaStream_t st, dim3 grid, int hpb, const AttnP &P) {
    if constexpr (D <= 128)
        if (hpb == 4) return launch(attn_mma_kernel<D, BC, 4>, grid, dim3(512), mma_smem<D, BC, 4>(), st, P);
    if (hpb == 2) return launch(attn_mma_kernel<D, BC, 2>, grid, dim3(256), mma_smem<D, BC, 2>(), st, P);
    return launch(attn_mma_kernel<D, BC, 1>, grid, dim3(128), mma_smem<D, BC, 1>(), st, P);
}

template <int D, typename KT>
static cudaError_t group_launch_d(cudaStream_t st, dim3 grid, int g, const AttnP &P) {
    if (g == 2) return launch(attn_group_kernel<D, 2, KT>, grid, dim3(64), 0, st, P);
    if (g == 4) return launch(attn_group_kernel<D, 4, KT>, grid, dim3(128), 0, st, P);
    return launch(attn_group_kernel<D, 8, KT>, grid, dim3(256), 0, st, P);
}

static cudaError_t group_launch(cudaStream_t st, dim3 grid, cf_dtype dt, int D, int g, const AttnP &P) {
    if (dt == CF_BF16) return D == 64 ? group_launch_d<64, __nv_bfloat16>(st, grid, g, P) : group_launch_d<128, __nv_bfloat16>(st, grid, g, P);
    return D == 64 ? group_launch_d<64, __half>(st, grid, g, P) : group_launch_d<128, __half>(st, grid, g, P);
}

template <bool CL>
static cudaError_t decode_launch(cudaStream_t st, dim3 grid, cf_dtype dt, int D, const AttnP &P) {
    const unsigned cl = CL ? grid.x : 1;
    if (dt == CF_BF16) {
        if (D == 64) return launch_cluster(attn_decode_kernel<64, __nv_bfloat16, CL>, grid, dim3(128), 0, st, cl, P);
        if (D == 128) return launch_cluster(attn_decode_kernel<128, __nv_bfloat16, CL>, grid, dim3(128), 0, st, cl, P);
        return launch_cluster(attn_decode_kernel<256, __nv_bfloat16, CL>, grid, dim3(128), 0, st, cl, P);
    }
    if (D == 64) return launch_cluster(attn_decode_kernel<64, __half, CL>, grid, dim3(128), 0, st, cl, P);
    if (D == 128) return launch_cluster(attn_decode_kernel<128, __half, CL>, grid, dim3(128), 0, st, cl, P);
    return launch_cluster(attn_decode_kernel<256, __half, CL>, grid, dim3(128), 0, st, cl, P);
}

extern "C" cudaError_t cfk_attention(cudaStream_t st, cf_tensor out, cf_tensor q, cf_tensor k, cf_tensor v, const cf_attn_args *a,
                                     const int32_t *pos_dev, int max_keys, void *partial, int *counters) {
    AttnP P = {q.data, (int)q.dtype, q.stride, k.data, v.data, k.stride, v.stride, tv(out), (float *)partial, NULL, pos_dev,
               a->pos0, a->n_q, a->n_heads, a->n_heads / a->n_kv_heads, a->head_dim, a->v_head_dim, a->cap, a->window,
               n_splits(k, v, a, max_keys), a->scale, a->softcap};
    if (a->head_dim > CFK_ATTN_MAX_D || a->v_head_dim > CFK_ATTN_MAX_D) return cudaErrorInvalidValue;
    cudaError_t e;
    const bool mma = use_mma(k, v, a);
    if (!mma && (int64_t)a->n_q * a->n_heads <= CFK_ATTN_COUNTERS) P.counters = counters;
    if (mma) {
        const int hpb = mma_hpb(a);
        dim3 grid((unsigned)ceil_div(a->n_q, 64), (unsigned)(a->n_heads / hpb), (unsigned)P.n_splits);
        if (a->head_dim == 64) e = mma_launch<64, 64>(st, grid, hpb, P);
        else if (a->head_dim == 128 && mma_bc(128) == 32) e = mma_launch<128, 32>(st, grid, hpb, P);
        else if (a->head_dim == 128) e = mma_launch<128, 64>(st, grid, hpb, P);
        else e = mma_launch<256, 32>(st, grid, hpb, P);
    } else if (use_group(k, v, a)) {
        P.counters = counters;
        dim3 grid((unsigned)P.n_splits, (unsigned)a->n_kv_heads, (unsigned)a->n_q);
        return group_launch(st, grid, k.dtype, a->head_dim, P.group, P);
    } else if (use_decode(k, v, a)) {
        dim3 grid((unsigned)P.n_splits, (unsigned)a->n_heads, (unsigned)a->n_q);
        if (cfk_cfg.attn_cluster && P.n_splits > 1 && P.n_splits <= 8) return decode_launch<true>(st, grid, k.dtype, a->head_dim, P);
        e = decode_launch<false>(st, grid, k.dtype, a->head_dim, P);
    } else {
        if (k.dtype != v.dtype || (k.dtype != CF_BF16 && k.dtype != CF_F16 && k.dtype != CF_F32)) return cudaErrorInvalidValue;
        const size_t es = cf_dtype_size(k.dtype);
        const bool vec = a->head_dim % 8 == 0 && (uintptr_t)k.data % 16 == 0 && (k.stride * es) % 16 == 0 && (a->head_dim * es) % 16 == 0;
        dim3 grid((unsigned)P.n_splits, (unsigned)a->n_heads, (unsigned)a->n_q);
        if (k.dtype == CF_BF16) e = launch(attn_split_kernel<__nv_bfloat16>, grid, dim3(128), 0, st, P, vec);
        else if (k.dtype == CF_F16) e = launch(attn_split_kernel<__half>, grid, dim3(128), 0, st, P, vec);
        else e = launch(attn_split_kernel<float>, grid, dim3(128), 0, st, P, vec);
    }
    if (e != cudaSuccess || P.n_splits == 1 || P.counters) return e;
    return launch(attn_reduce_kernel, dim3((unsigned)a->n_heads, (unsigned)a->n_q), dim3(128), 0, st, P);
}
