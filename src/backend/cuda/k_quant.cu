/* k_quant.cu: the kernels for MLX affine-quantized weights kept packed on the GPU (4 and 8 bits, groups 32, 64,
 * 128; the device layout is cuda_internal.h's cfk_qjob comment): the decode GEMV (few activation rows), the
 * tensor-core GEMM for batched decode and short prefills (packed tiles staged by cp.async, dequantized in registers
 * into mma.sync fragments, f32 accumulation, split-k partials summed by an epilogue kernel), the whole-matrix
 * dequantizer for the cuBLAS path of long prefills, and the embedding gather from a quantized table.
 *
 * Values: w = scale * q + bias per group of `group` values along a row; value c of a row is bits [c * bits,
 * (c + 1) * bits) of the row's little-endian word stream (base/qweight.h). A 16-byte chunk of a row holds 128 / bits
 * values (32 or 16), always inside one group (groups are 32, 64, 128 values and chunks start at multiples of 16
 * bytes). */
#include "backend/cuda/k_gemv.cuh"
#include "backend/cuda/k_quant.cuh"

#include <cooperative_groups.h>

/* ---- common ---- */

/* One product of a job as the kernels see it: packed rows of wpr words, (scale, bias) pairs of dtype sbt, G pairs
 * a row. block0: the first block of this product in the launch (qgemv_tc_kernel: its first unit). */
struct QSeg {
    const uint32_t *q;
    const void *sb;
    int sbt, group, gsh;   /* gsh = log2(group) */
    int64_t d, wpr, G, block0;
    TV out, bias;
    int rope;   /* qgemv_tc_kernel: turn this product's heads (RoPE; rows j and j + half in one unit) */
    TV cache;   /* qgemv_tc_kernel: store the rows (as out holds them) to this KV cache too */
};

struct QArgs {
    const void *x;
    int64_t xstride, k;
    int n, ks, nseg, act;
    QSeg s0, s1, s2;
    TV glu, mul;   /* .p NULL: none */
    /* the tensor-core kernel only */
    int splits, ksteps;
    float *part;          /* split-k partial sums: product s at part + poff[s], [splits][n][d] */
    int64_t poff0, poff1, poff2;
    /* the tensor-core GEMV's fold (cfk_qjob): positions, frequencies, half a head, the store's slots */
    TV pos, store_pos;
    const float *inv_freq;
    int half, pos0, cap;
};

/* (scale, bias) pair i of a row-major pair array of dtype t */
__device__ __forceinline__ float2 ld_sb(const void *sb, int t, int64_t i) {
    if (t == CF_F32) return __ldg((const float2 *)sb + i);
    return tc_sb(__ldg((const unsigned int *)sb + i), t == CF_F16);
}

/* V values of x (f32 or bf16) as floats */
template <int V, typename XT>
__device__ __forceinline__ void load_x(const XT *p, float (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V / 8; i++) {
        float t[8];
        load8(p + 8 * i, t);
#pragma unroll
        for (int e = 0; e < 8; e++) f[8 * i + e] = t[e];
    }
}

/* ---- GEMV: few activation rows ---- */

/* Each warp takes a unit of QR = 4 weight rows (four neighbours of one product; for the GLU, rows 2u, 2u + 1 of gate
 * and of up), or ks warps of one block split a unit's chunks. Lane l of sub-warp s reads chunks s * 32 + l +
 * i * 32 * ks of each of the unit's rows with 16-byte streaming loads, two chunks a row in flight; for each
 * activation row r it loads the chunk's x values once for the four weight rows and adds
 * scale * sum(x q) + bias * sum(x) (the bias folded per chunk). f32 throughout. The 4 x NX sums are then reduced
 * over the warp (and the ks warps through shared memory), and lane r * 4 + s finishes row s for activation row r. */
constexpr int QR = 4;

template <int NX, int BITS, typename XT>
__global__ void __launch_bounds__(128) qgemv_kernel(QArgs g) {
    constexpr int V = 128 / BITS;   /* values a chunk */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int upb = 4 / g.ks, t = warp / g.ks, sub = warp % g.ks;
    const bool glu = g.glu.p != nullptr;
    const int si = glu ? 0 : (g.nseg > 2 && (int64_t)blockIdx.x >= g.s2.block0) ? 2 : (g.nseg > 1 && (int64_t)blockIdx.x >= g.s1.block0) ? 1 : 0;
    const QSeg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const int64_t unit = ((int64_t)blockIdx.x - S.block0) * upb + t;

    /* slots 0, 1 of a GLU unit are gate rows (S), 2, 3 up rows (g.s1); otherwise every slot is a row of S */
    const QSeg &UP = glu ? g.s1 : S;
    const uint32_t *wrow[QR];
    int64_t sbrow[QR];
    bool ok[QR];
#pragma unroll
    for (int s = 0; s < QR; s++) {
        const bool up = s >= 2;
        const int64_t row = glu ? unit * 2 + (s & 1) : unit * QR + s;
        ok[s] = row < (up ? UP.d : S.d);
        const int64_t rr = ok[s] ? row : 0;
        wrow[s] = (up ? UP.q : S.q) + rr * (up ? UP.wpr : S.wpr);
        sbrow[s] = rr * (up ? UP.G : S.G);
    }
    const void *const sbpA = S.sb, *const sbpB = UP.sb;
    const int sbtA = S.sbt, sbtB = UP.sbt, gshA = S.gsh, gshB = UP.gsh;
    float acc[NX][QR];
#pragma unroll
    for (int r = 0; r < NX; r++)
#pragma unroll
        for (int s = 0; s < QR; s++) acc[r][s] = 0.0f;

    const XT *x = (const XT *)g.x;
    const int64_t nch = g.k * BITS / 128, step = 32 * (int64_t)g.ks;

    auto use = [&](int64_t c, const uint4 (&wv)[QR], const float2 (&sb)[QR]) {
#pragma unroll
        for (int r = 0; r < NX; r++) {
            if (r >= g.n) break;
            float xf[V];
            load_x<V>(x + r * g.xstride + c * V, xf);
            float sx = 0.0f;
#pragma unroll
            for (int e = 0; e < V; e++) sx += xf[e];
#pragma unroll
            for (int s = 0; s < QR; s++) {
                float dq;
                if constexpr (BITS == 4) dq = dot_q4(wv[s], xf);
                else dq = dot_q8(wv[s], xf);
                acc[r][s] = fmaf(sb[s].x, dq, fmaf(sb[s].y, sx, acc[r][s]));
            }
        }
    };
    /* chunks c and c + step of each row (two in flight), with their (scale, bias) pairs */
    uint4 w1[QR], w2[QR];
    float2 sb1[QR], sb2[QR];
    auto fetch = [&](int64_t c) {
        const int64_t c2 = c + step;
        const bool has1 = c < nch, has2 = c2 < nch;
#pragma unroll
        for (int s = 0; s < QR; s++) {
            w1[s] = ok[s] && has1 ? ld_stream(reinterpret_cast<const uint4 *>(wrow[s]) + c) : make_uint4(0, 0, 0, 0);
            w2[s] = ok[s] && has2 ? ld_stream(reinterpret_cast<const uint4 *>(wrow[s]) + c2) : make_uint4(0, 0, 0, 0);
            const void *sbp = s >= 2 ? sbpB : sbpA;
            const int sbt = s >= 2 ? sbtB : sbtA, gsh = s >= 2 ? gshB : gshA;
            sb1[s] = ok[s] && has1 ? ld_sb(sbp, sbt, sbrow[s] + ((c * V) >> gsh)) : make_float2(0.0f, 0.0f);
            sb2[s] = ok[s] && has2 ? ld_sb(sbp, sbt, sbrow[s] + ((c2 * V) >> gsh)) : make_float2(0.0f, 0.0f);
        }
    };
    /* the first weights before waiting for the kernel ahead (weights are never written by it: k_gemv.cuh), so their
     * latency overlaps its tail; x only after */
    const int64_t c0 = sub * 32 + lane;
    fetch(c0);
    pdl_wait();
    pdl_launch_next();
    for (int64_t c = c0; c < nch; c += 2 * step) {
        if (c != c0) fetch(c);
        use(c, w1, sb1);
        if (c + step < nch) use(c + step, w2, sb2);
    }

    /* lane r * QR + s keeps sum (r, s) */
    float val = 0.0f;
#pragma unroll
    for (int r = 0; r < NX; r++)
#pragma unroll
        for (int s = 0; s < QR; s++) {
            const float v = warp_sum(acc[r][s]);
            if (lane == r * QR + s) val = v;
        }
    if (g.ks > 1) {
        __shared__ float red[4][32];
        red[warp][lane] = val;
        __syncthreads();
        if (sub != 0) return;
        val = 0.0f;
        for (int i = 0; i < g.ks; i++) val += red[warp + i][lane];
    }
    const float up_val = __shfl_down_sync(0xffffffffu, val, 2);   /* glu: up row s of lane r * QR + s (s < 2) */
    const int r = lane / QR, s = lane % QR;
    if (r >= NX || r >= g.n) return;
    if (glu) {
        const int64_t j = unit * 2 + s;
        if (s >= 2 || j >= S.d) return;
        st(g.glu, r, j, act_fn(g.act, val) * up_val);
        return;
    }
    const int64_t j = unit * QR + s;
    if (j >= S.d) return;
    float v = val + (S.bias.p ? ld(S.bias, 0, j) : 0.0f);
    if (g.mul.p) v = act_fn(g.act, v) * ld(g.mul, r, j);
    st(S.out, r, j, v);
}

