/* k_sample.cu: choosing tokens on the device so that only ids cross to the host. One block of 1024
 * threads per logits row, except argmax over up to CFK_PICK_ROWS rows: many blocks a row.
 *
 * argmax: largest value, ties to the lowest index (-0 equals +0); -1 for a row holding a NaN or +inf, which
 * the host reports as non-finite logits.
 * sample: p_i = exp((l_i - max) / T) (unnormalized). top-k, top-p and min-p each keep a prefix of the
 * total order (p desc, id asc), so together they keep its first N = min(N_k, N_p, N_min) tokens. The
 * boundaries are found without sorting by radix descent over the bits of p (non-negative floats order
 * like their bit patterns): four passes of 256-bin histograms (counts, and mass for top-p). The draw
 * walks the survivors in id order: each thread owns a contiguous id range, a block scan finds the range
 * where the cumulative mass passes u * total, and that thread walks its range. */
#include "backend/cuda/k_common.cuh"

#define NT 1024

struct ArgMax {
    float v;
    int64_t i;
};

__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
    return a;
}

__device__ ArgMax block_argmax(ArgMax m) {
    __shared__ float sv[32];
    __shared__ long long si[32];
    for (int o = 16; o > 0; o >>= 1) {
        ArgMax t = {__shfl_xor_sync(0xffffffffu, m.v, o), (int64_t)__shfl_xor_sync(0xffffffffu, (long long)m.i, o)};
        m = better(m, t);
    }
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) { sv[w] = m.v; si[w] = m.i; }
    __syncthreads();
    m = ArgMax{sv[0], si[0]};
    for (int k = 1; k < (int)(blockDim.x >> 5); k++) m = better(m, ArgMax{sv[k], si[k]});
    return m;
}

/* NaN never wins here; *nonfinite (where given, the same for every thread) says whether the row holds a
 * NaN or +inf. */
__device__ ArgMax row_argmax(TV lg, int64_t r, int64_t V, bool *nonfinite = nullptr) {
    ArgMax m = {-INFINITY, V};
    bool nf = false;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        const float v = ld(lg, r, i);
        nf |= !(v < INFINITY);
        if (v > m.v || (m.i == V && v == -INFINITY)) { m.v = v; m.i = i; }
    }
    m = block_argmax(m);
    if (nonfinite) *nonfinite = __syncthreads_or(nf) != 0;
    return m.i == V ? ArgMax{-INFINITY, 0} : m;
}

__global__ void __launch_bounds__(NT) argmax_kernel(TV lg, TV ids, int64_t V) {
    pdl_wait();
    pdl_launch_next();
    bool nonfinite;
    const ArgMax m = row_argmax(lg, blockIdx.x, V, &nonfinite);
    if (threadIdx.x == 0) ((int32_t *)ids.p)[blockIdx.x * ids.stride] = nonfinite ? -1 : (int32_t)m.i;
}

/* The same spread over many blocks per row, for the latency of one row: each block folds the best of its
 * slice into the row's 64-bit key (the value's bits made to order as unsigned, then the index inverted, so
 * atomicMax keeps the largest value and, among equals, the lowest index; 0: nothing seen), and the row's
 * last block writes the id and clears the key and the block count. A NaN or +inf takes the key AM_NONFINITE,
 * above every value's, and the row's id is then -1. */
#define AM_NT 256
#define AM_SLICE 2048   /* values per block */
#define AM_NONFINITE 0xffffffffffffffffull

__device__ __forceinline__ unsigned long long am_key(float v, int64_t i) {
    uint32_t u = __float_as_uint(v);
    if (v == 0.0f) u = 0;
    u = u & 0x80000000u ? ~u : u | 0x80000000u;
    return (unsigned long long)u << 32 | (0xffffffffu - (uint32_t)i);
}

