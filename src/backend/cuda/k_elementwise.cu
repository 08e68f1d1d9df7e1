/* k_elementwise.cu: the memory-light ops: elementwise maps (add, mul, scale, softcap, GLU, copy, fill),
 * embedding gather, RMSNorm (one block per row), RoPE, KV-cache stores, dtype conversion, random fill.
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
            case CFK_MUL: v = ld(e.a, r, c) * ld(e.b, rb, c); break;
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

__global__ void embed_kernel(TV out, TV table, TV ids, int64_t cols, float scale) {
    pdl_wait();
    pdl_launch_next();
    const int64_t i = blockIdx.x;
    const int64_t id = ((const int32_t *)ids.p)[i * ids.stride];
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) st(out, i, c, ld(table, id, c) * scale);
}

extern "C" cudaError_t cfk_embed(cudaStream_t st, cf_tensor out, cf_tensor table, cf_tensor ids, float scale) {
    return launch(embed_kernel, dim3((unsigned)out.rows), dim3(256), 0, st, tv(out), tv(table), tv(ids), out.cols, scale);
}

__global__ void rmsnorm_kernel(TV out, TV x, TV w, int64_t rows, int64_t cols, float eps, float w_offset) {
    pdl_wait();
    pdl_launch_next();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float ss = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = ld(x, r, c);
            ss += v * v;
        }
        ss = block_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) st(out, r, c, ld(x, r, c) * inv * (ld(w, 0, c) + w_offset));
    }
}

extern "C" cudaError_t cfk_rmsnorm(cudaStream_t st, cf_tensor out, cf_tensor x, cf_tensor w, float eps, float w_offset) {
    int64_t t = (x.cols / 4 + 31) / 32 * 32;
    int threads = (int)(t < 32 ? 32 : t > 1024 ? 1024 : t);
    dim3 grid((unsigned)(x.rows < 65535 ? x.rows : 65535));
    return launch(rmsnorm_kernel, grid, dim3(threads), 0, st, tv(out), tv(x), tv(w), x.rows, x.cols, eps, w_offset);
}

/* In each head, (x[i], x[i + rot/2]) rotates by pos * inv_freq[i]. */
__global__ void rope_kernel(TV x, TV pos, TV inv_freq, int n_heads, int head_dim, int half) {
    pdl_wait();
    pdl_launch_next();
    const int64_t t = blockIdx.x;
    const float p = (float)((const int32_t *)pos.p)[t * pos.stride];
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        const int h = j / half, i = j % half;
        float sn, cs;
        sincosf(p * ld(inv_freq, 0, i), &sn, &cs);
        const int64_t c = (int64_t)h * head_dim + i;
        const float a = ld(x, t, c), b = ld(x, t, c + half);
        st(x, t, c, a * cs - b * sn);
        st(x, t, c + half, b * cs + a * sn);
    }
}

extern "C" cudaError_t cfk_rope(cudaStream_t st, cf_tensor x, cf_tensor pos, int n_heads, int head_dim, int rot_dim, cf_tensor inv_freq) {
    const int half = rot_dim / 2;
    int threads = n_heads * half < 256 ? (n_heads * half + 31) / 32 * 32 : 256;
    return launch(rope_kernel, dim3((unsigned)x.rows), dim3(threads), 0, st, tv(x), tv(pos), tv(inv_freq), n_heads, head_dim, half);
}

__global__ void kv_store_kernel(TV cache, TV src, int64_t cols, int pos0, const int32_t *pos, int64_t pos_stride, int cap) {
    pdl_wait();
    pdl_launch_next();
    const int64_t i = blockIdx.x;
    const int64_t slot = (pos ? (int64_t)pos[i * pos_stride] : pos0 + i) % cap;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) st(cache, slot, c, ld(src, i, c));
}

extern "C" cudaError_t cfk_kv_store(cudaStream_t st, cf_tensor cache, cf_tensor src, int pos0, cf_tensor pos, int cap) {
    return launch(kv_store_kernel, dim3((unsigned)src.rows), dim3(256), 0, st, tv(cache), tv(src), src.cols, pos0,
                  (const int32_t *)pos.data, pos.stride, cap);
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