/* ---- tensor-core GEMV: 4- or 8-bit weights, bf16 x, at most 8 activation rows ---- */

/* A block of TC_WARPS warps takes a unit of TC_ROWS = 15 weight rows as MMA rows 0-14 (GLU: TC_GLU_ROWS = 7 gate rows
 * as MMA rows 0-6 and the same up rows as rows 8-14; row 7 idle), MMA row 15 being the sum row (k_quant.cuh), the
 * k-blocks (TC_KB values) of its range dealt to its warps in turn. Each thread loads its own words straight into
 * registers (no shared memory, no barrier): in every group, thread (g, t) takes quarter t of the group's words of MMA
 * rows g and g + 8 (k_quant.cuh's tc_* mapping: a quad's MMA stays inside a group), with the group's (scale, bias)
 * word of both rows, 3 (8 bits: 2) k-blocks in flight a warp; and the same values of x of activation row g through L1
 * (row n - 1 again for g >= n: those MMA columns are never stored). Each word is two MMAs on 128 + q (8 bits:
 * 128 + lo and 16 (128 + hi)), the words of a group alternating between two accumulator chains; at each group's end
 * the chains are added, the sum row's results (lanes 28-31) shuffled to every quad, and tc_group_end applies scale
 * and bias in f32 (the pairs' dtype, F16 or bf16, is a template parameter). The sum row costs a sixteenth of the MMAs
 * where an all-ones MMA beside each one cost half. The warps' sums meet in shared memory in warp order; warp 0
 * finishes (bias, GLU, gate).
 * RoPE (the qkv fold): a product whose heads turn takes 7 pairs (j, j + half) of one head a unit, as MMA rows 0-6 and
 * 8-14 like the GLU's (gate, up), so warp 0 turns each pair where it finishes the rows; a product with a KV cache also
 * stores its rows there as out holds them.
 * Split k: when the units are so few that twice the blocks still run in one wave (o and down of Llama-3-8B), a cluster
 * of g.splits blocks shares a unit, block z taking k-blocks [z nkb / splits, (z + 1) nkb / splits); their sums meet in
 * block 0's shared memory in block order (the result does not depend on timing), and block 0 finishes. */
constexpr int TC_WARPS = 4, TC_KB = 128, TC_ROWS = 15, TC_GLU_ROWS = 7;
/* blocks an SM the kernel is compiled for: 5 at groups 64 and 128 (92-96 registers), 4 at group 32, which would
 * spill at 5. Five let o and down of Llama-3-8B (274 units) split k over 2 blocks within one wave (qgemv_tc). */
#define TC_MIN_BLOCKS(G) ((G) == 32 ? 4 : 5)

/* N consecutive 32-bit words of a stream read once (N * 4-byte aligned) into d where ok; elsewhere d keeps its value */
template <int N>
__device__ __forceinline__ void ld_words(const uint32_t *p, bool ok, uint32_t *d) {
    if constexpr (N == 1) {
        if (ok) asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "+r"(d[0]) : "l"(p));
    } else if constexpr (N == 2) {
        if (ok) asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "+r"(d[0]), "+r"(d[1]) : "l"(p));
    } else {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            if (ok) asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]) : "l"(p + i));
    }
}

