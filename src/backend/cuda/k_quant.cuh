/* k_quant.cuh: the value arithmetic of k_quant.cu's kernels, host and device alike, so that a host test
 * (tests/quant/test_qkernel_host.cu) checks the bit tricks and the index math against the reference dequantizer
 * without a GPU: values of a 16-byte chunk dotted with x (the GEMV), the tensor-core GEMV's pairs, and the B fragment
 * pieces of the tensor-core GEMM. */
#ifndef CF_BACKEND_CUDA_K_QUANT_CUH
#define CF_BACKEND_CUDA_K_QUANT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <vector_types.h>
#include <string.h>

/* unrolled on the device; the host compiler knows no such pragma */
#ifdef __CUDA_ARCH__
#define QK_UNROLL _Pragma("unroll")
#else
#define QK_UNROLL
#endif

__host__ __device__ __forceinline__ float q_as_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* CUDA's __byte_perm: byte n of the result is byte (s >> 4n) & 7 of the 8 bytes {x (0-3), y (4-7)} */
__host__ __device__ __forceinline__ uint32_t q_byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (uint32_t)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
#endif
}

/* 2^23 + m as a float (m < 2^23) minus 2^23: m exactly, with one LOP3 / PRMT and one FADD (no I2F) */
__host__ __device__ __forceinline__ float magic(uint32_t m) { return q_as_float(m | 0x4B000000u) - 8388608.0f; }

/* sum_e x[e] * q[e] over the 32 4-bit values of a chunk. Nibble i of a word (value 8m + i) is taken in place,
 * times 16^(i % 4) (the high half shifted down once), into accumulator i % 4, which is scaled back by 16^-(i % 4)
 * at the end: exact powers of two, so the products round as x * q would. */
__host__ __device__ __forceinline__ float dot_q4(uint4 w, const float (&x)[32]) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
QK_UNROLL
    for (int m = 0; m < 4; m++) {
        const uint32_t lo = u[m], hi = u[m] >> 16;
        a0 = fmaf(x[8 * m + 0], magic(lo & 0xFu), a0);
        a1 = fmaf(x[8 * m + 1], magic(lo & 0xF0u), a1);
        a2 = fmaf(x[8 * m + 2], magic(lo & 0xF00u), a2);
        a3 = fmaf(x[8 * m + 3], magic(lo & 0xF000u), a3);
        a0 = fmaf(x[8 * m + 4], magic(hi & 0xFu), a0);
        a1 = fmaf(x[8 * m + 5], magic(hi & 0xF0u), a1);
        a2 = fmaf(x[8 * m + 6], magic(hi & 0xF00u), a2);
        a3 = fmaf(x[8 * m + 7], magic(hi & 0xF000u), a3);
    }
    return fmaf(a3, 1.0f / 4096.0f, fmaf(a2, 1.0f / 256.0f, fmaf(a1, 1.0f / 16.0f, a0)));
}

/* byte i of u as a float: PRMT builds 0x4B0000bb */
__host__ __device__ __forceinline__ float q8(uint32_t u, int i) { return q_as_float(q_byte_perm(u, 0x4B000000u, 0x7440 + i)) - 8388608.0f; }

/* sum_e x[e] * q[e] over the 16 8-bit values of a chunk */
__host__ __device__ __forceinline__ float dot_q8(uint4 w, const float (&x)[16]) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    float a = 0.0f, b = 0.0f;
QK_UNROLL
    for (int m = 0; m < 4; m++) {
        a = fmaf(x[4 * m + 0], q8(u[m], 0), a);
        b = fmaf(x[4 * m + 1], q8(u[m], 1), b);
        a = fmaf(x[4 * m + 2], q8(u[m], 2), a);
        b = fmaf(x[4 * m + 3], q8(u[m], 3), b);
    }
    return a + b;
}