__global__ void __launch_bounds__(AM_NT) argmax_wide_kernel(TV lg, TV ids, int64_t V, unsigned long long *state) {
    __shared__ unsigned long long wk[AM_NT / 32];
    pdl_wait();
    pdl_launch_next();
    const int64_t r = blockIdx.y, i0 = (int64_t)blockIdx.x * AM_SLICE;
    const int64_t i1 = min(V, i0 + AM_SLICE);
    unsigned long long k = 0;
#pragma unroll 4
    for (int64_t i = i0 + threadIdx.x; i < i1; i += AM_NT) {
        const float v = ld(lg, r, i);
        k = max(k, v < INFINITY ? am_key(v, i) : AM_NONFINITE);
    }
    for (int o = 16; o > 0; o >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, o));
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) wk[w] = k;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int j = 1; j < AM_NT / 32; j++) k = max(k, wk[j]);
    unsigned long long *best = state + 2 * r, *count = best + 1;
    if (k) atomicMax(best, k);
    __threadfence();
    if (atomicAdd(count, 1ull) != gridDim.x - 1) return;
    __threadfence();
    k = atomicExch(best, 0ull);
    *count = 0;
    ((int32_t *)ids.p)[r * ids.stride] = k == AM_NONFINITE ? -1 : k ? (int32_t)(0xffffffffu - (uint32_t)k) : 0;
}

extern "C" cudaError_t cfk_argmax(cudaStream_t st, cf_tensor ids, cf_tensor logits, unsigned long long *state) {
    if (logits.rows <= CFK_PICK_ROWS && logits.cols > AM_SLICE)
        return launch(argmax_wide_kernel, dim3((unsigned)ceil_div(logits.cols, AM_SLICE), (unsigned)logits.rows), dim3(AM_NT), 0, st,
                      tv(logits), tv(ids), logits.cols, state);
    return launch(argmax_kernel, dim3((unsigned)logits.rows), dim3(NT), 0, st, tv(logits), tv(ids), logits.cols);
}

/* ---- sampling ---- */

struct SampleArgs {
    TV lg, ids, u;
    int64_t V;
    float inv_t, top_p, min_p;
    int64_t top_k;
};

struct Row {
    TV lg;
    int64_t r, V;
    float M, inv_t;
    __device__ float p(int64_t i) const {
        const float v = expf((ld(lg, r, i) - M) * inv_t);
        return v == v ? v : 0.0f;
    }
};

/* The boundary of a prefix of the order (p desc, id asc): t = the key at which it ends, above = how many
 * keys exceed t (with their mass), ties = how many equal t. */
struct Bound {
    uint32_t t;
    int64_t above, ties;
    double mass_above;
};

/* Descends to the key where the running count (by_mass: mass) of keys >= floor, taken largest first,
 * reaches target. */
__device__ Bound descend(const Row &row, bool by_mass, double target, uint32_t floor_key) {
    __shared__ unsigned hc[256];
    __shared__ float hm[256];
    __shared__ uint32_t s_prefix;
    __shared__ long long s_above, s_ties;
    __shared__ double s_mass;
    uint32_t prefix = 0, mask = 0;
    if (threadIdx.x == 0) { s_prefix = 0; s_above = 0; s_mass = 0.0; }
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) { hc[b] = 0; hm[b] = 0.0f; }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < row.V; i += blockDim.x) {
            const float pv = row.p(i);
            const uint32_t key = __float_as_uint(pv);
            if ((key & mask) == prefix && key >= floor_key) {
                const int b = (key >> shift) & 255;
                atomicAdd(&hc[b], 1u);
                atomicAdd(&hm[b], pv);   /* by count too: callers use mass_above */
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            long long above = s_above;
            double mass = s_mass;
            int pick = -1, last = 0;
            for (int b = 255; b >= 0; b--) {
                if (!hc[b]) continue;
                last = b;
                if (by_mass ? mass + hm[b] >= target : (double)(above + hc[b]) >= target) { pick = b; break; }
                above += hc[b];
                mass += hm[b];
            }
            if (pick < 0) {   /* rounding left the target just out of reach: take the smallest key */
                pick = last;
                above -= hc[last];
                mass -= hm[last];
            }
            s_prefix |= (uint32_t)pick << shift;
            s_above = above;
            s_mass = mass;
            s_ties = hc[pick];
        }
        __syncthreads();
        prefix = s_prefix;
        mask |= 0xffu << shift;
    }
    Bound bd = {prefix, s_above, s_ties, s_mass};
    __syncthreads();
    return bd;
}

/* Exclusive scan over the block of one value per thread (thread order); *total gets the sum. */
template <typename T>
__device__ T block_exclusive_scan(T v, T *total) {
    __shared__ T ws[32];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    T x = v;
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) ws[w] = x;
    __syncthreads();
    if (w == 0) {
        T s = lane < nw ? ws[lane] : T(0);
        for (int o = 1; o < 32; o <<= 1) {
            T y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        if (lane < nw) ws[lane] = s;
    }
    __syncthreads();
    const T before = (w ? ws[w - 1] : T(0)) + x - v;
    *total = ws[nw - 1];
    __syncthreads();
    return before;
}