template <int BITS, int G, bool F16>
__global__ void __launch_bounds__(TC_WARPS * 32, TC_MIN_BLOCKS(G)) qgemv_tc_kernel(QArgs g) {
    constexpr int TC_RING = BITS == 4 ? 3 : 2;   /* k-blocks in flight a warp: 3 or 4 KB of weights */
    constexpr int WKB = TC_KB * BITS / 32;   /* words of a row in a k-block: 16 or 32 */
    constexpr int NG = TC_KB / G;            /* groups in a k-block */
    constexpr int WG = G * BITS / 32;        /* words of a row in a group */
    constexpr int QW = WG / 4;               /* a thread's words of a row in a group */
    constexpr int VPW = 32 / BITS;           /* values a word */
    constexpr float OFF = BITS == 4 ? 128.0f : 2176.0f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, t = lane & 3;
    const bool glu = g.glu.p != nullptr;
    const int64_t cu = (int64_t)(blockIdx.x / (unsigned)g.splits);   /* the unit over all products */
    const int si = glu ? 0 : (g.nseg > 2 && cu >= g.s2.block0) ? 2 : (g.nseg > 1 && cu >= g.s1.block0) ? 1 : 0;
    const QSeg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const QSeg B = glu ? g.s1 : S;   /* MMA rows 8-15 */
    const int split = (int)(blockIdx.x % (unsigned)g.splits);
    const int64_t unit = cu - S.block0;
    /* weight rows of MMA rows g (side A, product S) and g + 8 (side B); MMA row 15 (and the GLU's row 7) none. RoPE:
     * pair p = unit * 7 + g of the product's rows (j, j + half) of one head, as the GLU's (gate, up) */
    const bool rp = !glu && S.rope, paired = glu || rp;
    const int64_t pr = unit * TC_GLU_ROWS + gi;
    const int64_t rowA = glu ? pr : rp ? pr / g.half * 2 * g.half + pr % g.half : unit * TC_ROWS + gi;
    const int64_t rowB = glu ? pr : rp ? rowA + g.half : unit * TC_ROWS + 8 + gi;
    const bool sum_row = gi == TC_ROWS - 8;   /* this thread's side-B row is MMA row 15 */
    const bool okA = gi < (paired ? TC_GLU_ROWS : 8) && (rp ? pr < S.d / 2 : rowA < S.d), okB = !sum_row && (rp ? okA : rowB < B.d);
    const uint32_t hiB = sum_row ? 0u : TC_HI8;   /* the sum row's second MMA adds nothing */
    const int nkb = (int)(g.k / TC_KB), kb0 = (int)((int64_t)split * nkb / g.splits) + warp;
    const int kb_end = (int)((int64_t)(split + 1) * nkb / g.splits);
    const int mine = kb_end > kb0 ? (kb_end - kb0 + TC_WARPS - 1) / TC_WARPS : 0;   /* this warp's k-blocks */

    /* the ring of k-blocks in flight; a row that does not exist (and the sum row) is never loaded, so its registers
     * keep the zeros they start with. Each fetch takes the warp's next k-block (fa, fb: this thread's words of rows A
     * and B in it; fsa, fsb: their pairs), each use the oldest. */
    uint32_t wa[TC_RING][NG * QW], wb[TC_RING][NG * QW], sa[TC_RING][NG], sb[TC_RING][NG];
    const uint32_t *fa = S.q + (okA ? rowA : 0) * S.wpr + t * QW + (int64_t)kb0 * WKB;
    const uint32_t *fb = B.q + (okB ? rowB : 0) * B.wpr + t * QW + (int64_t)kb0 * WKB;
    const uint32_t *fsa = (const uint32_t *)S.sb + (okA ? rowA : 0) * S.G + (int64_t)kb0 * NG;
    const uint32_t *fsb = (const uint32_t *)B.sb + (okB ? rowB : 0) * B.G + (int64_t)kb0 * NG;
    /* x of activation row min(g, n - 1): MMA columns from n on are never stored, so they need not be zero */
    const __nv_bfloat16 *xp0 = (const __nv_bfloat16 *)g.x + (int64_t)(gi < g.n ? gi : g.n - 1) * g.xstride + t * (G / 4) + (int64_t)kb0 * TC_KB;
    auto fetch = [&](int r) {
#pragma unroll
        for (int i = 0; i < NG; i++) {
            ld_words<QW>(fa + i * WG, okA, &wa[r][i * QW]);
            ld_words<QW>(fb + i * WG, okB, &wb[r][i * QW]);
        }
        ld_words<NG>(fsa, okA, sa[r]);
        ld_words<NG>(fsb, okB, sb[r]);
        fa += TC_WARPS * WKB;
        fb += TC_WARPS * WKB;
        fsa += TC_WARPS * NG;
        fsb += TC_WARPS * NG;
    };

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    auto use = [&](int r) {
#pragma unroll
        for (int i = 0; i < NG; i++) {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < QW; j++) {
                float (&cc)[4] = j & 1 ? c2 : c;   /* two chains of MMAs, half as long */
                const __nv_bfloat16 *xp = xp0 + i * G + j * VPW;
                uint32_t pa[4], pb[4], xq[4], a[4], bx[2];
                if constexpr (BITS == 4) {
                    const uint4 xv = __ldg(reinterpret_cast<const uint4 *>(xp));
                    tc_wpairs(wa[r][i * QW + j], pa);
                    tc_wpairs(wb[r][i * QW + j], pb);
                    tc_xpairs(xv, xq);
#pragma unroll
                    for (int s = 0; s < 2; s++) {
                        tc_frags(pa, pb, xq, s, a, bx);
                        mma_bf16(cc, a, bx[0], bx[1]);
                    }
                } else {
                    const uint2 xv = __ldg(reinterpret_cast<const uint2 *>(xp));
                    tc_wpairs8(wa[r][i * QW + j], pa, TC_HI8);
                    tc_wpairs8(wb[r][i * QW + j], pb, hiB);
                    tc_xpairs8(xv, xq);
                    tc_frags(pa, pb, xq, 0, a, bx);
                    mma_bf16(cc, a, bx[0], bx[1]);
                    tc_frags(pa, pb, xq, 1, a, bx);
                    mma_bf16(cc, a, bx[0], bx[1]);
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e++) c[e] += c2[e];
            const float s0 = __shfl_sync(0xffffffffu, c[2], 28 + t), s1 = __shfl_sync(0xffffffffu, c[3], 28 + t);
            tc_group_end(acc, c, s0, s1, tc_sb(sa[r][i], F16), tc_sb(sb[r][i], F16), OFF);
        }
        xp0 += TC_WARPS * TC_KB;
    };

    /* the first k-blocks' weights before waiting for the kernel ahead (weights are never written by it: k_gemv.cuh);
     * x after */
#pragma unroll
    for (int r = 0; r < TC_RING; r++) {
#pragma unroll
        for (int i = 0; i < NG * QW; i++) wa[r][i] = wb[r][i] = 0;
#pragma unroll
        for (int i = 0; i < NG; i++) sa[r][i] = sb[r][i] = 0;
        if (r < mine) fetch(r);
    }
    pdl_wait();
    pdl_launch_next();
    for (int base = 0; base < mine; base += TC_RING) {
#pragma unroll
        for (int r = 0; r < TC_RING; r++) {
            const int idx = base + r;
            if (idx >= mine) break;
            use(r);
            if (idx + TC_RING < mine) fetch(r);
        }
    }

    __shared__ float red[TC_WARPS][4][32];
#pragma unroll
    for (int e = 0; e < 4; e++) red[warp][e][lane] = acc[e];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float v = 0.0f;
            for (int w = 0; w < TC_WARPS; w++) v += red[w][e][lane];
            acc[e] = v;
            red[0][e][lane] = v;   /* the block's sums, for block 0 of the cluster */
        }
    }
    if (g.splits > 1) {
        /* every thread of every block takes part in both cluster barriers: block 0 reads the others' sums after the
         * first, and they keep their shared memory until the second */
        namespace cg = cooperative_groups;
        cg::cluster_group cl = cg::this_cluster();
        cl.sync();
        if (split == 0 && warp == 0)
            for (int z = 1; z < g.splits; z++) {
                const float *r = cl.map_shared_rank(&red[0][0][0], z);
#pragma unroll
                for (int e = 0; e < 4; e++) acc[e] += r[e * 32 + lane];
            }
        cl.sync();
    }
    if (warp != 0 || split != 0) return;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = 2 * t + e;   /* activation row */
        if (r >= g.n) continue;
        if (glu) {
            if (okA) st(g.glu, r, rowA, act_fn(g.act, acc[e]) * acc[2 + e]);
            continue;
        }
        float va = acc[e] + (okA && S.bias.p ? ld(S.bias, 0, rowA) : 0.0f), vb = acc[2 + e] + (okB && S.bias.p ? ld(S.bias, 0, rowB) : 0.0f);
        if (rp && okA) rope_turn(va, vb, g.pos, r, g.inv_freq[rowA % (2 * g.half)]);   /* (x_j, x_j+half) */
        if (g.mul.p) {
            if (okA) va = act_fn(g.act, va) * ld(g.mul, r, rowA);
            if (okB) vb = act_fn(g.act, vb) * ld(g.mul, r, rowB);
        }
        if (okA) st(S.out, r, rowA, va);
        if (okB) st(S.out, r, rowB, vb);
        if (S.cache.p) {   /* the rounded values, as a store reading out would see them */
            const int64_t slot = kv_slot(g.store_pos, g.pos0, g.cap, r);
            if (okA) st(S.cache, slot, rowA, ld(S.out, r, rowA));
            if (okB) st(S.cache, slot, rowB, ld(S.out, r, rowB));
        }
    }
}

/* ---- tensor-core GEMM: more activation rows ---- */

/* Block tile: MB activation rows x NB weight rows (for the GLU, NB / 2 gate rows and the same up rows); the tile's
 * sums go through shared memory [MB][LDC] to qmma_store. Split k (blockIdx.z) over `splits` ranges of stages when the
 * tiles are too few to fill the GPU: then each split writes f32 partial sums and qmma_epilogue adds them. */
constexpr int MB = 64, NB = 128, LDC = NB + 4;
constexpr size_t QM_C_BYTES = (size_t)MB * LDC * 4;

/* The end of a GEMM block: its tile of sums Cs [MB][LDC] (activation rows m0 .., tile columns jt0 ..) goes out with
 * the bias, the GLU or the gate, or (splits > 1) to split z's partial sums */