/* bf16 pair (a in the low half), rounded to nearest even */
__host__ __device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);   /* .x = a in the low half */
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* ---- the tensor-core GEMV (bf16 x): one m16n8k16 MMA covers 16 MMA rows x 16 values of k x 8 activation rows.
 * Thread (g, t) = (lane / 4, lane % 4) of a warp holds a 32-bit word of packed values of MMA rows g and g + 8 and
 * the same values of x of activation row g. The four threads of a quad hold words of one group, so each MMA stays
 * inside one group. The MMA's k slots 2t, 2t + 1, 2t + 8, 2t + 9 of thread (g, t) hold, in k16 step s:
 * - 4 bits (8 values a word, two steps): values 2s, 2s + 4, 2s + 1, 2s + 5 of the word;
 * - 8 bits (4 values a word, one step of two MMAs): values 0, 2, 1, 3 of the word, whose low nibbles go into the first
 *   MMA as 128 + lo and whose high nibbles into the second as 16 (128 + hi), into the same sums.
 * The same permutation of k on both sides, so each product is still a dot product.
 * MMA row 15 is the sum row: its words are zero, so its pairs are (128, 128) in the first MMA of a word and (0, 0) in
 * the second at 8 bits (tc_wpairs8's hi = 0), and its sums are 128 sum(x) over the group, exact powers of two times
 * the sums of x that the offsets and biases need (tc_group_end); rows 0-14 are weight rows. */

/* (a & m) | c in one instruction: with m and c in registers nvcc emits one lop3, where with two immediates it emits
 * two */
__host__ __device__ __forceinline__ uint32_t q_and_or(uint32_t a, uint32_t m, uint32_t c) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
    return d;
#else
    return (a & m) | c;
#endif
}

/* p[i] = (128 + nibble i, 128 + nibble i + 4) of w as a bf16 pair (exact: 128 + q with q < 16), i < 4: one shift and
 * one lop3 a pair, no conversion. The 128 is taken out per group through the sum of x. */
__host__ __device__ __forceinline__ void tc_wpairs(uint32_t w, uint32_t (&p)[4]) {
    const uint32_t m = 0x000F000Fu, c = 0x43004300u;
    p[0] = q_and_or(w, m, c);
    p[1] = q_and_or(w >> 4, m, c);
    p[2] = q_and_or(w >> 8, m, c);
    p[3] = q_and_or(w >> 12, m, c);
}

/* x values v0 .. v7 (bf16, v0 in the low half of x.x) as the pairs (v0, v4), (v1, v5), (v2, v6), (v3, v7) */
__host__ __device__ __forceinline__ void tc_xpairs(uint4 x, uint32_t (&p)[4]) {
    p[0] = q_byte_perm(x.x, x.z, 0x5410);
    p[1] = q_byte_perm(x.x, x.z, 0x7632);
    p[2] = q_byte_perm(x.y, x.w, 0x5410);
    p[3] = q_byte_perm(x.y, x.w, 0x7632);
}

/* 8 bits: p[0] = (128 + lo v0, 128 + lo v2), p[1] = (128 + lo v1, 128 + lo v3), p[2], p[3] the same with hi | hi
 * nibble: with hi = TC_HI8 (bf16 0x4500 | hi = 2048 + 16 hi, exact), 16 hi + lo = q, so the two MMAs on p[0, 1] and
 * p[2, 3] with the same x sum x (q + 2176); the sum row passes hi = 0 (and zero words) */
constexpr uint32_t TC_HI8 = 0x45004500u;
__host__ __device__ __forceinline__ void tc_wpairs8(uint32_t w, uint32_t (&p)[4], uint32_t hi) {
    const uint32_t m = 0x000F000Fu, lo = 0x43004300u;
    p[0] = q_and_or(w, m, lo);
    p[1] = q_and_or(w >> 8, m, lo);
    p[2] = q_and_or(w >> 4, m, hi);
    p[3] = q_and_or(w >> 12, m, hi);
}

/* 8 bits: x values v0 .. v3 as the pairs (v0, v2), (v1, v3), twice (both MMAs of the word take the same x) */
__host__ __device__ __forceinline__ void tc_xpairs8(uint2 x, uint32_t (&p)[4]) {
    p[0] = p[2] = q_byte_perm(x.x, x.y, 0x5410);
    p[1] = p[3] = q_byte_perm(x.x, x.y, 0x7632);
}

/* step s of a word (8 bits: MMA s of the word): the A fragment (rows g, g + 8) from the two rows' pairs, the B
 * fragment from x's pairs */