__global__ void __launch_bounds__(NT) sample_kernel(SampleArgs a) {
    __shared__ int s_pick;
    pdl_wait();
    pdl_launch_next();
    const int64_t r = blockIdx.x, V = a.V;
    int32_t *out = (int32_t *)a.ids.p + r * a.ids.stride;
    const ArgMax best = row_argmax(a.lg, r, V);
    if (!(a.inv_t < INFINITY) || best.v == -INFINITY) {
        if (threadIdx.x == 0) *out = (int32_t)best.i;
        return;
    }
    const Row row = {a.lg, r, V, best.v, a.inv_t};

    /* N = min(N_k, N_p, N_min), and the boundary of the first N */
    int64_t N = V;
    Bound bd = {0, 0, V, 0.0};
    if (a.top_k > 0 && a.top_k < V) {
        bd = descend(row, false, (double)a.top_k, 0);
        N = a.top_k;
    }
    if (a.top_p < 1.0f) {
        const float tval = __uint_as_float(bd.t);
        const double kept = N == V ? -1.0 : bd.mass_above + (double)(N - bd.above) * tval;
        double total = kept;
        if (kept < 0) {
            float s = 0.0f;
            for (int64_t i = threadIdx.x; i < V; i += blockDim.x) s += row.p(i);
            total = block_sum(s);
        }
        const Bound bp = descend(row, true, a.top_p * total, N == V ? 0u : bd.t);
        const float pv = __uint_as_float(bp.t);
        int64_t need = pv > 0 ? (int64_t)ceil((a.top_p * total - bp.mass_above) / pv) : bp.ties;
        need = need < 1 ? 1 : need > bp.ties ? bp.ties : need;
        if (bp.above + need < N) {
            N = bp.above + need;
            bd = bp;
        }
    }
    if (a.min_p > 0.0f) {
        float c = 0.0f;
        for (int64_t i = threadIdx.x; i < V; i += blockDim.x) c += row.p(i) >= a.min_p ? 1.0f : 0.0f;
        const int64_t nm = (int64_t)block_sum(c);
        if (nm >= 1 && nm < N) {
            N = nm;
            bd = descend(row, false, (double)N, 0);
        }
    }
    const int64_t tie_quota = N == V ? V : N - bd.above;
    const uint32_t t = N == V ? 0u : bd.t;

    /* the draw, in id order over each thread's contiguous range */
    const int64_t seg = (V + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * seg, hi = min(V, lo + seg);
    long long my_ties = 0;
    for (int64_t i = lo; i < hi; i++) my_ties += __float_as_uint(row.p(i)) == t;
    long long all_ties;
    const long long tie_base = block_exclusive_scan<long long>(my_ties, &all_ties);
    float my_mass = 0.0f;
    long long tr = tie_base;
    for (int64_t i = lo; i < hi; i++) {
        const float pv = row.p(i);
        const uint32_t key = __float_as_uint(pv);
        if (key > t || (key == t && tr++ < tie_quota)) my_mass += pv;
    }
    float total;
    const float before = block_exclusive_scan<float>(my_mass, &total);
    const float target = ld(a.u, r, 0) * total;
    if (threadIdx.x == 0) s_pick = -1;
    __syncthreads();
    if (my_mass > 0.0f && before <= target && (target < before + my_mass || before + my_mass >= total)) {
        float c = before;
        int64_t pick = -1;
        tr = tie_base;
        for (int64_t i = lo; i < hi; i++) {
            const float pv = row.p(i);
            const uint32_t key = __float_as_uint(pv);
            if (key > t || (key == t && tr++ < tie_quota)) {
                pick = i;
                c += pv;
                if (target < c) break;
            }
        }
        atomicMax(&s_pick, (int)pick);
    }
    __syncthreads();
    if (threadIdx.x == 0) *out = s_pick >= 0 ? s_pick : (int32_t)best.i;
}

extern "C" cudaError_t cfk_sample(cudaStream_t st, cf_tensor ids, cf_tensor logits, cf_tensor u, const cf_sample_args *s) {
    const float inv_t = s->temperature > 0 ? 1.0f / s->temperature : INFINITY;
    SampleArgs a = {tv(logits), tv(ids), tv(u), logits.cols, inv_t, s->top_p, s->min_p, (int64_t)s->top_k};
    return launch(sample_kernel, dim3((unsigned)logits.rows), dim3(NT), 0, st, a);
}
