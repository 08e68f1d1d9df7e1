/* k_gemv.cu: the GEMV entry point (the kernels are in k_gemv.cuh and k_gemv_tc.cu): which kernel takes a job, how
 * many warps per weight row, how the products of a job map to block ranges, and the scalar fallback; bf16-weight
 * instantiations. */
#include "backend/cuda/k_gemv.cuh"

cudaError_t gemv_launch_bf16(cudaStream_t st, const GemvArgs &g, int64_t blocks, cf_dtype xdt) {
    return gemv_launch<__nv_bfloat16>(st, g, blocks, xdt);
}

/* Any dtypes and alignment: one warp per weight row, scalar loads. */
__global__ void __launch_bounds__(256) gemv_generic_kernel(TV x, TV w, TV out, TV bias, int n, int64_t k, int64_t d) {
    pdl_wait();
    pdl_launch_next();
    const int64_t j = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (j >= d) return;
    for (int r = 0; r < n; r++) {
        float s = 0.0f;
        for (int64_t c = lane; c < k; c += 32) s = fmaf(ld(x, r, c), ld(w, j, c), s);
        s = warp_sum(s);
        if (lane == 0) st(out, r, j, s + (bias.p ? ld(bias, 0, j) : 0.0f));
    }
}

static bool aligned16(const void *p, int64_t stride_bytes) { return ((uintptr_t)p % 16) == 0 && stride_bytes % 16 == 0; }

extern "C" int cfk_gemv_vec_ok(cf_tensor x, cf_tensor w) {
    return (w.dtype == CF_BF16 || w.dtype == CF_F16) && (x.dtype == CF_F32 || x.dtype == CF_BF16) && x.cols % 8 == 0 &&
           aligned16(w.data, w.stride * 2) && aligned16(x.data, x.stride * (int64_t)(x.dtype == CF_F32 ? 4 : 2));
}

extern "C" int cfk_gemv_tc_ok(cf_tensor x, cf_tensor w) {
    return w.dtype == CF_BF16 && x.dtype == CF_BF16 && x.cols % GEMV_TC_KSTEP == 0 && aligned16(w.data, w.stride * 2) &&
           aligned16(x.data, x.stride * 2);
}

static Seg seg_of(const cfk_gemv_job *j, int s, int64_t r0, int n, int64_t block0) {
    const TV out = j->out[s].data ? tv(cf_rows(j->out[s], r0, n)) : TV{};
    return Seg{j->w[s].data, j->w[s].stride, j->w[s].rows, block0, out, tv(j->bias[s]), 0, TV{}};
}