__device__ void qmma_store(const QArgs &g, const QSeg &S, int si, int64_t jt0, int64_t m0, int z, const float *Cs) {
    const bool glu = g.glu.p != nullptr;
    const int64_t poff = si == 0 ? g.poff0 : si == 1 ? g.poff1 : g.poff2;
    for (int idx = threadIdx.x; idx < MB * NB; idx += blockDim.x) {
        const int r = idx / NB, i = idx % NB;
        const int64_t m = m0 + r;
        if (m >= g.n) continue;
        const float c = Cs[r * LDC + i];
        if (glu) {
            const bool is_up = i >= NB / 2;
            const int64_t j = jt0 + (is_up ? i - NB / 2 : i);
            if (j >= S.d) continue;
            if (g.splits > 1) {
                g.part[(is_up ? g.poff1 : g.poff0) + ((int64_t)z * g.n + m) * S.d + j] = c;
            } else if (!is_up) {
                st(g.glu, m, j, act_fn(g.act, c) * Cs[r * LDC + i + NB / 2]);
            }
            continue;
        }
        const int64_t j = jt0 + i;
        if (j >= S.d) continue;
        if (g.splits > 1) {
            g.part[poff + ((int64_t)z * g.n + m) * S.d + j] = c;
            continue;
        }
        float v = c + (S.bias.p ? ld(S.bias, 0, j) : 0.0f);
        if (g.mul.p) v = act_fn(g.act, v) * ld(g.mul, m, j);
        st(S.out, m, j, v);
    }
}

/* The GEMM kernel (bf16 x; f32 x is rounded to bf16 in scratch first). A stage is QA_K = 128 values of k: the x tile
 * (bf16), the packed rows and their (scale, bias) pairs come into shared memory by cp.async, QA_STAGES - 1 stages
 * ahead (the weights' copies issued before waiting for the kernel ahead). The 8 warps sit side by side along the
 * weight rows: warp w takes rows 16w .. 16w + 15 for all 64 activation rows, so every weight value is dequantized
 * once a block, in registers, straight into an m16n8k16 B fragment: thread (g, t) of a warp needs values 2t, 2t + 1
 * and 2t + 8, 2t + 9 of its row g of a k16 step (at 4 bits: byte t of the step's two words). x's A fragments come
 * by ldmatrix, for the m16 tiles the job's rows need (1, 2 or 4: the kernel's MT). Values: w = scale * q + bias
 * rounded to bf16 (4 bits with bf16 pairs: one bf16x2 FMA on the exact q; otherwise fmaf in f32), f32 sums. */
constexpr int QA_K = 128, QA_STAGES = 3, QA_THREADS = 256;
constexpr int QA_XLD = QA_K + 8;   /* bf16 an x row in shared memory: 272 bytes, so ldmatrix's 8 rows hit distinct banks */
constexpr int QA_SB = 32;          /* bytes of (scale, bias) pairs a weight row and stage: at most 4 groups of 8 bytes */
constexpr int QA_XBYTES = MB * QA_XLD * 2;
template <int BITS>
__host__ __device__ constexpr int qa_wld() { return QA_K * BITS / 8 + 16; }   /* bytes a packed row and stage, plus 16 (distinct banks) */
template <int BITS>
__host__ __device__ constexpr int qa_stage() { return QA_XBYTES + NB * qa_wld<BITS>() + NB * QA_SB; }
template <int BITS>
constexpr size_t qa_smem() { return (size_t)QA_STAGES * qa_stage<BITS>() > QM_C_BYTES ? (size_t)QA_STAGES * qa_stage<BITS>() : QM_C_BYTES; }

/* a 16- or 4-byte copy that writes zeros where !ok (src must still be a valid address) */
__device__ __forceinline__ void cp16z(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp4z(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0));
}

/* (scale, bias) pair i of a stage's pairs of dtype t in shared memory, as floats */
__device__ __forceinline__ float2 qa_pair(const unsigned char *p, int t, int i) {
    if (t == CF_F32) return reinterpret_cast<const float2 *>(p)[i];
    return tc_sb(reinterpret_cast<const uint32_t *>(p)[i], t == CF_F16);
}

/* byte t of w (4 bits, sel = qa_sel(t)) as the bf16 pair scale * q + bias: one bf16x2 FMA on the exact q, from the
 * pair word u (bf16 scale low, bias high) */
__device__ __forceinline__ uint32_t qa_deq4h(uint32_t w, uint32_t sel, uint32_t u) {
    const uint32_t q = qa_nibbles(w, sel), s = __byte_perm(u, u, 0x1010), b = __byte_perm(u, u, 0x3232), c128 = 0x43004300u;
    __nv_bfloat162 qv, s2, b2, k;
    memcpy(&qv, &q, 4);
    memcpy(&s2, &s, 4);
    memcpy(&b2, &b, 4);
    memcpy(&k, &c128, 4);
    const __nv_bfloat162 r = __hfma2(__hsub2(qv, k), s2, b2);
    uint32_t o;
    memcpy(&o, &r, 4);
    return o;
}

/* HSB: 4 bits with bf16 pairs in every product, the bf16x2 dequantization. MT: the m16 tiles of activation rows the
 * block multiplies (1, 2 or 4: at most 16, 32 or 64 rows in its tile), fixed at compile time so that a k16 step's
 * MMAs are straight-line code, with the next step's fragments made before them. 4 bits: at most 128 registers, 2
 * blocks an SM (as their shared memory allows). */
