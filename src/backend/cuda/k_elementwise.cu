/* k_elementwise.cu: the memory-light ops: elementwise maps (add, scale, softcap, GLU, copy, fill),
 * embedding gather, RMSNorm (one block per row), the residual update with its norms (add_norm), RoPE,
 * the per-head norms, RoPE and KV stores after the q, k, v projections (qkv_post), KV-cache stores, dtype
 * conversion, random fill.
 * Every tensor is read and written through its run-time dtype (f32, bf16, f16; i32 where the CPU allows),
 * computing in f32 with the same formulas as the CPU backend. */
#include "backend/cuda/k_common.cuh"

struct EwArgs {
    int op;
    TV out, a, b;
    int64_t rows, cols;
    int b_bcast;
    float s;
};

__global__ void ew_kernel(EwArgs e) {
    pdl_wait();
    pdl_launch_next();
    const bool int_copy = e.op == CFK_COPY && e.out.dt == CF_I32 && e.a.dt == CF_I32;
    for (int64_t r = blockIdx.y; r < e.rows; r += gridDim.y) {
        const int64_t rb = e.b_bcast ? 0 : r;
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < e.cols; c += (int64_t)gridDim.x * blockDim.x) {
            if (int_copy) {
                ((int32_t *)e.out.p)[r * e.out.stride + c] = ((const int32_t *)e.a.p)[r * e.a.stride + c];
                continue;
            }
            float v;
            switch (e.op) {
            case CFK_ADD: v = ld(e.a, r, c) + ld(e.b, rb, c); break;
            case CFK_SCALE: v = ld(e.a, r, c) * e.s; break;
            case CFK_SOFTCAP: v = e.s * tanhf(ld(e.a, r, c) / e.s); break;
            case CFK_GLU_SILU: {
                float g = ld(e.a, r, c);
                v = g / (1.0f + expf(-g)) * ld(e.b, r, c);
                break;
            }
            case CFK_GLU_GELU: {
                const float k0 = 0.7978845608028654f;   /* sqrt(2/pi) */
                float g = ld(e.a, r, c);
                v = 0.5f * g * (1.0f + tanhf(k0 * (g + 0.044715f * g * g * g))) * ld(e.b, r, c);
                break;
            }
            case CFK_FILL: v = e.s; break;
            default: v = ld(e.a, r, c);
            }
            st(e.out, r, c, v);
        }
    }
}

extern "C" cudaError_t cfk_elementwise(cudaStream_t st, cfk_ew op, cf_tensor out, cf_tensor a, cf_tensor b, float s) {
    EwArgs e = {op, tv(out), tv(a), tv(b), out.rows, out.cols, b.rows == 1 && out.rows > 1, s};
    dim3 grid((unsigned)(ceil_div(out.cols, 256) < 128 ? ceil_div(out.cols, 256) : 128),
              (unsigned)(out.rows < 32768 ? out.rows : 32768));
    return launch(ew_kernel, grid, dim3(256), 0, st, e);
}

/* Small ops spread a row over several blocks (grid y or z) so that each thread has one or two elements:
 * at decode a row is all there is, and a thread looping over many would serialize their latencies. */
static unsigned col_blocks(int64_t cols, int threads) {
    int64_t b = ceil_div(cols, threads);
    return (unsigned)(b < 32 ? b : 32);
}

/* An id outside the table (the -1 of an argmax over non-finite logits, copied on the device into the next
 * step's input) gathers zeros: the host reports that pick before it uses the step after it. */
__global__ void embed_kernel(TV out, TV table, TV ids, int64_t cols, int64_t n_ids, float scale) {
    pdl_wait();
    pdl_launch_next();
    const int64_t i = blockIdx.x;
    const int64_t id = ((const int32_t *)ids.p)[i * ids.stride];
    const bool valid = id >= 0 && id < n_ids;
    for (int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.y * blockDim.x)
        st(out, i, c, valid ? ld(table, id, c) * scale : 0.0f);
}

extern "C" cudaError_t cfk_embed(cudaStream_t st, cf_tensor out, cf_tensor table, cf_tensor ids, float scale) {
    return launch(embed_kernel, dim3((unsigned)out.rows, col_blocks(out.cols, 256)), dim3(256), 0, st, tv(out), tv(table), tv(ids),
                  out.cols, table.rows, scale);
}