__host__ __device__ __forceinline__ void tc_frags(const uint32_t (&pa)[4], const uint32_t (&pb)[4], const uint32_t (&xp)[4], int s,
                                                  uint32_t (&a)[4], uint32_t (&b)[2]) {
    a[0] = pa[2 * s];
    a[1] = pb[2 * s];
    a[2] = pa[2 * s + 1];
    a[3] = pb[2 * s + 1];
    b[0] = xp[2 * s];
    b[1] = xp[2 * s + 1];
}

/* (scale, bias) from a bf16 or f16 pair word (the scale in the low half) */
__host__ __device__ __forceinline__ float2 tc_sb(uint32_t u, int f16) {
    if (!f16) return make_float2(q_as_float(u << 16), q_as_float(u & 0xffff0000u));
#ifdef __CUDA_ARCH__
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
#else
    __half_raw lo, hi;
    lo.x = (unsigned short)(u & 0xffffu);
    hi.x = (unsigned short)(u >> 16);
    return make_float2(__half2float(__half(lo)), __half2float(__half(hi)));
#endif
}

/* a group's end: acc += scale * sum((off + q) x) + (bias - off scale) * sum(x), for the thread's four (weight row,
 * activation row) sums: c[0, 1] MMA row g, c[2, 3] row g + 8, activation rows 2t, 2t + 1; s0, s1: the sum row's
 * results for activation rows 2t, 2t + 1 (128 sum(x)); off: 128 (4 bits) or 2176 */
__host__ __device__ __forceinline__ void tc_group_end(float (&acc)[4], const float (&c)[4], float s0, float s1, float2 sa, float2 sb,
                                                      float off) {
    const float ba = fmaf(-off, sa.x, sa.y) * (1.0f / 128.0f), bb = fmaf(-off, sb.x, sb.y) * (1.0f / 128.0f);
    acc[0] = fmaf(sa.x, c[0], fmaf(ba, s0, acc[0]));
    acc[1] = fmaf(sa.x, c[1], fmaf(ba, s1, acc[1]));
    acc[2] = fmaf(sb.x, c[2], fmaf(bb, s0, acc[2]));
    acc[3] = fmaf(sb.x, c[3], fmaf(bb, s1, acc[3]));
}

/* ---- the tensor-core GEMM's B fragments (qmma_async_kernel): thread (g, t) of an m16n8k16 MMA takes values 2t,
 * 2t + 1 (register b0 b1) and 2t + 8, 2t + 9 (b2 b3) of its weight row in each k16 step. At 4 bits those are the two
 * nibbles of byte t of the step's first and second word; at 8 bits bytes 2(t & 1), + 1 of word t / 2 and of word
 * 2 + t / 2 of the step's four. */

/* byte_perm selector that puts byte t of w in byte 0 and byte t of w >> 4 in byte 2 */
__host__ __device__ __forceinline__ uint32_t qa_sel(int t) { return (uint32_t)(t | (t << 4) | ((t + 4) << 8) | ((t + 4) << 12)); }

/* byte t's nibbles (lo, hi) as the bf16 pair (128 + lo, 128 + hi): exact, one PRMT and one LOP3 */
__host__ __device__ __forceinline__ uint32_t qa_nibbles(uint32_t w, uint32_t sel) {
    return q_and_or(q_byte_perm(w, w >> 4, sel), 0x000F000Fu, 0x43004300u);
}

/* byte t's nibbles as the bf16 pair fmaf(scale, q, bias) (f32, then rounded) */
__host__ __device__ __forceinline__ uint32_t qa_pair4(uint32_t w, int t, float scale, float bias) {
    const uint32_t u = w >> (8 * t);
    return pack_bf16(fmaf(scale, magic(u & 0xFu), bias), fmaf(scale, magic((u >> 4) & 0xFu), bias));
}

/* bytes e, e + 1 of w as the bf16 pair fmaf(scale, q, bias) */
__host__ __device__ __forceinline__ uint32_t qa_pair8(uint32_t w, int e, float scale, float bias) {
    return pack_bf16(fmaf(scale, q8(w, e), bias), fmaf(scale, q8(w, e + 1), bias));
}

#endif