template <int BITS, bool HSB, int MT>
__global__ void __launch_bounds__(QA_THREADS, BITS == 4 ? 2 : 1) qmma_async_kernel(QArgs g) {
    extern __shared__ __align__(128) unsigned char qa_smem_buf[];
    constexpr int WLD = qa_wld<BITS>(), STAGE = qa_stage<BITS>(), CPR = QA_K * BITS / 128;   /* 16-byte chunks a row and stage */
    constexpr int WROWS = NB * CPR / QA_THREADS;                                               /* weight rows a thread copies */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
    const bool glu = g.glu.p != nullptr;
    const int si = glu ? 0 : (g.nseg > 2 && (int64_t)blockIdx.x >= g.s2.block0) ? 2 : (g.nseg > 1 && (int64_t)blockIdx.x >= g.s1.block0) ? 1 : 0;
    const QSeg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const QSeg &UP = glu ? g.s1 : S;
    const int64_t jt0 = ((int64_t)blockIdx.x - S.block0) * (glu ? NB / 2 : NB);
    const int64_t m0 = (int64_t)blockIdx.y * MB;
    const int z = blockIdx.z;
    const int kb = (int)((int64_t)z * g.ksteps / g.splits), ke = (int)((int64_t)(z + 1) * g.ksteps / g.splits);
    /* the (scale, bias) layout of this warp's rows (for the GLU warps 0-3 hold gate rows, 4-7 up rows) */
    const QSeg &WS = glu && warp >= 4 ? UP : S;
    const int sbt = WS.sbt, gsh = WS.gsh;

    /* what this thread copies: weight rows tid / CPR + i * (QA_THREADS / CPR), chunk tid % CPR; x rows tid / 16 + 16 i,
     * chunk tid % 16; the pairs of tile row tid (tid < NB) */
    const uint32_t *wsrc[WROWS];
    bool wok[WROWS];
#pragma unroll
    for (int i = 0; i < WROWS; i++) {
        const int r = tid / CPR + i * (QA_THREADS / CPR);
        const bool up = glu && r >= NB / 2;
        const int64_t row = jt0 + (up ? r - NB / 2 : r);
        wok[i] = row < (up ? UP.d : S.d);
        wsrc[i] = (up ? UP.q : S.q) + (wok[i] ? row : 0) * (up ? UP.wpr : S.wpr) + (tid % CPR) * 4;
    }
    const unsigned char *sbsrc = nullptr;
    bool sbok = false;
    int64_t sbbytes = 0;   /* of the row's pairs */
    int pb = 4, pgsh = 5;   /* bytes a pair, log2(group) of the row */
    if (tid < NB) {
        const bool up = glu && tid >= NB / 2;
        const QSeg &R = up ? UP : S;
        const int64_t row = jt0 + (up ? tid - NB / 2 : tid);
        sbok = row < R.d;
        pb = R.sbt == CF_F32 ? 8 : 4;
        pgsh = R.gsh;
        sbbytes = R.G * pb;
        sbsrc = (const unsigned char *)R.sb + (sbok ? row : 0) * sbbytes;
    }
    const int sbu = ((QA_K >> pgsh) * pb) / 4;   /* 4-byte words of pairs a row and stage */
    const __nv_bfloat16 *xsrc[4];
    bool xok[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + tid / 16 + 16 * i;
        xok[i] = m < g.n;
        xsrc[i] = (const __nv_bfloat16 *)g.x + (xok[i] ? m : 0) * g.xstride + (tid % 16) * 8;
    }
    auto copy_w = [&](int ks) {
        unsigned char *ws = qa_smem_buf + ((ks - kb) % QA_STAGES) * STAGE + QA_XBYTES;
        const int64_t k0 = (int64_t)ks * QA_K, w0 = k0 * BITS / 32;   /* first value, first word of the stage */
        const bool kin = k0 + (tid % CPR) * (128 / BITS) < g.k;
#pragma unroll
        for (int i = 0; i < WROWS; i++) {
            const int r = tid / CPR + i * (QA_THREADS / CPR);
            const bool ok = wok[i] && kin;
            cp16z(ws + r * WLD + (tid % CPR) * 16, ok ? wsrc[i] + w0 : wsrc[i], ok);
        }
        if (tid < NB) {
            unsigned char *sbs = ws + NB * WLD + tid * QA_SB;
            const int64_t p0 = k0 >> pgsh;   /* first pair of the stage */
            for (int u = 0; u < sbu; u++) {
                const int64_t byte = p0 * pb + u * 4;
                const bool ok = sbok && byte < sbbytes;
                cp4z(sbs + u * 4, ok ? sbsrc + byte : sbsrc, ok);
            }
        }
    };
    auto copy_x = [&](int ks) {
        unsigned char *xs = qa_smem_buf + ((ks - kb) % QA_STAGES) * STAGE;
        const int64_t k0 = (int64_t)ks * QA_K;
        const bool kin = k0 + (tid % 16) * 8 < g.k;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const bool ok = xok[i] && kin;
            cp16z(xs + (tid / 16 + 16 * i) * (QA_XLD * 2) + (tid % 16) * 16, ok ? xsrc[i] + k0 : xsrc[i], ok);
        }
    };

    float acc[MT][2][4];   /* m16 tile mi of activation rows, n8 tile ni of the warp's 16 weight rows */
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;
    const uint32_t sel = qa_sel(tq);

    /* the first stages: weights before waiting for the kernel ahead (they are not its output), then x */
    for (int s = 0; s < QA_STAGES - 1; s++)
        if (kb + s < ke) copy_w(kb + s);
    pdl_wait();
    pdl_launch_next();
    for (int s = 0; s < QA_STAGES - 1; s++) {
        if (kb + s < ke) copy_x(kb + s);
        cp_async_commit();
    }
    for (int ks = kb; ks < ke; ks++) {
        cp_async_wait<QA_STAGES - 2>();
        __syncthreads();   /* stage ks has landed, and every warp is done with the buffer the next copy overwrites */
        if (ks + QA_STAGES - 1 < ke) {
            copy_w(ks + QA_STAGES - 1);
            copy_x(ks + QA_STAGES - 1);
        }
        cp_async_commit();
        const unsigned char *base = qa_smem_buf + ((ks - kb) % QA_STAGES) * STAGE;
        const __nv_bfloat16 *xs = reinterpret_cast<const __nv_bfloat16 *>(base);
        const unsigned char *ws = base + QA_XBYTES, *sbs = ws + NB * WLD;
        /* step j's B fragments (the weight values of rows gq and gq + 8 of the warp's 16 as bf16 pairs) */
        auto frags = [&](int j, uint32_t (&b)[2][2]) {
#pragma unroll
            for (int ni = 0; ni < 2; ni++) {
                const int r = warp * 16 + ni * 8 + gq;
                const unsigned char *wr = ws + r * WLD, *pr = sbs + r * QA_SB;
                const int pi = (16 * j) >> gsh;   /* the step's pair */
                if constexpr (BITS == 4) {
                    const uint2 w = *reinterpret_cast<const uint2 *>(wr + 8 * j);   /* values 16j .. 16j + 15 */
                    if constexpr (HSB) {
                        const uint32_t u = reinterpret_cast<const uint32_t *>(pr)[pi];
                        b[ni][0] = qa_deq4h(w.x, sel, u);
                        b[ni][1] = qa_deq4h(w.y, sel, u);
                    } else {
                        const float2 sb = qa_pair(pr, sbt, pi);
                        b[ni][0] = qa_pair4(w.x, tq, sb.x, sb.y);
                        b[ni][1] = qa_pair4(w.y, tq, sb.x, sb.y);
                    }
                } else {
                    const uint32_t *wv = reinterpret_cast<const uint32_t *>(wr + 16 * j);
                    const uint32_t w0 = wv[tq >> 1], w1 = wv[2 + (tq >> 1)];
                    const int e = 2 * (tq & 1);
                    const float2 sb = qa_pair(pr, sbt, pi);
                    b[ni][0] = qa_pair8(w0, e, sb.x, sb.y);
                    b[ni][1] = qa_pair8(w1, e, sb.x, sb.y);
                }
            }
        };
        /* the next step's fragments are made before this step's products are issued */
        uint32_t b[2][2], bn[2][2];
        frags(0, b);
#pragma unroll
        for (int j = 0; j < QA_K / 16; j++) {
            if (j + 1 < QA_K / 16) frags(j + 1, bn);
            uint32_t a[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; mi++) ldsm_x4(a[mi], xs + (mi * 16 + (lane & 15)) * QA_XLD + 16 * j + (lane >> 4) * 8);
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                mma_bf16(acc[mi][0], a[mi], b[0][0], b[0][1]);
                mma_bf16(acc[mi][1], a[mi], b[1][0], b[1][1]);
            }
#pragma unroll
            for (int ni = 0; ni < 2; ni++) b[ni][0] = bn[ni][0], b[ni][1] = bn[ni][1];
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float *Cs = reinterpret_cast<float *>(qa_smem_buf);   /* [MB][LDC] */
    /* rows past MT m16 tiles are never stored: MT covers every activation row (cfk_qmma) */
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < 2; ni++) {
            const int m = mi * 16 + gq, c = warp * 16 + ni * 8 + 2 * tq;
            Cs[m * LDC + c] = acc[mi][ni][0];
            Cs[m * LDC + c + 1] = acc[mi][ni][1];
            Cs[(m + 8) * LDC + c] = acc[mi][ni][2];
            Cs[(m + 8) * LDC + c + 1] = acc[mi][ni][3];
        }
    __syncthreads();
    qmma_store(g, S, si, jt0, m0, z, Cs);
}