__global__ void rmsnorm_kernel(TV out, TV x, TV w, int64_t rows, int64_t cols, float eps, float w_offset) {
    pdl_wait();
    pdl_launch_next();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float ss = 0.0f;
#pragma unroll 4
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = ld(x, r, c);
            ss += v * v;
        }
        ss = block_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
#pragma unroll 4
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) st(out, r, c, ld(x, r, c) * inv * (ld(w, 0, c) + w_offset));
    }
}

/* The decode case, written for latency: f32 rows of at most 4 * 1024 values, one 16-byte load of x per
 * thread, the norm weight (not written by the kernel ahead) fetched before waiting for it. */
template <typename WT>
__global__ void rmsnorm_row_kernel(TV out, const float *x, int64_t xstride, const WT *w, int64_t cols, float eps, float w_offset) {
    const int64_t c = 4 * (int64_t)threadIdx.x;
    const bool in = c < cols;
    float wv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (in)
#pragma unroll
        for (int e = 0; e < 4; e++) wv[e] = (float)w[c + e] + w_offset;
    pdl_wait();
    pdl_launch_next();
    const float *xr = x + blockIdx.x * xstride;
    const float4 v = in ? *reinterpret_cast<const float4 *>(xr + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float ss = block_sum(v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    if (!in) return;
    st(out, blockIdx.x, c, v.x * inv * wv[0]);
    st(out, blockIdx.x, c + 1, v.y * inv * wv[1]);
    st(out, blockIdx.x, c + 2, v.z * inv * wv[2]);
    st(out, blockIdx.x, c + 3, v.w * inv * wv[3]);
}

extern "C" cudaError_t cfk_rmsnorm(cudaStream_t st, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset) {
    const bool row = x.dtype == CF_F32 && x.cols % 4 == 0 && x.cols <= 4096 && x.rows <= 64 && (uintptr_t)x.data % 16 == 0 &&
                     x.stride % 4 == 0 && (w.dtype == CF_F32 || w.dtype == CF_BF16);
    if (row) {
        const int threads = (int)((x.cols / 4 + 31) / 32 * 32);
        if (w.dtype == CF_F32)
            return launch(rmsnorm_row_kernel<float>, dim3((unsigned)x.rows), dim3(threads), 0, st, tv(out), (const float *)x.data, x.stride,
                          (const float *)w.data, x.cols, eps, w_offset);
        return launch(rmsnorm_row_kernel<__nv_bfloat16>, dim3((unsigned)x.rows), dim3(threads), 0, st, tv(out), (const float *)x.data, x.stride,
                      (const __nv_bfloat16 *)w.data, x.cols, eps, w_offset);
    }
    int64_t t = (x.cols / 4 + 31) / 32 * 32;
    int threads = (int)(t < 32 ? 32 : t > 1024 ? 1024 : t);
    dim3 grid((unsigned)(x.rows < 65535 ? x.rows : 65535));
    return launch(rmsnorm_kernel, grid, dim3(threads), 0, st, tv(out), tv(x), tv(w), x.rows, x.cols, eps, w_offset);
}

/* In each head, (x[i], x[i + rot/2]) rotates by pos * inv_freq[i]. blockIdx.y picks the tensor: 0 and 1
 * the (one or two) rotated ones, 2 the plain KV store of s.src[1] merged into the launch. */
struct RopeArgs {
    TV x[2];
    int n_heads[2];
    TV pos, inv_freq;
    int head_dim, half;
    cfk_kv_args s;
};

__device__ __forceinline__ int64_t kv_slot(const cfk_kv_args &s, int64_t i) {
    const int64_t p = s.pos.data ? (int64_t)((const int32_t *)s.pos.data)[i * s.pos.stride] : s.pos0 + i;
    return s.cap ? p % s.cap : p;
}

/* Row i of s.src[which] into its cache slot, the row spread over the threads of grid z. */
__device__ __forceinline__ void store_row(const cfk_kv_args &s, int which, int64_t i) {
    const TV src = tv(s.src[which]), cache = tv(s.cache[which]);
    const int64_t slot = kv_slot(s, i);
    for (int64_t c = (int64_t)blockIdx.z * blockDim.x + threadIdx.x; c < s.src[which].cols; c += (int64_t)gridDim.z * blockDim.x)
        st(cache, slot, c, ld(src, i, c));
}

__global__ void rope_kernel(RopeArgs a) {
    pdl_wait();
    pdl_launch_next();
    const int64_t t = blockIdx.x;
    if (blockIdx.y == 2) return store_row(a.s, 1, t);   /* the v store */
    const TV x = blockIdx.y ? a.x[1] : a.x[0];
    const int n_heads = blockIdx.y ? a.n_heads[1] : a.n_heads[0];
    const bool store = blockIdx.y == 1 && a.s.n > 0;   /* x[1] (k) also goes to the cache */
    const TV cache = tv(a.s.cache[0]);
    const int64_t slot = store ? kv_slot(a.s, t) : 0;
    const float p = (float)((const int32_t *)a.pos.p)[t * a.pos.stride];
    for (int j = blockIdx.z * blockDim.x + threadIdx.x; j < n_heads * a.half; j += gridDim.z * blockDim.x) {
        const int h = j / a.half, i = j % a.half;
        float sn, cs;
        sincosf(p * ld(a.inv_freq, 0, i), &sn, &cs);
        const int64_t c = (int64_t)h * a.head_dim + i;
        const float u = ld(x, t, c), v = ld(x, t, c + a.half);
        const float u2 = u * cs - v * sn, v2 = v * cs + u * sn;
        st(x, t, c, u2);
        st(x, t, c + a.half, v2);
        if (store) {   /* the rounded values, as a later store reading x would see them */
            st(cache, slot, c, ld(x, t, c));
            st(cache, slot, c + a.half, ld(x, t, c + a.half));
        }
    }
    const int rest = a.head_dim - 2 * a.half;   /* dims past the rotated ones, copied as they are */
    if (store && rest > 0)
        for (int j = blockIdx.z * blockDim.x + threadIdx.x; j < n_heads * rest; j += gridDim.z * blockDim.x) {
            const int64_t c = (int64_t)(j / rest) * a.head_dim + 2 * a.half + j % rest;
            st(cache, slot, c, ld(x, t, c));
        }
}

extern "C" cudaError_t cfk_rope(cudaStream_t st, int n, const cf_tensor *x, const int *n_heads, cf_tensor pos, int head_dim, int rot_dim,
                                cf_tensor inv_freq, const cfk_kv_args *store) {
    RopeArgs a = {{tv(x[0]), tv(x[n - 1])}, {n_heads[0], n_heads[n - 1]}, tv(pos), tv(inv_freq), head_dim, rot_dim / 2, {}};
    if (store) a.s = *store;
    const int most = n_heads[0] > n_heads[n - 1] ? n_heads[0] : n_heads[n - 1];
    const int threads = most * a.half < 128 ? (most * a.half + 31) / 32 * 32 : 128;
    unsigned zb = col_blocks((int64_t)most * a.half, threads);
    if (a.s.n == 2) {   /* the v store spreads its row like the rotations */
        unsigned vb = col_blocks(a.s.src[1].cols, threads);
        zb = vb > zb ? vb : zb;
    }
    return launch(rope_kernel, dim3((unsigned)x[0].rows, (unsigned)(a.s.n == 2 ? 3 : n), zb), dim3(threads), 0, st, a);
}

__global__ void kv_store_kernel(cfk_kv_args s) {
    pdl_wait();
    pdl_launch_next();
    store_row(s, blockIdx.y, blockIdx.x);
}

extern "C" cudaError_t cfk_kv_store(cudaStream_t st, const cfk_kv_args *s) {
    const int64_t cols = s->n > 1 && s->src[1].cols > s->src[0].cols ? s->src[1].cols : s->src[0].cols;
    return launch(kv_store_kernel, dim3((unsigned)s->src[0].rows, (unsigned)s->n, col_blocks(cols, 256)), dim3(256), 0, st, *s);
}

/* v as a tensor of type dt stores it */
__device__ __forceinline__ float rounded(float v, int dt) {
    if (dt == CF_BF16) return __bfloat162float(__float2bfloat16(v));
    if (dt == CF_F16) return __half2float(__float2half(v));
    return v;
}

/* x = (x + [norm(o) * (w_o + off)]) * scale, then h = norm(x) * (w_h + off): one block a row, each thread
 * holding its (at most ADD_NORM_PER) values of the row in registers; every load is issued before the first
 * use, the weights before waiting for the kernel ahead. */
#define ADD_NORM_PER 8
__global__ void add_norm_kernel(TV x, TV o, TV wo, float scale, TV h, TV wh, int64_t cols, float eps, float off) {
    const int64_t r = blockIdx.x;
    float wov[ADD_NORM_PER], whv[ADD_NORM_PER], ov[ADD_NORM_PER], xv[ADD_NORM_PER];
#pragma unroll
    for (int e = 0; e < ADD_NORM_PER; e++) {
        const int64_t c = threadIdx.x + (int64_t)e * blockDim.x;
        wov[e] = wo.p && c < cols ? ld(wo, 0, c) + off : 1.0f;
        whv[e] = h.p && c < cols ? ld(wh, 0, c) + off : 0.0f;
    }
    pdl_wait();
    pdl_launch_next();
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < ADD_NORM_PER; e++) {
        const int64_t c = threadIdx.x + (int64_t)e * blockDim.x;
        ov[e] = c < cols ? ld(o, r, c) : 0.0f;
        xv[e] = c < cols ? ld(x, r, c) : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < ADD_NORM_PER; e++) ss += ov[e] * ov[e];
    const float inv = wo.p ? 1.0f / sqrtf(block_sum(ss) / (float)cols + eps) : 1.0f;
    float ss2 = 0.0f;
#pragma unroll
    for (int e = 0; e < ADD_NORM_PER; e++) {
        const int64_t c = threadIdx.x + (int64_t)e * blockDim.x;
        const float add = wo.p ? ov[e] * inv * wov[e] : ov[e];
        xv[e] = rounded((xv[e] + add) * scale, x.dt);
        if (c < cols) st(x, r, c, xv[e]);
        ss2 += xv[e] * xv[e];
    }
    if (!h.p) return;
    const float inv2 = 1.0f / sqrtf(block_sum(ss2) / (float)cols + eps);
#pragma unroll
    for (int e = 0; e < ADD_NORM_PER; e++) {
        const int64_t c = threadIdx.x + (int64_t)e * blockDim.x;
        if (c < cols) st(h, r, c, xv[e] * inv2 * whv[e]);
    }
}

/* The decode case, written for latency as rmsnorm_row_kernel is: f32 x and o rows of at most 4 * 1024
 * values, one 16-byte load of each per thread, the norm weights (both of type WT, either may be absent)
 * fetched before waiting for the kernel ahead. The same arithmetic as add_norm_kernel. */
template <typename WT>
__global__ void add_norm_row_kernel(float *x, int64_t xstride, const float *o, int64_t ostride, const WT *wo, float scale, TV h,
                                    const WT *wh, int64_t cols, float eps, float off) {
    const int64_t c = 4 * (int64_t)threadIdx.x;
    const bool in = c < cols;
    float wov[4] = {1.0f, 1.0f, 1.0f, 1.0f}, whv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (in && wo)
#pragma unroll
        for (int e = 0; e < 4; e++) wov[e] = (float)wo[c + e] + off;
    if (in && wh)
#pragma unroll
        for (int e = 0; e < 4; e++) whv[e] = (float)wh[c + e] + off;
    pdl_wait();
    pdl_launch_next();
    float *xr = x + blockIdx.x * xstride;
    const float4 o4 = in ? *reinterpret_cast<const float4 *>(o + blockIdx.x * ostride + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 x4 = in ? *reinterpret_cast<const float4 *>(xr + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float ov[4] = {o4.x, o4.y, o4.z, o4.w};
    float xv[4] = {x4.x, x4.y, x4.z, x4.w};
    const float inv = wo ? 1.0f / sqrtf(block_sum(ov[0] * ov[0] + ov[1] * ov[1] + ov[2] * ov[2] + ov[3] * ov[3]) / (float)cols + eps) : 1.0f;
    float ss2 = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float add = wo ? ov[e] * inv * wov[e] : ov[e];
        xv[e] = (xv[e] + add) * scale;
        ss2 += xv[e] * xv[e];
    }
    if (in) *reinterpret_cast<float4 *>(xr + c) = make_float4(xv[0], xv[1], xv[2], xv[3]);
    if (!wh) return;
    const float inv2 = 1.0f / sqrtf(block_sum(ss2) / (float)cols + eps);
    if (!in) return;
#pragma unroll
    for (int e = 0; e < 4; e++) st(h, blockIdx.x, c + e, xv[e] * inv2 * whv[e]);
}

static bool aligned4(cf_tensor t) { return (uintptr_t)t.data % 16 == 0 && t.stride % 4 == 0; }

extern "C" cudaError_t cfk_add_norm(cudaStream_t st, cf_tensor x, cf_tensor o, cf_tensor w_o, float scale, cf_tensor h, cf_tensor w_h,
                                    float eps, float w_offset) {
    if (!h.data) w_h.data = NULL;
    /* the weights' type: both present ones alike, f32 or bf16 */
    const cf_dtype wt = w_o.data ? w_o.dtype : w_h.data ? w_h.dtype : CF_F32;
    const bool row = x.dtype == CF_F32 && o.dtype == CF_F32 && x.cols % 4 == 0 && x.cols <= 4096 && aligned4(x) && aligned4(o) &&
                     (wt == CF_F32 || wt == CF_BF16) && (!w_o.data || w_o.dtype == wt) && (!w_h.data || w_h.dtype == wt);
    if (row) {
        const dim3 grid((unsigned)x.rows), block((unsigned)((x.cols / 4 + 31) / 32 * 32));
        if (wt == CF_F32)
            return launch(add_norm_row_kernel<float>, grid, block, 0, st, (float *)x.data, x.stride, (const float *)o.data, o.stride,
                          (const float *)w_o.data, scale, tv(h), (const float *)w_h.data, x.cols, eps, w_offset);
        return launch(add_norm_row_kernel<__nv_bfloat16>, grid, block, 0, st, (float *)x.data, x.stride, (const float *)o.data, o.stride,
                      (const __nv_bfloat16 *)w_o.data, scale, tv(h), (const __nv_bfloat16 *)w_h.data, x.cols, eps, w_offset);
    }
    int threads = (int)((x.cols + ADD_NORM_PER - 1) / ADD_NORM_PER);
    threads = threads < 256 ? 256 : (threads + 31) / 32 * 32;
    if (threads > 1024) return cudaErrorInvalidValue;   /* rows of at most 8192 values */
    return launch(add_norm_kernel, dim3((unsigned)x.rows), dim3(threads), 0, st, tv(x), tv(o), tv(w_o), scale, tv(h), tv(w_h), x.cols, eps,
                  w_offset);
}

/* One block per (row, head) of q, k and v (blockIdx.y: q heads, then k heads, then v heads): the head's
 * values in shared memory, RMS-normed where its weight is set (the weights fetched before waiting for the
 * kernel ahead), turned by RoPE (q, k), written back and, for k and v with a store, written to the cache
 * slot too (the values as rounded in the tensor). */
struct QkvPost {
    TV t[3], w[3];
    int heads[3], dim[3];
    float off[3];
    float eps;
    TV pos, inv_freq;
    int half;   /* rot_dim / 2; 0: no RoPE */
    TV cache[3];   /* [0] unused */
    TV idx;
    int pos0, cap;
};

__global__ void __launch_bounds__(128) qkv_post_kernel(QkvPost a) {
    __shared__ float buf[CFK_QKV_MAX_HEAD];
    const int64_t r = blockIdx.x;
    int which = 0, hd = blockIdx.y;
    if (hd >= a.heads[0]) {
        hd -= a.heads[0];
        which = 1;
        if (hd >= a.heads[1]) hd -= a.heads[1], which = 2;
    }
    const TV t = a.t[which], w = a.w[which];
    const int d = a.dim[which];
    const int64_t c0 = (int64_t)hd * d;
    float wv[CFK_QKV_MAX_HEAD / 128];
    if (w.p)
        for (int e = 0, i = threadIdx.x; i < d; i += blockDim.x, e++) wv[e] = ld(w, 0, i) + a.off[which];
    pdl_wait();
    pdl_launch_next();
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float v = ld(t, r, c0 + i);
        buf[i] = v;
        ss += v * v;
    }
    if (w.p) {
        const float inv = 1.0f / sqrtf(block_sum(ss) / (float)d + a.eps);
        for (int e = 0, i = threadIdx.x; i < d; i += blockDim.x, e++) buf[i] = buf[i] * inv * wv[e];
    }
    __syncthreads();
    float outv[CFK_QKV_MAX_HEAD / 128];
    const bool rope = which < 2 && a.half > 0;
    const float p = rope ? (float)((const int32_t *)a.pos.p)[r * a.pos.stride] : 0.0f;
    for (int e = 0, i = threadIdx.x; i < d; i += blockDim.x, e++) {
        float v = buf[i];
        if (rope && i < 2 * a.half) {
            const int f = i < a.half ? i : i - a.half;
            float sn, cs;
            sincosf(p * ld(a.inv_freq, 0, f), &sn, &cs);
            v = i < a.half ? buf[i] * cs - buf[i + a.half] * sn : buf[i] * cs + buf[i - a.half] * sn;
        }
        outv[e] = rounded(v, t.dt);
    }
    const TV cache = a.cache[which];
    int64_t slot = 0;
    if (cache.p) {
        slot = a.idx.p ? (int64_t)((const int32_t *)a.idx.p)[r * a.idx.stride] : (int64_t)a.pos0 + r;
        if (a.cap) slot %= a.cap;
    }
    for (int e = 0, i = threadIdx.x; i < d; i += blockDim.x, e++) {
        st(t, r, c0 + i, outv[e]);
        if (cache.p) st(cache, slot, c0 + i, outv[e]);
    }
}

extern "C" cudaError_t cfk_qkv_post(cudaStream_t st, const cf_qkv_args *q) {
    const int own = q->own_kv, store = own && q->dest.k_cache.data != NULL;
    QkvPost a = {};
    a.t[0] = tv(q->q), a.w[0] = tv(q->q_norm), a.heads[0] = q->n_heads, a.dim[0] = q->head_dim, a.off[0] = q->w_offset;
    if (own) {
        a.t[1] = tv(q->k), a.w[1] = tv(q->k_norm), a.heads[1] = q->n_kv_heads, a.dim[1] = q->head_dim, a.off[1] = q->w_offset;
        if (q->v_norm.data || store) a.t[2] = tv(q->v), a.w[2] = tv(q->v_norm), a.heads[2] = q->n_kv_heads;
        a.dim[2] = q->v_head_dim, a.off[2] = 0.0f;
    }
    if (q->head_dim > CFK_QKV_MAX_HEAD || q->v_head_dim > CFK_QKV_MAX_HEAD) return cudaErrorInvalidValue;
    a.eps = q->eps;
    a.pos = tv(q->pos), a.inv_freq = tv(q->inv_freq);
    a.half = q->rot_dim >= 2 ? q->rot_dim / 2 : 0;
    if (store) a.cache[1] = tv(q->dest.k_cache), a.cache[2] = tv(q->dest.v_cache);
    a.idx = tv(q->dest.idx), a.pos0 = q->dest.pos0, a.cap = q->dest.cap;
    const int heads = a.heads[0] + a.heads[1] + a.heads[2];
    return launch(qkv_post_kernel, dim3((unsigned)q->q.rows, (unsigned)heads), dim3(128), 0, st, a);
}

__global__ void convert_kernel(void *dst, int to, const void *src, int from, int64_t n) {
    pdl_wait();
    pdl_launch_next();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        st_elem(dst, to, i, ld_elem(src, from, i));
}

extern "C" cudaError_t cfk_convert(cudaStream_t st, void *dst, cf_dtype to, const void *src, cf_dtype from, int64_t n) {
    int64_t blocks = ceil_div(n, 256);
    return launch(convert_kernel, dim3((unsigned)(blocks < 4096 ? blocks : 4096)), dim3(256), 0, st, dst, (int)to, src, (int)from, n);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_random_kernel(TV t, int64_t rows, int64_t cols, uint64_t seed, float scale) {
    pdl_wait();
    pdl_launch_next();
    const int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i);
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        st(t, i / cols, i % cols, (2.0f * u - 1.0f) * scale);
    }
}

extern "C" cudaError_t cfk_fill_random(cudaStream_t st, cf_tensor t, uint64_t seed, float scale) {
    int64_t blocks = ceil_div(t.rows * t.cols, 256);
    return launch(fill_random_kernel, dim3((unsigned)(blocks < 8192 ? blocks : 8192)), dim3(256), 0, st, tv(t), t.rows, t.cols, seed, scale);
}