/* The job's RoPEs, then its stores, as launches of their own (when the kernel cannot take them). */
static cudaError_t rope_and_store(cudaStream_t st, const cfk_gemv_job *j) {
    for (int s = 0; s < j->n_seg; s++) {
        if (!j->fold.rope[s]) continue;
        const int heads = (int)(j->out[s].cols / j->fold.head_dim);
        cudaError_t e = cfk_rope(st, 1, &j->out[s], &heads, j->fold.pos, j->fold.head_dim, j->fold.head_dim, j->fold.inv_freq, NULL);
        if (e != cudaSuccess) return e;
    }
    for (int s = 0; s < j->n_seg; s++) {
        if (!j->fold.cache[s].data) continue;
        cfk_kv_args kv = {.n = 1, .cache = {j->fold.cache[s]}, .src = {j->out[s]}, .pos0 = j->fold.store_pos0, .cap = j->fold.cap, .pos = j->fold.store_pos};
        cudaError_t e = cfk_kv_store(st, &kv);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t cfk_gemv(cudaStream_t st, const cfk_gemv_job *j) {
    const cf_tensor x = j->x, w = j->w[0];
    const int64_t k = x.cols;
    const bool glu = j->glu_out.data != NULL;
    int vec = cfk_gemv_vec_ok(x, w);
    for (int s = 1; s < j->n_seg; s++) vec &= cfk_gemv_vec_ok(x, j->w[s]) && j->w[s].dtype == w.dtype;
    if (!vec) {   /* the backend fuses only what the vector kernel takes */
        if (j->n_seg != 1 || glu || j->mul.data) return cudaErrorInvalidValue;
        for (int64_t r0 = 0; r0 < x.rows; r0 += 8) {
            const int n = (int)(x.rows - r0 < 8 ? x.rows - r0 : 8);
            cudaError_t e = launch(gemv_generic_kernel, dim3((unsigned)ceil_div(w.rows, 8)), dim3(256), 0, st, tv(cf_rows(x, r0, n)),
                                   tv(w), tv(cf_rows(j->out[0], r0, n)), tv(j->bias[0]), n, k, w.rows);
            if (e != cudaSuccess) return e;
        }
        return rope_and_store(st, j);
    }
    /* RoPE and stores in the kernel, else launches of their own after it */
    bool fold = !glu && !j->mul.data;
    for (int s = 0; s < j->n_seg; s++)
        if (j->fold.rope[s]) fold = fold && j->fold.head_dim % 2 == 0 && j->w[s].rows % j->fold.head_dim == 0;
    /* more rows than the vector kernel takes (the backend asks for at most 16 then): the tensor-core GEMV, a block a
     * unit of 16 weight rows (8 row pairs of the GLU or of RoPE) */
    bool tc = x.rows > cfk_cfg.gemv_max_rows;
    for (int s = 0; s < j->n_seg; s++) tc = tc && cfk_gemv_tc_ok(x, j->w[s]);
    int64_t units[CFK_MAX_SEG], n_units = 0;   /* a warp's work: two rows (see k_gemv.cuh); tc: a block's */
    for (int s = 0; s < j->n_seg; s++) {
        if (tc) units[s] = glu ? ceil_div(j->w[s].rows, 8) : fold && j->fold.rope[s] ? ceil_div(j->w[s].rows / 2, 8) : ceil_div(j->w[s].rows, 16);
        else units[s] = glu ? j->w[s].rows : fold && j->fold.rope[s] ? j->w[s].rows / 2 : ceil_div(j->w[s].rows, 2);
        n_units += glu && s ? 0 : units[s];
    }
    int wpr = 1;
    /* units are split over warps only while there are fewer than cfk_cfg.gemv_warps per SM (long rows:
     * four times that). A lone 4096x14336 GEMV streams faster split over 4 warps (92% of copy bandwidth
     * against 81% with 2 on the H200), but inside the decode step one warp a unit is faster. */
    const int64_t warps = (int64_t)cfk_cfg.n_sm * cfk_cfg.gemv_warps * (k >= 8192 ? 4 : 1);
    while (wpr < 8 && n_units * wpr * 2 <= warps && k / 8 >= (int64_t)wpr * 64) wpr *= 2;
    const int bw = cfk_cfg.gemv_block_warps > wpr ? cfk_cfg.gemv_block_warps : wpr, rpb = tc ? 1 : bw / wpr;
    const int piece = tc ? 16 : 8;   /* activation rows a launch */
    for (int64_t r0 = 0; r0 < x.rows; r0 += piece) {
        const int n = (int)(x.rows - r0 < piece ? x.rows - r0 : piece);
        cf_tensor xs = cf_rows(x, r0, n);
        GemvArgs g = {};
        g.x = xs.data;
        g.xstride = xs.stride;
        g.k = k;
        g.n = n;
        g.wpr = wpr;
        g.block_warps = bw;
        g.nseg = j->n_seg;
        g.act = (int)j->act;
        int64_t blocks = 0;
        Seg *segs[3] = {&g.s0, &g.s1, &g.s2};
        for (int s = 0; s < j->n_seg; s++) {
            *segs[s] = seg_of(j, s, r0, n, blocks);
            if (!glu) blocks += ceil_div(units[s], rpb);
        }
        if (glu) blocks = ceil_div(units[0], rpb);
        if (j->mul.data) g.mul = tv(cf_rows(j->mul, r0, n));
        if (glu) g.glu = tv(cf_rows(j->glu_out, r0, n));
        if (fold) {
            for (int s = 0; s < j->n_seg; s++) {
                segs[s]->rope = j->fold.rope[s];
                segs[s]->cache = tv(j->fold.cache[s]);
            }
            g.pos = tv(cf_rows(j->fold.pos, r0, n));
            g.store_pos = j->fold.store_pos.data ? tv(cf_rows(j->fold.store_pos, r0, n)) : TV{};
            g.inv_freq = (const float *)j->fold.inv_freq.data;
            g.half = j->fold.head_dim / 2;
            g.pos0 = j->fold.store_pos0 + (int)r0;
            g.cap = j->fold.cap;
        }
        cudaError_t e = tc ? gemv_tc_launch(st, g, blocks)
                           : w.dtype == CF_BF16 ? gemv_launch_bf16(st, g, blocks, x.dtype) : gemv_launch_f16(st, g, blocks, x.dtype);
        if (e != cudaSuccess) return e;
    }
    return fold ? cudaSuccess : rope_and_store(st, j);
}