/* The split-k sums of qmma_async_kernel and its epilogue: blockIdx.y = product (for the GLU one, reading both partials) */
__global__ void qmma_epilogue(QArgs g) {
    pdl_wait();
    pdl_launch_next();
    const bool glu = g.glu.p != nullptr;
    const int si = blockIdx.y;
    const QSeg S = si == 0 ? g.s0 : si == 1 ? g.s1 : g.s2;
    const int64_t poff = si == 0 ? g.poff0 : si == 1 ? g.poff1 : g.poff2;
    const int64_t total = (int64_t)g.n * S.d, plane = total;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = e / S.d, j = e % S.d;
        float v = 0.0f;
        for (int z = 0; z < g.splits; z++) v += g.part[poff + z * plane + e];
        if (glu) {
            float u = 0.0f;
            for (int z = 0; z < g.splits; z++) u += g.part[g.poff1 + z * plane + e];
            st(g.glu, m, j, act_fn(g.act, v) * u);
            continue;
        }
        v += S.bias.p ? ld(S.bias, 0, j) : 0.0f;
        if (g.mul.p) v = act_fn(g.act, v) * ld(g.mul, m, j);
        st(S.out, m, j, v);
    }
}

/* ---- dequantize rows to bf16 (the cuBLAS path) and the embedding gather ---- */

/* rows [r0, r0 + nr) of a weight into out [nr, k] bf16: one thread a packed word */
template <int BITS>
__global__ void qdequant_kernel(QSeg S, int64_t k, int64_t r0, int64_t nr, __nv_bfloat16 *out) {
    pdl_wait();
    pdl_launch_next();
    constexpr int VPW = 32 / BITS;
    const int64_t words = nr * S.wpr;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / S.wpr, wc = i % S.wpr, c0 = wc * VPW;
        const uint32_t u = S.q[(r0 + r) * S.wpr + wc];
        const float2 sb = ld_sb(S.sb, S.sbt, (r0 + r) * S.G + c0 / S.group);
        uint32_t p[VPW / 2];
#pragma unroll
        for (int e = 0; e < VPW; e += 2)
            p[e / 2] = pack_bf16(fmaf(sb.x, (float)((u >> (BITS * e)) & ((1u << BITS) - 1u)), sb.y),
                                 fmaf(sb.x, (float)((u >> (BITS * (e + 1))) & ((1u << BITS) - 1u)), sb.y));
        __nv_bfloat16 *o = out + r * k + c0;
        if constexpr (BITS == 4) *reinterpret_cast<uint4 *>(o) = make_uint4(p[0], p[1], p[2], p[3]);
        else *reinterpret_cast<uint2 *>(o) = make_uint2(p[0], p[1]);
    }
}

/* out[i] = dequantized table row ids[i] * scale (fmaf(scale, q, bias), then the product, as the CPU); ids outside
 * the table give zeros */
__global__ void qembed_kernel(TV out, QSeg S, int bits, TV ids, int64_t cols, float scale) {
    pdl_wait();
    pdl_launch_next();
    const int64_t i = blockIdx.x;
    const int64_t id = ((const int32_t *)ids.p)[i * ids.stride];
    const bool valid = id >= 0 && id < S.d;
    for (int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.y * blockDim.x) {
        float v = 0.0f;
        if (valid) {
            const int64_t bit = c * bits;
            const uint32_t q = (S.q[id * S.wpr + (bit >> 5)] >> (bit & 31)) & ((1u << bits) - 1u);   /* 4, 8 bits: never straddles */
            const float2 sb = ld_sb(S.sb, S.sbt, id * S.G + c / S.group);
            v = fmaf(sb.x, (float)q, sb.y) * scale;
        }
        st(out, i, c, v);
    }
}

/* ---- host side ---- */

static QSeg qseg(const cf_qweight *w, cf_tensor out, cf_tensor bias, int64_t block0) {
    QSeg s = {};
    s.q = w->q;
    s.sb = w->scales;
    s.sbt = (int)w->sb_dtype;
    s.group = w->group;
    s.gsh = w->group == 32 ? 5 : w->group == 64 ? 6 : 7;
    s.d = w->rows;
    s.wpr = cf_qweight_words_per_row(w->bits, w->cols);
    s.G = w->cols / w->group;
    s.block0 = block0;
    s.out = out.data ? tv(out) : TV{};
    s.bias = bias.data ? tv(bias) : TV{};
    return s;
}

static bool al16(const void *p, int64_t stride_bytes) { return ((uintptr_t)p % 16) == 0 && stride_bytes % 16 == 0; }

extern "C" int cfk_qjob_ok(const cfk_qjob *j) {
    if (j->n_seg < 1 || j->n_seg > CFK_QMAX_SEG) return 0;
    const cf_tensor x = j->x;
    if (x.dtype != CF_F32 && x.dtype != CF_BF16) return 0;
    if (!al16(x.data, x.stride * (int64_t)cf_dtype_size(x.dtype))) return 0;
    const int bits = j->w[0]->bits;
    for (int s = 0; s < j->n_seg; s++) {
        const cf_qweight *w = j->w[s];
        if (w->bits != bits || (bits != 4 && bits != 8) || !cf_qweight_group_ok(w->group) || w->cols != x.cols || x.cols % 32 || w->cols % w->group) return 0;
        if (w->sb_dtype != CF_F32 && w->sb_dtype != CF_BF16 && w->sb_dtype != CF_F16) return 0;
        if (!j->glu_out.data && !j->out[s].data) return 0;
    }
    if (j->glu_out.data && (j->n_seg != 2 || j->w[0]->rows != j->w[1]->rows || j->mul.data)) return 0;
    if (j->mul.data && j->n_seg != 1) return 0;
    return 1;
}

static QArgs qargs(const cfk_qjob *j) {
    QArgs g = {};
    g.x = j->x.data;
    g.xstride = j->x.stride;
    g.k = j->x.cols;
    g.n = (int)j->x.rows;
    g.nseg = j->n_seg;
    g.act = (int)j->act;
    const cf_tensor none = {};
    QSeg *segs[3] = {&g.s0, &g.s1, &g.s2};
    for (int s = 0; s < j->n_seg; s++) *segs[s] = qseg(j->w[s], j->glu_out.data ? none : j->out[s], j->bias[s], 0);
    if (j->glu_out.data) g.glu = tv(j->glu_out);
    if (j->mul.data) g.mul = tv(j->mul);
    return g;
}

template <int NX, int BITS>
static cudaError_t qgemv_pick_x(cudaStream_t st, const QArgs &g, int64_t blocks, cf_dtype xdt) {
    if (xdt == CF_F32) return launch(qgemv_kernel<NX, BITS, float>, dim3((unsigned)blocks), dim3(128), 0, st, g);
    return launch(qgemv_kernel<NX, BITS, __nv_bfloat16>, dim3((unsigned)blocks), dim3(128), 0, st, g);
}

template <int BITS>
static cudaError_t qgemv_pick_n(cudaStream_t st, const QArgs &g, int64_t blocks, cf_dtype xdt) {
    if (g.n == 1) return qgemv_pick_x<1, BITS>(st, g, blocks, xdt);
    if (g.n == 2) return qgemv_pick_x<2, BITS>(st, g, blocks, xdt);
    if (g.n <= 4) return qgemv_pick_x<4, BITS>(st, g, blocks, xdt);
    return qgemv_pick_x<8, BITS>(st, g, blocks, xdt);
}

/* whether qgemv_tc_kernel takes the job: bf16 x, bf16 or f16 (scale, bias) pairs (one dtype for every product, a
 * template parameter of the kernel), one group size, and k a multiple of TC_KB (128 values), at least one k-block a
 * warp; cfk_qjob_ok has checked the rest (4 or 8 bits alike, x rows 16-byte aligned) */
static bool qjob_tc_ok(const cfk_qjob *j) {
    if (!cfk_cfg.qgemv_tc || j->x.dtype != CF_BF16 || j->x.cols % TC_KB || j->x.cols < TC_KB * TC_WARPS) return false;
    for (int s = 0; s < j->n_seg; s++)
        if ((j->w[s]->sb_dtype != CF_BF16 && j->w[s]->sb_dtype != CF_F16) || j->w[s]->sb_dtype != j->w[0]->sb_dtype ||
            j->w[s]->group != j->w[0]->group || !al16(j->w[s]->q, 16) || !al16(j->w[s]->scales, 16))
            return false;
    return true;
}

/* the job on activation rows [r0, r0 + n) */
static cfk_qjob qjob_rows(const cfk_qjob *j, int64_t r0, int n) {
    cfk_qjob jr = *j;
    jr.x = cf_rows(j->x, r0, n);
    for (int s = 0; s < j->n_seg; s++)
        if (j->out[s].data) jr.out[s] = cf_rows(j->out[s], r0, n);
    if (j->glu_out.data) jr.glu_out = cf_rows(j->glu_out, r0, n);
    if (j->mul.data) jr.mul = cf_rows(j->mul, r0, n);
    if (j->fold.pos.data) jr.fold.pos = cf_rows(j->fold.pos, r0, n);
    if (j->fold.store_pos.data) jr.fold.store_pos = cf_rows(j->fold.store_pos, r0, n);
    jr.fold.store_pos0 = j->fold.store_pos0 + (int)r0;
    return jr;
}

extern "C" int cfk_qgemv_folds(const cfk_qjob *j) { return cfk_qjob_ok(j) && qjob_tc_ok(j); }

template <int BITS, int G>
static void (*qgemv_tc_pick(bool f16))(QArgs) { return f16 ? qgemv_tc_kernel<BITS, G, true> : qgemv_tc_kernel<BITS, G, false>; }

template <int BITS>
static void (*qgemv_tc_kernel_of(int group, bool f16))(QArgs) {
    return group == 32 ? qgemv_tc_pick<BITS, 32>(f16) : group == 64 ? qgemv_tc_pick<BITS, 64>(f16) : qgemv_tc_pick<BITS, 128>(f16);
}
static void (*qgemv_tc_kernel_for(int bits, int group, bool f16))(QArgs) {
    return bits == 4 ? qgemv_tc_kernel_of<4>(group, f16) : qgemv_tc_kernel_of<8>(group, f16);
}

/* qgemv_tc_kernel's blocks an SM (occupancy API, cfk_quant_init): [bits == 8][group 32, 64, 128] */
static int tc_blocks_per_sm[2][3];
static int *tc_blocks(int bits, int group) { return &tc_blocks_per_sm[bits == 8][group == 32 ? 0 : group == 64 ? 1 : 2]; }

static cudaError_t qgemv_tc(cudaStream_t st, const cfk_qjob *j) {
    const bool glu = j->glu_out.data != NULL;
    /* k split over a cluster of up to cfk_cfg.qgemv_tc_splits blocks while twice the blocks still run in one wave and
     * each warp keeps at least 2 k-blocks: Llama-3-8B's o and down (274 units) split in 2, q/k/v (436) and gate/up
     * (2,048) not. It depends on the shapes only, not on the activation rows. */
    const bool f16 = j->w[0]->sb_dtype == CF_F16;
    int64_t units = 0, unit0[3] = {0, 0, 0};   /* units in all; the first unit of each product */
    for (int s = 0; s < j->n_seg; s++) {
        unit0[s] = glu ? 0 : units;
        if (!glu || s == 0) units += glu ? ceil_div(j->w[s]->rows, TC_GLU_ROWS) : j->fold.rope[s] ? ceil_div(j->w[s]->rows / 2, TC_GLU_ROWS)
                                                                                   : ceil_div(j->w[s]->rows, TC_ROWS);
    }
    const int64_t nkb = j->x.cols / TC_KB;
    const int64_t slots = (int64_t)cfk_cfg.n_sm * *tc_blocks(j->w[0]->bits, j->w[0]->group);
    int splits = 1;
    while (splits < cfk_cfg.qgemv_tc_splits && units * splits * 2 <= slots && nkb >= (int64_t)4 * TC_WARPS * splits) splits *= 2;
    for (int64_t r0 = 0; r0 < j->x.rows; r0 += 8) {
        const cfk_qjob jr = qjob_rows(j, r0, (int)(j->x.rows - r0 < 8 ? j->x.rows - r0 : 8));
        QArgs g = qargs(&jr);
        QSeg *segs[3] = {&g.s0, &g.s1, &g.s2};
        for (int s = 0; s < j->n_seg; s++) {
            segs[s]->block0 = unit0[s];
            segs[s]->rope = j->fold.rope[s];
            segs[s]->cache = j->fold.cache[s].data ? tv(j->fold.cache[s]) : TV{};
        }
        g.pos = jr.fold.pos.data ? tv(jr.fold.pos) : TV{};
        g.store_pos = jr.fold.store_pos.data ? tv(jr.fold.store_pos) : TV{};
        g.inv_freq = (const float *)j->fold.inv_freq.data;
        g.half = j->fold.head_dim / 2;
        g.pos0 = jr.fold.store_pos0;
        g.cap = j->fold.cap;
        g.splits = splits;
        const dim3 grid((unsigned)(units * splits));
        const cudaError_t e = launch_cluster(qgemv_tc_kernel_for(j->w[0]->bits, j->w[0]->group, f16), grid, dim3(TC_WARPS * 32), 0, st,
                                             (unsigned)splits, g);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t cfk_qgemv(cudaStream_t st, const cfk_qjob *j) {
    if (!cfk_qjob_ok(j)) return cudaErrorInvalidValue;
    if (qjob_tc_ok(j)) return qgemv_tc(st, j);
    const bool glu = j->glu_out.data != NULL;
    const int bits = j->w[0]->bits;
    const int64_t nch = j->x.cols * bits / 128;   /* 16-byte chunks a row */
    int64_t units[CFK_QMAX_SEG], n_units = 0;
    for (int s = 0; s < j->n_seg; s++) {
        units[s] = glu ? ceil_div(j->w[s]->rows, 2) : ceil_div(j->w[s]->rows, QR);
        n_units += glu && s ? 0 : units[s];
    }
    /* split a unit's chunks over 2 or 4 warps while the warps stay within cfk_cfg.qgemv_warps (24) per SM and each
     * lane keeps at least two chunks a row (Llama-3-8B at 24: q, k, v and o 2 warps a unit, gate/up 1, down 2) */
    int ks = 1;
    while (ks < 4 && n_units * ks * 2 <= (int64_t)cfk_cfg.n_sm * cfk_cfg.qgemv_warps && nch >= (int64_t)32 * ks * 2 * 2) ks *= 2;
    const int upb = 4 / ks;
    for (int64_t r0 = 0; r0 < j->x.rows; r0 += 8) {
        const int n = (int)(j->x.rows - r0 < 8 ? j->x.rows - r0 : 8);
        const cfk_qjob jr = qjob_rows(j, r0, n);
        QArgs g = qargs(&jr);
        g.ks = ks;
        QSeg *segs[3] = {&g.s0, &g.s1, &g.s2};
        int64_t blocks = 0;
        for (int s = 0; s < j->n_seg; s++) {
            segs[s]->block0 = blocks;
            if (!glu) blocks += ceil_div(units[s], upb);
        }
        if (glu) blocks = ceil_div(units[0], upb);
        cudaError_t e = bits == 4 ? qgemv_pick_n<4>(st, g, blocks, j->x.dtype) : qgemv_pick_n<8>(st, g, blocks, j->x.dtype);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* qmma_async_kernel's variants [v][m]: v = 8 bits, 4 bits with bf16 pairs, 4 bits with other pairs; m = its m16 tiles
 * of activation rows 1, 2, 4 */
#define QA_ROW(B, H) {qmma_async_kernel<B, H, 1>, qmma_async_kernel<B, H, 2>, qmma_async_kernel<B, H, 4>}
static void (*const qa_kernels[3][3])(QArgs) = {QA_ROW(8, false), QA_ROW(4, true), QA_ROW(4, false)};
#undef QA_ROW
static int qa_blocks_per_sm[2] = {1, 1};   /* of qmma_async_kernel at 4 and 8 bits, the fewest over its variants */

/* the tiles of a job, its stages of k (QA_K values) and its split count: splits of k while the tiles fill less than
 * one wave of the blocks the SMs hold at once, never more than one wave (a nearly empty last wave costs as much as a
 * full one), each split at least 2 stages. Llama-3-8B at 64 rows on an H100 (2 blocks an SM at 4 bits, 1 at 8):
 * q/k/v 5 and 2, o and down 8 and 4, gate/up 1. */
static void qmma_plan(const cfk_qjob *j, int64_t *col_tiles, int64_t *m_tiles, int *ksteps, int *splits) {
    const bool glu = j->glu_out.data != NULL;
    int64_t ct = 0;
    for (int s = 0; s < j->n_seg; s++)
        if (!glu || s == 0) ct += ceil_div(j->w[s]->rows, glu ? NB / 2 : NB);
    const int64_t mt = ceil_div(j->x.rows, MB), base = ct * mt, steps = ceil_div(j->x.cols, QA_K);
    int64_t sp = 1;
    const int64_t slots = (int64_t)cfk_cfg.n_sm * qa_blocks_per_sm[j->w[0]->bits == 8];
    if (base < slots) sp = slots / base;
    if (sp > steps / 2) sp = steps / 2;
    if (sp > 16) sp = 16;
    if (sp < 1) sp = 1;
    *col_tiles = ct;
    *m_tiles = mt;
    *ksteps = (int)steps;
    *splits = (int)sp;
}

extern "C" size_t cfk_qmma_scratch(const cfk_qjob *j) {
    int64_t ct, mt;
    int ks, sp;
    qmma_plan(j, &ct, &mt, &ks, &sp);
    if (sp == 1) return 0;
    size_t floats = 0;
    for (int s = 0; s < j->n_seg; s++) floats += (size_t)sp * (size_t)j->x.rows * (size_t)j->w[s]->rows;
    return floats * sizeof(float);
}

extern "C" cudaError_t cfk_qmma(cudaStream_t st, const cfk_qjob *j, void *partial) {
    if (!cfk_qjob_ok(j) || j->x.dtype != CF_BF16) return cudaErrorInvalidValue;
    const bool glu = j->glu_out.data != NULL;
    int64_t ct, mt;
    int ks, sp;
    qmma_plan(j, &ct, &mt, &ks, &sp);
    if (sp > 1 && !partial) return cudaErrorInvalidValue;
    if (mt > 65535) return cudaErrorInvalidValue;
    QArgs g = qargs(j);
    g.ks = 1;
    g.splits = sp;
    g.ksteps = ks;
    g.part = (float *)partial;
    QSeg *segs[3] = {&g.s0, &g.s1, &g.s2};
    int64_t *poffs[3] = {&g.poff0, &g.poff1, &g.poff2};
    int64_t blocks = 0, off = 0;
    for (int s = 0; s < j->n_seg; s++) {
        segs[s]->block0 = blocks;
        if (!glu || s == 0) blocks += ceil_div(j->w[s]->rows, glu ? NB / 2 : NB);
        *poffs[s] = off;
        off += (int64_t)sp * j->x.rows * j->w[s]->rows;
    }
    const int bits = j->w[0]->bits;
    const dim3 grid((unsigned)blocks, (unsigned)mt, (unsigned)sp), block(QA_THREADS);
    bool all_bf16_pairs = true;
    for (int s = 0; s < j->n_seg; s++) all_bf16_pairs = all_bf16_pairs && j->w[s]->sb_dtype == CF_BF16;
    const int v = bits == 8 ? 0 : all_bf16_pairs ? 1 : 2, m = j->x.rows <= 16 ? 0 : j->x.rows <= 32 ? 1 : 2;
    cudaError_t e = launch(qa_kernels[v][m], grid, block, bits == 8 ? qa_smem<8>() : qa_smem<4>(), st, g);
    if (e != cudaSuccess || sp == 1) return e;
    int64_t most = 0;
    for (int s = 0; s < j->n_seg; s++) most = j->x.rows * j->w[s]->rows > most ? j->x.rows * j->w[s]->rows : most;
    int64_t eb = ceil_div(most, 256);
    if (eb > 4 * (int64_t)cfk_cfg.n_sm) eb = 4 * (int64_t)cfk_cfg.n_sm;
    return launch(qmma_epilogue, dim3((unsigned)eb, glu ? 1u : (unsigned)j->n_seg), dim3(256), 0, st, g);
}

extern "C" cudaError_t cfk_quant_init(void) {
    cudaError_t e = cudaSuccess;
    qa_blocks_per_sm[0] = qa_blocks_per_sm[1] = 64;
    for (int v = 0; v < 3 && e == cudaSuccess; v++)
        for (int m = 0; m < 3 && e == cudaSuccess; m++) {
            const size_t smem = v == 0 ? qa_smem<8>() : qa_smem<4>();
            int n = 0;
            e = cudaFuncSetAttribute(qa_kernels[v][m], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, qa_kernels[v][m], QA_THREADS, smem);
            if (e == cudaSuccess && n < 1) e = cudaErrorInvalidConfiguration;
            int *slot = &qa_blocks_per_sm[v == 0];
            if (n < *slot) *slot = n;
        }
    const int bits[2] = {4, 8}, groups[3] = {32, 64, 128};
    for (int b = 0; b < 2 && e == cudaSuccess; b++)
        for (int gi = 0; gi < 3 && e == cudaSuccess; gi++) {
            int f = 0, h = 0;   /* bf16 and f16 pairs: the same registers, but take the smaller */
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f, qgemv_tc_kernel_for(bits[b], groups[gi], false), TC_WARPS * 32, 0);
            if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&h, qgemv_tc_kernel_for(bits[b], groups[gi], true), TC_WARPS * 32, 0);
            *tc_blocks(bits[b], groups[gi]) = f < h ? f : h;
            if (e == cudaSuccess && (f < 1 || h < 1)) e = cudaErrorInvalidConfiguration;
        }
    return e;
}

extern "C" cudaError_t cfk_qdequant(cudaStream_t st, const cf_qweight *w, int64_t r0, int64_t nr, void *out) {
    if ((w->bits != 4 && w->bits != 8) || w->cols % 32 || ((uintptr_t)out % 16)) return cudaErrorInvalidValue;
    const cf_tensor none = {};
    const QSeg s = qseg(w, none, none, 0);
    int64_t blocks = ceil_div(nr * s.wpr, 256);
    if (blocks > 16 * (int64_t)cfk_cfg.n_sm) blocks = 16 * (int64_t)cfk_cfg.n_sm;
    if (w->bits == 4) return launch(qdequant_kernel<4>, dim3((unsigned)blocks), dim3(256), 0, st, s, w->cols, r0, nr, (__nv_bfloat16 *)out);
    return launch(qdequant_kernel<8>, dim3((unsigned)blocks), dim3(256), 0, st, s, w->cols, r0, nr, (__nv_bfloat16 *)out);
}

extern "C" cudaError_t cfk_qembed(cudaStream_t st, cf_tensor out, const cf_qweight *table, cf_tensor ids, float scale) {
    if (table->bits != 4 && table->bits != 8) return cudaErrorInvalidValue;
    const cf_tensor none = {};
    const QSeg s = qseg(table, none, none, 0);
    int64_t yb = ceil_div(out.cols, 256);
    if (yb > 32) yb = 32;
    return launch(qembed_kernel, dim3((unsigned)out.rows, (unsigned)yb), dim3(256), 0, st, tv(out), s, table->bits, tv(ids), out.cols, scale);
}
